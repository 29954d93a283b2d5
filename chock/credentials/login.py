"""`chock login` and `chock logout`: a provider credential checked, then stored with its index entry.

    chock login --provider KIND[=URL] [--name NAME] [--model M] [--password-method prompt|stdin|file=PATH]
                [--replace]

`--provider mcp=URL` stores a credential for a remote MCP server instead (docs/mcp.md#credentials): its index
entry's address is the URL's origin, the only origin it is ever sent to. It is not checked against anything
first: MCP has no request that proves a credential without starting a session with the server.

The replace question comes before the credential is read, so answering no costs nothing; with nobody to
ask (a pipe, `--password-method file=…`, CI) a name that exists is refused instead, because silence is not
a yes: only `--replace` replaces, and `--name <another name>` stores beside it. The credential is checked
against the provider before anything is stored; then the login lock is taken, the name is checked again
under it (a login that started while another sat at its prompt is told the name is taken), and the
credential and the index entry are written: both or neither. Nothing here prints: questions go through
`ask`, notices through `say`, and the outcome is returned.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from chock.config import Config
from chock.credentials.instance_index import IndexEntry, read_index, write_index
from chock.credentials.login_lock import login_lock
from chock.credentials.refusals import CredentialError, NameTaken
from chock.credentials.stores import Store, default_store, open_store
from chock.credentials.stores.file import FileStore
from chock.credentials.stores.secretspec import env_name
from chock.errors import ChockError, UsageError
from chock.paths import Layout
from chock.providers.kinds import CREDENTIAL_KINDS, MCP_SERVER, parse_kind, without_userinfo

PASSWORD_METHODS = "prompt, stdin or file=PATH"
# The most a credential may be, in characters (bytes from a file), line break included: a provider's key is a few
# hundred, and reading stops here, so `< /dev/zero` or the wrong file is refused rather than read to its end.
MAX_CREDENTIAL = 8192
# A byte-order mark: an editor may put it first in a file, and a copy of the file carries it along.
BOM = "\ufeff"
# An instance name is a word a person types: letters, digits, `_`, `.`, `-`; short enough for any keystore.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
YES = ("y", "yes")
REDACTED = "[redacted]"

Asker = Callable[[str], str]
Sayer = Callable[[str], None]
Checker = Callable[[str, str, str], None]


@dataclass(frozen=True)
class LoginResult:
    name: str
    kind: str
    address: str
    store: str  # where the credential went (or would have gone)
    stored: bool  # False: the person answered no to the replace question, and nothing was stored
    replaced: bool  # a credential of this name was there before


def login(
    layout: Layout,
    config: Config,
    provider_text: str,
    name: str | None = None,
    model: str | None = None,
    password_method: str | None = None,
    replace: bool = False,
    interactive: bool | None = None,
    *,
    ask: Asker | None = None,
    read_hidden: Callable[[str], str] | None = None,
    stdin: TextIO | None = None,
    say: Sayer | None = None,
    check: Checker | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoginResult:
    """Check a credential against its provider and store it, with its index entry, under the login lock.

    `interactive`: standard input is a terminal (default: ask `sys.stdin`). `ask(question) -> answer` puts the
    replace question; `read_hidden(prompt)` reads a secret without echo (default getpass); `stdin` is what
    `--password-method stdin` reads one line from; `check(kind, address, credential)` is the provider check
    (default `chock.providers.registry.check_credential`); `environ` is where `CI` is looked for.
    """
    environ = os.environ if environ is None else environ
    terminal = sys.stdin.isatty() if interactive is None else interactive
    ci = bool(environ.get("CI"))
    kind, address = _provider(provider_text)
    if kind == MCP_SERVER and model is not None:
        raise UsageError("--model is for a model provider; an MCP server's credential (mcp=URL) has no model")
    instance = kind if name is None else name
    _check_name(instance)
    method, secret_file = _password_method(password_method, terminal)

    entries = read_index(layout)
    _refuse_collision(instance, entries, config)
    _refuse_other_kind(instance, kind, config)
    before = entries.get(instance)
    if before is not None and not replace:
        nobody = _nobody_to_ask(terminal, ci, method)
        if nobody is not None:  # silence is not a yes, even when --name names the instance on purpose
            raise NameTaken(_taken_message(instance, before, provider_text, name, nobody))
        answer = (ask or _ask_terminal)(replace_question(instance, before))
        if answer.strip().lower() not in YES:
            return LoginResult(instance, kind, address, before.stored, stored=False, replaced=False)

    store_name = config.credential_store or default_store()
    store = open_store(store_name, layout, can_prompt=terminal and not ci)
    store.check(instance)  # a store that cannot work says so before a secret is typed
    secret = _read_secret(method, secret_file, kind, instance, read_hidden, stdin)
    if kind != MCP_SERVER:
        _check_with_provider(check, kind, address, secret)

    entry = IndexEntry(kind=kind, address=address, model=model, stored=store_name)
    with login_lock(layout):
        entries = read_index(layout)
        _refuse_collision(instance, entries, config)
        now = entries.get(instance)
        if now is not None and now != before and not replace:
            raise NameTaken(_late_message(instance, now, provider_text, name))
        _write_both(layout, entries, instance, entry, store, secret)
        if now is not None and now.stored != store_name:
            # Under the lock too: removing it from the file store rewrites tokens.zon, which another login may be
            # writing a credential of its own to.
            _remove_old(layout, instance, now.stored, say)
    return LoginResult(instance, kind, address, store_name, stored=True, replaced=now is not None)


def logout(
    layout: Layout,
    config: Config,
    name: str,
    *,
    interactive: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> IndexEntry:
    """Remove `name`'s credential from the store its index entry names, and the entry, under the login lock.

    Returns the entry that was removed. Like login, both go or neither does.
    """
    environ = os.environ if environ is None else environ
    terminal = sys.stdin.isatty() if interactive is None else interactive
    with login_lock(layout):
        entries = read_index(layout)
        entry = entries.get(name)
        if entry is None:
            raise CredentialError(_no_credential_message(layout, config, name))
        store = open_store(entry.stored, layout, can_prompt=terminal and not environ.get("CI"))
        previous = _previous_value(store, name)
        store.delete(name)
        del entries[name]
        try:
            write_index(layout, entries)
        except BaseException:
            if previous is not None:
                store.set(name, previous)
            raise
    return entry


def replace_question(instance: str, existing: IndexEntry) -> str:
    """The replace question; no is the default."""
    return (
        f'chock login: there is already a credential named "{instance}", stored as kind {existing.kind}.\n'
        "Replace it? [y/N]"
    )


# ---- the steps -----------------------------------------------------------------------------------------


def _provider(text: str) -> tuple[str, str]:
    if text.partition("=")[0] == MCP_SERVER:
        return MCP_SERVER, _mcp_origin(text.partition("=")[2])
    try:
        kind, address = parse_kind(text)
    except ChockError as error:  # it quotes the value it could not use, which may hold a password
        raise type(error)(without_userinfo(str(error))) from None
    if kind not in CREDENTIAL_KINDS:
        raise UsageError(
            f"kind {kind} takes no credential, so there is nothing to log in to; "
            f"chock login takes --provider {' | '.join(CREDENTIAL_KINDS[:2])} | openai-compat=URL | mcp=URL"
        )
    import urllib.parse  # here: a login is not on a session's path

    parts = urllib.parse.urlsplit(address)
    if "@" in parts.netloc:
        bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        raise UsageError(
            f"the address {without_userinfo(address)} has a user name or password in it, which is refused: the "
            "credential chock login stores is sent in a header of its own, and the address's user:password would "
            f"be sent instead, as Basic authentication. Nothing was stored. Give the address without it: "
            f"--provider {shlex.quote(f'{kind}={bare}')}"
        )
    return kind, address


def _mcp_origin(url: str) -> str:
    """`mcp=URL`: the origin a remote MCP server's credential is bound to (https, or http to this machine)."""
    from chock.mcp.declarations import DeclarationError, check_url, origin_of

    if not url:
        raise UsageError("--provider mcp=URL needs the server's URL, as mcp=https://tracker.example/mcp")
    try:
        return origin_of(check_url(url, "--provider mcp=URL"))
    except DeclarationError as error:
        raise UsageError(str(error)) from None


def _check_name(instance: str) -> None:
    if not NAME_RE.fullmatch(instance):
        raise UsageError(
            f"{instance!r} cannot name an instance: use up to 64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )


def _password_method(text: str | None, terminal: bool) -> tuple[str, Path | None]:
    """prompt is the default at a terminal, stdin otherwise; file=PATH reads the file."""
    if text is None:
        return ("prompt" if terminal else "stdin"), None
    if text == "prompt":
        if not terminal:
            raise UsageError(
                "--password-method prompt needs a terminal; pipe the credential in with --password-method "
                "stdin, or use --password-method file=PATH"
            )
        return "prompt", None
    if text == "stdin":
        return "stdin", None
    if text.startswith("file=") and text[len("file=") :]:
        return "file", Path(text[len("file=") :]).expanduser()
    # Not echoed: a credential typed in the wrong place must not come back on the screen.
    raise UsageError(f"--password-method takes {PASSWORD_METHODS}")


def _nobody_to_ask(terminal: bool, ci: bool, method: str) -> str | None:
    """Why there is nobody to ask (a pipe, a file, any CI job), or None when someone is there."""
    if ci:
        return "CI is set"
    if method == "file":
        return "the credential comes from a file"
    if not terminal:
        return "standard input is not a terminal"
    return None


def _taken_message(instance: str, before: IndexEntry, provider_text: str, name: str | None, why: str) -> str:
    return (
        f'chock login: there is already a credential named "{instance}", stored as kind {before.kind}, and '
        f"with nobody to ask ({why}) it is not replaced. Nothing was stored. {_ways_out(provider_text, name)}"
    )


def _late_message(instance: str, now: IndexEntry, provider_text: str, name: str | None) -> str:
    """The repeat check under the lock: another login stored this name while this one ran."""
    return (
        f'chock login: the name "{instance}" is taken: another chock login stored a credential by that name '
        f"(kind {now.kind}) while this one ran. Nothing was stored. {_ways_out(provider_text, name)}"
    )


def _ways_out(provider_text: str, name: str | None) -> str:
    """Both ways on from a taken name, as commands: replace it, or store beside it under another name."""
    login = f"chock login --provider {shlex.quote(without_userinfo(provider_text))}"
    named = f"{login} --name {shlex.quote(name)}" if name is not None else login
    return f"Say which you meant:\n  {named} --replace\n  {login} --name <another name>"


def _refuse_collision(instance: str, entries: Mapping[str, IndexEntry], config: Config) -> None:
    """Two names with one CHOCK_<NAME> form would share one SecretSpec secret."""
    wanted = env_name(instance)
    for other in sorted(set(entries) | set(config.instances)):
        if other != instance and env_name(other) == wanted:
            raise NameTaken(
                f'the name "{instance}" is kept as {wanted}, which instance "{other}" already uses; '
                "nothing was stored: choose another --name"
            )


def _refuse_other_kind(instance: str, kind: str, config: Config) -> None:
    configured = config.instances.get(instance)
    if configured is not None and configured.kind != kind:
        raise NameTaken(
            f'{config.path} defines instance "{instance}" as kind {configured.kind}, so a {kind} credential '
            f"would be sent to the wrong provider; nothing was stored. Log in with --provider "
            f"{configured.kind} --name {shlex.quote(instance)}, or choose another --name."
        )


def _ask_terminal(question: str) -> str:
    sys.stderr.write(question + " ")
    sys.stderr.flush()
    return sys.stdin.readline()


def _read_secret(
    method: str,
    secret_file: Path | None,
    kind: str,
    instance: str,
    read_hidden: Callable[[str], str] | None,
    stdin: TextIO | None,
) -> str:
    if method == "prompt":
        try:
            text = (read_hidden or getpass.getpass)(
                f'chock login: the {kind} credential for "{instance}" (typing is hidden): '
            )
        except EOFError:
            text = ""
    elif method == "stdin":
        stream = stdin or sys.stdin
        try:
            text = stream.readline(MAX_CREDENTIAL + 1)
        except UnicodeDecodeError:
            raise UsageError(_not_text(method, secret_file)) from None
    else:
        assert secret_file is not None
        try:
            with secret_file.open("rb") as handle:
                data = handle.read(MAX_CREDENTIAL + 1)
        except OSError as exc:
            raise UsageError(f"cannot read the credential from {secret_file}: {exc.strerror or exc}") from None
        if len(data) > MAX_CREDENTIAL:
            raise UsageError(_too_long(method, secret_file))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(_not_text(method, secret_file)) from None
    if len(text) > MAX_CREDENTIAL:
        raise UsageError(_too_long(method, secret_file))
    if any("\ud800" <= char <= "\udfff" for char in text):  # bytes that were no UTF-8, kept as surrogates
        raise UsageError(_not_text(method, secret_file))
    secret = text.strip()
    if secret.startswith(BOM):
        secret = secret[len(BOM) :].strip()
    source = _source(method, secret_file)
    if not secret:
        hint = ": pipe the credential in, or use --password-method file=PATH" if method == "stdin" else ""
        raise UsageError(f"no credential was given ({source} was empty); nothing was stored{hint}")
    if any(char.isspace() or ord(char) < 0x20 or ord(char) == 0x7F for char in secret):
        raise UsageError(
            f"the credential from {source} has spaces, line breaks or control characters in it, and a key is "
            "one line with none; nothing was stored"
        )
    from chock.providers.transport import header_safe  # here: only a login that got this far needs it

    if not header_safe(secret):
        # Never which character: it may be part of the secret.
        raise UsageError(
            f"the credential from {source} has a character outside printable ASCII in it (a letter such as é, "
            "or an invisible one a copy can carry along, such as a zero-width space), and an HTTP header carries "
            "none, so every request would fail; nothing was stored. Copy the key again from where it was issued"
        )
    return secret


def _not_text(method: str, secret_file: Path | None) -> str:
    return (
        f"the credential from {_source(method, secret_file)} is not UTF-8 text, so it holds no key; nothing was "
        "stored. Copy the key again from where it was issued"
    )


def _too_long(method: str, secret_file: Path | None) -> str:
    return (
        f"the credential from {_source(method, secret_file)} is longer than {MAX_CREDENTIAL // 1024} KiB, which no "
        "provider's key is, so it was not read to its end; nothing was stored. Check that it is the key you meant"
    )


def _source(method: str, secret_file: Path | None) -> str:
    return {"prompt": "the prompt", "stdin": "standard input"}.get(method, str(secret_file))


def _check_with_provider(check: Checker | None, kind: str, address: str, secret: str) -> None:
    """GET <address>/models with the credential; a rejection fails the login with the provider's status."""
    if check is None:
        from chock.providers.registry import check_credential

        check = check_credential
    try:
        check(kind, address, secret)
    except ChockError as exc:
        text = str(exc)
        if secret not in text:
            raise
        raise type(exc)(text.replace(secret, REDACTED)) from None


def _write_both(
    layout: Layout,
    entries: dict[str, IndexEntry],
    instance: str,
    entry: IndexEntry,
    store: Store,
    secret: str,
) -> None:
    """The credential, then the index entry; when the index cannot be written the credential is undone."""
    previous = _previous_value(store, instance)
    store.set(instance, secret)
    try:
        write_index(layout, {**entries, instance: entry})
    except BaseException as exc:
        try:
            if previous is not None:
                store.set(instance, previous)
            else:
                store.delete(instance)
        except ChockError as undo:
            raise CredentialError(
                f"could not write {layout.instances_path} ({_reason(exc)}), and taking the credential "
                f"back out of the {store.name} store failed too ({undo}); run "
                f"`chock logout {shlex.quote(instance)}`"
            ) from None
        if isinstance(exc, OSError):
            raise CredentialError(
                f"could not write {layout.instances_path} ({_reason(exc)}); nothing was stored"
            ) from None
        raise


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__


def _previous_value(store: Store, instance: str) -> str | None:
    """What the store holds for `instance` now, to put back if the index write fails (unknown: None)."""
    try:
        return store.get(instance)
    except ChockError:
        return None


def _remove_old(layout: Layout, instance: str, old_store: str, say: Sayer | None) -> None:
    """A replaced credential that lived in another store is removed from there (best effort, said aloud)."""
    try:
        open_store(old_store, layout).delete(instance)
    except ChockError as exc:
        if say is not None:
            say(f'chock login: the old credential for "{instance}" is still in the {old_store} store: {exc}')


def _no_credential_message(layout: Layout, config: Config, name: str) -> str:
    text = f'there is no credential named "{name}" stored by chock login'
    configured = config.instances.get(name)
    if configured is not None and configured.token is not None:
        return f"{text}; its .token is written in {config.path}, which Chock never edits: remove it there"
    if name in FileStore(layout.tokens_path).names():
        return f"{text}; {layout.tokens_path} holds a token by that name with no index entry: remove it there"
    return text
