"""The wires Chock speaks between its processes, sans-I/O on both ends (docs/protocol.md).

- `framing`           error codes, bounds, field escaping and the line framer every wire shares
- `message`           requests, replies and `LineProtocol`, the table of one kind of socket
- `greeting`          the numbered greeting every connection opens with
- `daemon_protocol`   the control protocol `chock daemon` serves: its verbs, requests and replies
- `session_protocol`  a session's own approval.sock and handover.sock
- `connection`        `ServerConnection` and `ClientConnection`: every rule of an exchange, bytes in, events out,
                      and the server's deadlines on the caller's clock
- `address`           where a daemon listens, as a person writes it
- `client`            the blocking pumps every command uses (`ControlClient`, `SessionClient`)
- `async_client`      the asyncio pump serve uses (`AsyncControlClient`)
"""
