"""What a credential failure says: what was refused, why, and the next thing to type (docs/credentials.md).

No message here ever holds a credential. Messages built in a keystore child travel back by `kind`, so the
parent raises the same class the child meant (`by_kind`).
"""

from __future__ import annotations

from chock.errors import ChockError, Refused

# The fix every "this store cannot work here" message ends with: the store that needs no desktop session.
FILE_STORE_HINT = 'or choose the file store in config.zon: .credentials = .{ .store = "file" }'


class CredentialError(ChockError):
    """A credential could not be read, stored or removed."""

    kind = "failed"


class StoreUnavailable(CredentialError):
    """The configured store cannot work here (no bus, no collection, an error from the store itself)."""

    kind = "unavailable"


class StoreLocked(StoreUnavailable):
    """The store is locked and there is no way to ask the person to unlock it (or they dismissed the ask)."""

    kind = "locked"


class NobodyAnswered(StoreUnavailable):
    """An unlock prompt was shown somewhere and nobody answered it within the bound."""

    kind = "nobody_answered"


class NoLoginKeychain(StoreUnavailable):
    """macOS: the account has no login keychain at all (an account only ever reached over ssh)."""

    kind = "no_keychain"


class StoreTimeout(StoreUnavailable):
    """A keystore call did not finish within the bound and its process was killed."""

    kind = "timeout"


class SecretSpecRefused(CredentialError):
    """SecretSpec refused (an undeclared secret, a read-only provider); the message repeats its own words."""

    kind = "secretspec"


class InsecureFile(Refused):
    """A file that holds tokens can be read by other users: refused by name, before anything starts."""

    kind = "insecure_file"


class LoginBusy(CredentialError):
    """Another `chock login` holds the login lock. Says so and nothing else: no credential, no instance."""

    kind = "busy"


class NameTaken(Refused):
    """The instance name is already used (or its CHOCK_<NAME> form is), and nothing says to replace it."""

    kind = "name_taken"


_BY_KIND = {
    cls.kind: cls
    for cls in (
        CredentialError,
        StoreUnavailable,
        StoreLocked,
        NobodyAnswered,
        NoLoginKeychain,
        StoreTimeout,
        SecretSpecRefused,
        InsecureFile,
    )
}


def by_kind(kind: str) -> type[CredentialError] | type[InsecureFile]:
    """The class a child's `{"kind": …}` names; an unknown kind is a plain StoreUnavailable."""
    return _BY_KIND.get(kind, StoreUnavailable)
