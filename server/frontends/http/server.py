"""Serving an ASGI app over HTTP/1.1 from the running event loop: tcli's own connection protocol
(http_protocol.py) on a socket bound to the address the settings name, through asyncio's documented
server API (`loop.create_server`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.frontends.http.direct import DirectInference
from server.frontends.http.limits import ConnectionLimits, sweep
from server.frontends.http.protocol import HttpProtocol, ServerState

GRACEFUL_SHUTDOWN_TIMEOUT = 10.0  # seconds shutdown waits for requests in flight


@dataclass
class HttpServerHandle:
    """A running HTTP server: its bound `port`, and `shutdown()` (stop accepting, finish what is in
    flight, close)."""

    port: int
    _server: asyncio.AbstractServer
    _state: ServerState
    _on_close: Callable[[], None] | None
    _sweeper: asyncio.Task[None]

    def stop_accepting(self) -> None:
        """No new connection (one arriving is refused); those open are served on."""
        self._server.close()

    @property
    def open_connections(self) -> int:
        return len(self._state.connections)

    async def shutdown(self) -> None:
        state = self._state
        state.shutting_down = True
        self._server.close()  # no new connections
        self._sweeper.cancel()
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now, busy ones once answered
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GRACEFUL_SHUTDOWN_TIMEOUT
        while (state.tasks or state.connections) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for task in list(state.tasks):  # past the grace period: cut short
            task.cancel()
        for connection in list(state.connections):
            connection.cancel()
        if state.tasks:
            await asyncio.wait(list(state.tasks), timeout=1.0)
        if self._on_close is not None:
            self._on_close()


def _bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # --reuse-http-port: several servers on one port, the kernel spreads connections
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:  # "::" serves IPv4 too
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(
    app: Any,
    host: str,
    port: int,
    *,
    reuse_port: bool = False,
    limits: ConnectionLimits | None = None,
    direct: DirectInference | None = None,
    on_close: Callable[[], None] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> HttpServerHandle:
    """Serve `app` (an ASGI 3 app) on host:port (0: any free port; the handle tells which) from the
    running event loop; `direct` (http_direct's interface, usually the same object) answers plain
    inference requests outside ASGI, and `on_close` runs once shutdown has finished; `limits` bound
    connections' timeouts and number (http_limits' defaults when None); with `ssl_context`
    (server/frontends/tls.py) it serves HTTPS. Signals are left to the caller; raises OSError when the
    address cannot be bound."""
    loop = asyncio.get_running_loop()
    limits = limits or ConnectionLimits()
    state = ServerState(app, loop, limits, direct)
    if ssl_context is not None:
        state.scheme = "https"
    sock = _bind(host, port, reuse_port)
    try:
        server = await loop.create_server(
            lambda: HttpProtocol(state), sock=sock, backlog=2048, ssl=ssl_context
        )
    except BaseException:
        sock.close()
        raise
    sweeper = loop.create_task(sweep(state.connections, limits))
    return HttpServerHandle(int(sock.getsockname()[1]), server, state, on_close, sweeper)
