"""Serving an ASGI app over HTTP/1.1 from the running event loop: uvicorn's server with tcli's
transport (http_transport.py), bound to the address the settings name."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Any

from server.frontends.http_transport import CoalescingHttpToolsProtocol


@dataclass
class HttpServerHandle:
    """A running HTTP server: its bound `port`, and `shutdown()` (stop accepting, finish what is in
    flight, close)."""

    port: int
    _server: Any
    _sockets: list[socket.socket]
    _app: Any

    async def shutdown(self) -> None:
        server = self._server
        server.should_exit = True
        await server.shutdown(sockets=self._sockets)
        close = getattr(self._app, "close", None)
        if callable(close):
            close()


def _bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # --reuse-http-port: several servers on one port, the kernel spreads connections
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(app: Any, host: str, port: int, *, reuse_port: bool = False) -> HttpServerHandle:
    """Serve `app` on host:port (0: any free port; the handle tells which) from the running event loop
    with uvicorn's httptools protocol. Signals are left to the caller; raises OSError when the address
    cannot be bound."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=CoalescingHttpToolsProtocol,
        loop="none",
        lifespan="off",
        ws="none",
        interface="asgi3",
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=10,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    sock = _bind(host, port, reuse_port)
    try:
        await server.startup(sockets=[sock])
    except BaseException:
        sock.close()
        raise
    return HttpServerHandle(int(sock.getsockname()[1]), server, [sock], app)
