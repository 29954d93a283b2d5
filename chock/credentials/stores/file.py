"""The file store: `<data>/tokens.zon`, `.{ .work = "token" }`, 0600 in a 0700 directory.

Readable by this account and no other, which is the guarantee the Secret Service gives against other
accounts; what a keystore adds is encryption at rest and being locked with the session
(docs/credentials.md#the-stores). Chock rewrites this file whole and atomically, only under the login lock; a
copy another user can read or write, or owns, or one in a data dir another user can write in, is refused by
name rather than used.
"""

from __future__ import annotations

from pathlib import Path

from chock import zon
from chock.credentials.files import check_data_dir, check_ours, check_private, read_zon_struct, write_private
from chock.credentials.refusals import CredentialError

WHAT = "the file store"


class FileStore:
    name = "file"

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileStore({str(self.path)!r})"

    def check(self, instance: str | None = None) -> None:
        self._check(f"using {WHAT}")

    def get(self, instance: str) -> str | None:
        return self.read().get(instance)

    def set(self, instance: str, value: str) -> None:
        tokens = self.read()
        tokens[instance] = value
        self._write(tokens)

    def delete(self, instance: str) -> None:
        tokens = self.read()
        if tokens.pop(instance, None) is not None:
            self._write(tokens)

    def read(self) -> dict[str, str]:
        """Every token by instance name; no file is no tokens. Refused when others can read the file."""
        self._check(f"reading a credential from {WHAT}")
        if not self.path.exists():
            return {}
        data = read_zon_struct(self.path, WHAT) or {}
        for name, value in data.items():
            if not isinstance(value, str) or isinstance(value, zon.EnumLiteral):
                raise CredentialError(f"{self.path}: {zon.dot_name(name)} must be a string; fix or remove it")
        return dict(data)

    def names(self) -> list[str]:
        """The instance names that have a token here (never the tokens)."""
        return list(self.read())

    def _check(self, acting: str) -> None:
        """Refused when another user owns the data dir or tokens.zon, or may write either, or may read tokens.zon."""
        check_data_dir(self.path.parent, acting)
        check_ours(self.path, "the credential a lookup returns", acting)
        if self.path.exists():
            check_private(self.path, acting)

    def _write(self, tokens: dict[str, str]) -> None:
        write_private(self.path, zon.dumps(tokens))
