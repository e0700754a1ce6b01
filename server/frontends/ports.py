"""Whether a front end's port can be listened on, and the error that says which one cannot: the port,
the address and the setting that chose it, with the fix. A server asks before it loads a model (so a
taken port costs no loading), and again when a front end failed to bind (to name the one)."""

from __future__ import annotations

import errno
import socket


class PortInUseError(OSError):
    """A front end cannot listen: `setting` is the flag or option that chose `port` on `address`."""

    def __init__(self, setting: str, address: str, port: int, reason: str) -> None:
        super().__init__(
            errno.EADDRINUSE,
            f"cannot listen on {address}:{port} ({setting} {port}): {reason}; "
            f"give another port with {setting}, or 0 for any free one",
        )
        self.setting = setting
        self.address = address
        self.port = port
        self.reason = reason


def bind_failure(address: str, port: int) -> str | None:
    """Why `address:port` cannot be listened on now (None: it can), asked as the front ends bind: with
    SO_REUSEADDR, so a port left in TIME_WAIT by an earlier server counts as free."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as error:
        return f"cannot resolve the address: {error.strerror or error}"
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as error:
            return (error.strerror or str(error)).lower()
    return None
