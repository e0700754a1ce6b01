"""A gRPC server written for this project: gRPC over HTTP/2 served on the asyncio (uvloop) event loop
as an asyncio Protocol, dispatching to the same servicer methods as the grpc.aio front end
(server/frontends/grpc.py) with a small servicer context of its own.

Why: grpc.aio costs about 800 µs of server CPU per small request here, nearly all of it in grpcio's
C/cython layer (the event loop thread and its poller thread); this transport does the same work in a
fraction of that (benchmarks/NOTES.md has the measurements).

Modules: frames (HTTP/2 framing, HPACK via `hpack`), connection (the HTTP/2 connection: streams and
flow control), wire (gRPC's conventions over HTTP/2), calls (gRPC calls and the servicer context),
server (listening and graceful shutdown).
"""

from server.frontends.grpc_native.server import NativeGrpcServerHandle, serve_native

__all__ = ["NativeGrpcServerHandle", "serve_native"]
