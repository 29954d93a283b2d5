"""The control protocol (SPEC §6) and the session-socket lines (SPEC §5), shared by every end of every wire.

`protocol` is the codec and does no I/O: names and numbers, bounds, error codes, field escaping, the line
framer (`LineBuffer`) and a client's reader of reply lines over it (`ReplyReader`), the greeting, one typed
request per verb with its parser and encoder, the reply encoders and decoders, and `ServerConnection` for
the daemon's and the session's side of a connection. `client` is the one blocking client built on it, and
the only place here that touches a socket: addresses, `connect()` / `ControlClient` for the daemon,
`SessionSocketClient` for a session's approval.sock and handover.sock.
"""
