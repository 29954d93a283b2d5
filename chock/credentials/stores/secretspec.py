"""The SecretSpec store: the credential lives wherever SecretSpec is configured to keep secrets.

Chock implements none of SecretSpec's backends. Secrets are `CHOCK_<NAME>`, declared in the project's
`secretspec.toml` (found the way SecretSpec finds it: the current directory or a parent).

- Reading goes through the `secretspec` Python SDK, which is resolve-only and so read-only by construction.
  Its native code cannot be interrupted and hangs on a keyring prompt nobody answers, so it runs in the
  keystore child (`chock.credentials._child`), killed at the bound.
- Writing goes through the CLI, `secretspec set CHOCK_<NAME>`, with the value on stdin (SecretSpec reads a
  piped stdin to its end): never the positional VALUE, which would be argv.

A declared secret with no value is "not stored yet", like every store. An undeclared secret or a read-only
provider is refused, repeating what SecretSpec said. SecretSpec keeps an audit log of key names in its own
state dir; that is its business (docs/credentials.md#facts-the-stores-are-built-on).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chock.credentials import _child
from chock.credentials.refusals import SecretSpecRefused, StoreUnavailable

NAME = "secretspec"
COMMAND = "secretspec"
# SecretSpec records a reason with each access where its providers audit one, and may require one.
REASON = "chock: the model provider credential for a chock instance"
OTHER_STORE_HINT = 'or choose another store in config.zon (such as .credentials = .{ .store = "file" })'
UNDECLARED_WORDS = "is not defined in profile"
READ_ONLY_WORDS = "read-only"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def env_name(instance: str) -> str:
    """`CHOCK_<NAME>`, the secret that holds an instance's credential: upper case, every character but A-Z
    and 0-9 made `_` (so two names can share one; login refuses the second)."""
    return "CHOCK_" + re.sub(r"[^A-Z0-9]", "_", instance.upper())


class SecretSpecStore:
    name = NAME

    def __repr__(self) -> str:
        return "SecretSpecStore()"

    def check(self, instance: str | None = None) -> None:
        _child.call(NAME, "check", name=env_name(instance) if instance else None)

    def get(self, instance: str) -> str | None:
        value = _child.call(NAME, "get", name=env_name(instance)).get("value")
        return value if isinstance(value, str) else None

    def set(self, instance: str, value: str) -> None:
        self._cli("set", env_name(instance), value)

    def delete(self, instance: str) -> None:
        self._cli("delete", env_name(instance), None)

    def _cli(self, verb: str, secret: str, value: str | None) -> None:
        bound = _child.keystore_timeout()
        done = _child.run_bounded(
            [COMMAND, verb, secret], input=value.encode() if value is not None else None, timeout=bound
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
    """SecretSpec's own message, without colours or line breaks (and, belt and braces, without the value)."""
    text = _ANSI.sub("", data.decode("utf-8", "replace"))
    if value:
        text = text.replace(value, "[redacted]")
    return " ".join(text.split())


def _next_step(words: str, secret: str) -> str:
    if UNDECLARED_WORDS in words:
        return f". Declare {secret} in your secretspec.toml, then run chock login again."
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
            f"`pip install secretspec` (the chock[secretspec] extra), {OTHER_STORE_HINT}"
        ) from None
    name = request.get("name")
    builder = secretspec.SecretSpec.builder()
    if hasattr(builder, "with_reason"):
        builder = builder.with_reason(REASON)
    try:
        return _serve(secretspec, builder, request["op"], name)
    except secretspec.SecretSpecError as exc:
        raise SecretSpecRefused(f"secretspec: {exc.message}") from None


def _serve(secretspec: Any, builder: Any, op: str, name: str | None) -> dict[str, Any]:
    if hasattr(builder, "report"):  # value-free: is it declared, and does it have a value?
        report = builder.report()
        entry = next((s for s in report.secrets if s.name == name), None)
        if name is not None and entry is None:
            # SecretSpec's own sentence for this (its CLI's `set` says the same).
            raise SecretSpecRefused(
                f"secretspec: Secret '{name}' is not defined in profile '{report.profile}'. Declare {name} "
                "in your secretspec.toml, then run chock login for this instance."
            )
        if op == "check":
            return {}
        if entry is not None and entry.status != "resolved":
            return {"value": None}  # declared, no value: not stored yet
    elif op == "check":
        builder.load()
        return {}
    try:
        resolved = builder.load()
    except secretspec.MissingRequiredError as exc:
        if name in exc.missing:
            return {"value": None}
        raise
    try:
        secret = resolved.secrets.get(name)
        if secret is None:
            return {"value": None}
        if getattr(secret, "as_path", False) and secret.path is not None:
            return {"value": Path(secret.path).read_text(encoding="utf-8").strip()}
        return {"value": secret.value}
    finally:
        close = getattr(resolved, "close", None)  # removes the temporary files of as_path secrets
        if close is not None:
            close()
