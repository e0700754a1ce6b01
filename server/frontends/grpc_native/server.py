"""Listening: the native gRPC server on the running event loop, a sweep closing connections that
stall mid-frame, and its graceful shutdown (GOAWAY to every client, calls in flight finish for up to
`grace` seconds, then the calls still open end CANCELLED and connections close)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from server.frontends.grpc_native.calls import CallServer, MethodTable
from server.frontends.grpc_native.connection import Connection


@dataclass
class NativeGrpcServerHandle:
    """A running native gRPC server: its bound `port`, and `shutdown()`."""

    port: int
    server: asyncio.AbstractServer
    connections: set[Connection]
    frontend: Any  # closed after the connections (GrpcFrontend.close)
    sweeper: asyncio.Task[None] | None = None
    grace: float = 5.0
    _closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def shutdown(self) -> None:
        self.server.close()
        if self.sweeper is not None:
            self.sweeper.cancel()
        for connection in list(self.connections):
            connection.goaway()
        deadline = asyncio.get_running_loop().time() + self.grace
        while self.connections and asyncio.get_running_loop().time() < deadline:
            self._closed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), deadline - asyncio.get_running_loop().time())
        for connection in list(self.connections):  # calls still running after the grace are cancelled
            connection.cancel_calls()
            connection.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.server.wait_closed(), 1.0)
        self.frontend.close()

    def forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self._closed.set()


async def serve_native(
    register: Callable[[MethodTable], None],
    frontend: Any,
    host: str,
    port: int,
    *,
    max_message_size: int,
    generic_handlers: Iterable[grpc.GenericRpcHandler] = (),
    reuse_port: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    max_concurrent_streams: int = 1024,
    read_timeout: float = 30.0,
) -> NativeGrpcServerHandle:
    """Serve the services `register` adds to a MethodTable (plus `generic_handlers`) on host:port
    from the running event loop; port 0 takes any free port. With `ssl_context` (ALPN "h2", see
    server/frontends/tls.py) connections are TLS. Raises OSError when it cannot bind."""
    table = MethodTable()
    register(table)
    table.add_generic_rpc_handlers(generic_handlers)
    calls = CallServer(table, max_message_size)
    loop = asyncio.get_running_loop()
    handle: NativeGrpcServerHandle | None = None
    connections: set[Connection] = set()

    def closed(connection: Connection) -> None:
        if handle is not None:
            handle.forget(connection)

    def connect() -> Connection:
        connection = Connection(calls.open_call, closed, max_concurrent_streams)
        connections.add(connection)
        return connection

    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        server = await loop.create_server(connect, host, port, reuse_port=reuse_port or None, ssl=ssl_context)
    except OSError as exc:
        raise OSError(exc.errno, f"gRPC server could not bind {address}: {exc.strerror or exc}") from None
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    sweeper = loop.create_task(_sweep(connections, read_timeout))
    handle = NativeGrpcServerHandle(bound, server, connections, frontend, sweeper)
    return handle


async def _sweep(connections: set[Connection], timeout: float) -> None:
    """Close, a few times per `timeout`, the connections stalled mid-frame for longer."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(max(0.05, min(timeout / 4, 5.0)))
        now = loop.time()
        for connection in list(connections):
            connection.expire(now, timeout)
