"""Whether a front end's port can be listened on, checked before any model loads: a server whose port
is taken fails at once, naming the port, the address and the flag or option that chose it, with the
fix, instead of loading every model first and then failing to listen. `port_problem` words it for
`tcli serve` (every taken port in one line); `PortInUseError` is what the in-process server raises,
also when a front end fails to bind after the check (another program took the port meanwhile).
"""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Listener:
    flag: str  # the command-line flag that sets the port, e.g. "--http-port"
    address: str
    port: int
    reuse_port: bool = False


@dataclass(frozen=True)
class BindProblem:
    """Why a listener's address and port cannot be listened on now."""

    taken: bool  # another socket listens there (EADDRINUSE): the port is in use
    reason: str  # the system's words, e.g. "Address already in use"


def bind_problem(listener: Listener) -> BindProblem | None:
    """Binds the listener's address and port as the front ends bind them (SO_REUSEADDR, so that a port
    left in TIME_WAIT by an earlier server counts as free; SO_REUSEPORT with --reuse-*-port; IPv6 also
    taking IPv4), then releases them at once; None when that works. The one probe behind both
    `tcli serve`'s check and the in-process server's."""
    if listener.port == 0:
        return None
    try:
        infos = socket.getaddrinfo(
            listener.address or None, listener.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as error:
        return BindProblem(False, f"cannot resolve the address: {error.strerror or error}")
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if listener.reuse_port:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            probe.bind(where)
        except OSError as error:
            return BindProblem(error.errno == errno.EADDRINUSE, error.strerror or str(error))
    return None


def port_problem(listeners: list[Listener]) -> str | None:
    """One line naming each port that cannot be listened on, with its flag and the fix; None when every
    port is free. Two flags given the same port count as a problem too."""
    by_port: dict[int, list[str]] = {}
    for listener in listeners:
        if listener.port:
            by_port.setdefault(listener.port, []).append(listener.flag)
    for port, flags in by_port.items():
        if len(flags) > 1:
            return f"{' and '.join(flags)} are both {port}: give each front end its own port"
    taken = []
    for listener in listeners:
        problem = bind_problem(listener)
        if problem is None:
            continue
        if not problem.taken:  # an address not on this machine, a privileged port
            return f"{listener.flag} {listener.port} on {listener.address}: cannot listen there ({problem.reason})"
        taken.append(listener)
    if not taken:
        return None
    named = [f"{listener.flag} {listener.port}" for listener in taken]
    what = named[0] + " is" if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1] + " are"
    fix = " ".join(f"{listener.flag} 0" for listener in taken)
    # first Triton's own line for the service it would have failed on first (scripts grep for it)
    first = min(taken, key=lambda listener: list(_SERVICES).index(listener.flag))
    triton = (
        f"failed to start {_SERVICES[first.flag]} service: Unavailable - Socket "
        f"'{first.address}:{first.port}' already in use"
    )
    return (
        f"{triton}; {what} in use (another server listens there): stop that server, or pick other ports "
        f"({fix} takes free ones)"
    )


# the front ends in the order tritonserver starts them, named as its start-up errors name them
_SERVICES = {"--grpc-port": "GRPC", "--http-port": "HTTP", "--metrics-port": "Metrics"}


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
