"""The SecretSpec store: the credential lives wherever SecretSpec is configured to keep secrets.

Chock implements none of SecretSpec's backends. Secrets are `CHOCK_<NAME>`, declared by Chock itself: project
`chock`, profile `default`, each secret optional, with no default and nothing to generate. SecretSpec never
looks for a `secretspec.toml` in the working directory or its parents, which may be a project (written by
the agent, or cloned) that could otherwise run a command on the host (`type = "command"` generation), or choose
the value a lookup returns. Both halves run in `<data>/secretspec/`, Chock's own, where a relative provider
path such as `dotenv://.env` is resolved. Which provider holds the secrets is the person's SecretSpec
configuration (`SECRETSPEC_PROVIDER`, or `secretspec config global init`).

- Reading goes through the `secretspec` Python SDK (0.21 or later) with the declaration given inline, which is
  resolve-only and so read-only by construction. Its native code cannot be interrupted and hangs on a keyring
  prompt nobody answers, so it runs in the keystore child (`chock.credentials._child`), killed at the bound.
- Writing goes through the CLI, `secretspec --file <data>/secretspec/secretspec.toml set CHOCK_<NAME>`, the
  manifest written by Chock just before, with the value on stdin (SecretSpec reads a piped stdin to its
  end): never the positional VALUE, which would be argv.

A secret with no value is "not stored yet", like every store. A read-only provider is refused, repeating what
SecretSpec said. SecretSpec keeps an audit log of key names in its own state dir; that is its business
(docs/credentials.md#facts-the-stores-are-built-on).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.credentials import _child
from chock.credentials.files import check_dir_ours, write_private
from chock.credentials.refusals import SecretSpecRefused, StoreUnavailable
from chock.paths import ensure_dir

NAME = "secretspec"
COMMAND = "secretspec"
# SecretSpec records a reason with each access where its providers audit one, and may require one.
REASON = "chock: the model provider credential for a chock instance"
OTHER_STORE_HINT = 'or choose another store in config.zon (such as .credentials = .{ .store = "file" })'
READ_ONLY_WORDS = "read-only"
# Chock's declaration: its own project and profile, whatever manifest or profile a directory or the
# environment names.
PROJECT = "chock"
REVISION = "1.0"
PROFILE = "default"
MANIFEST = "secretspec.toml"
DESCRIPTION = "a credential stored by chock login"
# The first SDK with inline declarations (`with_inline_spec`): an older one would look for a manifest in the
# working directory, so it is refused.
SDK_NEEDED = "0.21"


def env_name(instance: str) -> str:
    """`CHOCK_<NAME>`, the secret that holds an instance's credential: upper case, every character but A-Z
    and 0-9 made `_` (so two names can share one; login refuses the second)."""
    return "CHOCK_" + re.sub(r"[^A-Z0-9]", "_", instance.upper())


# The secret a check with no instance asks about, one of the CHOCK_<NAME> secrets: the check is value-free (only
# whether the provider answers), so an instance of the same name changes nothing.
CHECK_SECRET = env_name("store check")


def declaration(secret: str) -> dict[str, Any]:
    """Chock's declaration of `secret`, as the SDK takes it inline: optional, no default, nothing generated."""
    return {
        "project": {"name": PROJECT, "revision": REVISION},
        "profiles": {PROFILE: {"secrets": {secret: {"description": DESCRIPTION, "required": False}}}},
    }


def manifest_text(secret: str) -> str:
    """The same declaration as a `secretspec.toml`, for the CLI (`secret` is `CHOCK_` and [A-Z0-9_] only)."""
    return (
        "# Written by chock login before each write through the secretspec CLI; Chock's lookups declare the\n"
        "# same secret inline. Edits here are overwritten.\n"
        f'[project]\nname = "{PROJECT}"\nrevision = "{REVISION}"\n\n'
        f'[profiles.{PROFILE}]\n{secret} = {{ description = "{DESCRIPTION}", required = false }}\n'
    )


class SecretSpecStore:
    name = NAME

    def __init__(self, home: Path) -> None:
        self.home = home  # <data>/secretspec: Chock's own, where both halves run

    def __repr__(self) -> str:
        return f"SecretSpecStore({str(self.home)!r})"

    def check(self, instance: str | None = None) -> None:
        self._call("check", env_name(instance) if instance else CHECK_SECRET)

    def get(self, instance: str) -> str | None:
        value = self._call("get", env_name(instance)).get("value")
        return value if isinstance(value, str) else None

    def _call(self, op: str, secret: str) -> dict[str, Any]:
        self._ours()
        return _child.call(NAME, op, name=secret, options={"base_dir": str(self.home)}, cwd=self.home)

    def _ours(self) -> None:
        """The directory made (0700) when missing, and refused when another user owns it or may write in it."""
        check_dir_ours(
            self.home,
            "whoever can write in it can replace the manifest Chock gives SecretSpec, and the files a relative "
            "provider path reads, so the secretspec store is refused",
        )
        ensure_dir(self.home)

    def set(self, instance: str, value: str) -> None:
        self._cli("set", env_name(instance), value)

    def delete(self, instance: str) -> None:
        self._cli("delete", env_name(instance), None)

    def _cli(self, verb: str, secret: str, value: str | None) -> None:
        self._ours()
        manifest = self.home / MANIFEST
        write_private(manifest, manifest_text(secret))
        bound = _child.keystore_timeout()
        done = _child.run_bounded(
            [COMMAND, "--file", str(manifest), verb, "--profile", PROFILE, secret],
            input=value.encode() if value is not None else None,
            timeout=bound,
            cwd=self.home,
        )
        done.check_ran(
            f"{COMMAND} {verb} {secret}",
            missing=(
                f"the secretspec store writes through the `{COMMAND}` command, which is not on your PATH; "
                f"install SecretSpec (https://secretspec.dev), {OTHER_STORE_HINT}"
            ),
            bound=bound,
            stopped="was stopped",
        )
        if done.returncode == 0:
            return
        words = _words(done.stderr, value) or _words(done.stdout, value) or f"exit status {done.returncode}"
        raise SecretSpecRefused(f"secretspec refused to {verb} {secret}: {words}{_next_step(words, secret)}")


def _words(data: bytes, value: str | None) -> str:
    """SecretSpec's own message, on one line, without colours or a source snippet (and without the value)."""
    return _child.scrub(data.decode("utf-8", "replace"), value)


def _next_step(words: str, secret: str) -> str:
    if READ_ONLY_WORDS in words:
        return ". Configure a SecretSpec provider it can write to, then run chock login again."
    return ""


# ---- in the child ------------------------------------------------------------------------------------


def serve(request: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    try:
        import secretspec
    except ImportError:
        raise StoreUnavailable(
            "the secretspec store reads through SecretSpec's Python SDK, which is not installed here: "
            f"`pip install 'secretspec>={SDK_NEEDED}'` (the chock[secretspec] extra), {OTHER_STORE_HINT}"
        ) from None
    builder = secretspec.SecretSpec.builder()
    if not hasattr(builder, "with_inline_spec"):
        raise StoreUnavailable(
            f"SecretSpec's Python SDK here is older than {SDK_NEEDED}, which Chock needs: it gives SecretSpec its "
            f"own declaration, never a secretspec.toml found in a project. Upgrade it with `pip install --upgrade "
            f"'secretspec>={SDK_NEEDED}'`, {OTHER_STORE_HINT}"
        )
    name = str(request["name"])
    base_dir = str(request["options"]["base_dir"])
    builder = builder.with_inline_spec(declaration(name), base_dir).with_profile(PROFILE).with_reason(REASON)
    try:
        return _serve(builder, request["op"], name)
    except secretspec.SecretSpecError as exc:
        # Its words, never the snippet of the file they point into (a dotenv error quotes the line, secret and
        # all); the parent scrubs what comes back too.
        raise SecretSpecRefused(f"secretspec: {_child.scrub(exc.message) or exc.kind}") from None


def _serve(builder: Any, op: str, name: str) -> dict[str, Any]:
    if op == "check":
        builder.report()  # value-free: does the provider answer?
        return {}
    with builder.load() as resolved:  # declared optional: a secret with no value is simply absent
        secret = resolved.secrets.get(name)
        return {"value": None if secret is None else secret.value}
