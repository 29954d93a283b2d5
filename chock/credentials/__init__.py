"""Credentials: `chock login` / `chock logout`, the stores, the login lock, and the one lookup.

    login.py      login / logout: the replace question, the provider check, the lock, both files or neither
    lookup.py     lookup(), the one function a session asks for a credential; sources() for listing
    index.py      instances.zon, the instance index that only login and logout rewrite
    login_lock.py login.lock, the kernel's flock held over the credential and the index together
    stores/       one small interface (get / set / delete / check) and one module per store
    _child.py     the child process every keystore and SecretSpec call runs in, killed at a bound
    files.py      private files: written atomically 0600, refused by name when others can read them
    refusals.py   what each failure says to the person who has to act on it

A credential travels only through function arguments and the pipes of a child process: never argv, never an
environment variable, never a log line, an error message or a repr. This module imports nothing heavy, so
`import chock.credentials` costs nothing on a hot path.
"""
