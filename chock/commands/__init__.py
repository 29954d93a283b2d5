"""The commands a person types (docs/architecture.md#the-packages).

`cli` is the click group and puts every command under it; each family of commands is a module of its own, thin:
`run`, `sessions` (with `usage` and `plan`), `steer` (`stop`, `say`, `attach`, `approve`, `detach`),
`workspaces`, `machine` (`login`, `logout`, `credentials`, `doctor`, `completion`) and `service` (`daemon`,
`serve`), all made under the rules of `rules`. What a command does beyond parsing and printing is in the
packages, or, where only that command needs it, in a module of its own here: `listing` (`chock sessions`, which
also starts without click), `targets` (which session a steering command names, and the verb it sends),
`attach`, `detach`, `approve`, `doctor` and `completion`. `overview` is `chock --help`'s text and
`shared_options` the options several commands share, both read without click too, as is `run`, whose options
are a table its click twin is made from.

This file imports nothing: `chock --help`, `chock sessions` and a socket-activated `chock daemon` pass through
the package on their way to a module of it (docs/architecture.md#start-up).
"""
