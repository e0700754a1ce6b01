"""A gRPC server written for this project: gRPC over HTTP/2 served on the asyncio (uvloop) event loop
as an asyncio Protocol, dispatching to the same servicer methods as the grpc.aio front end
(server/frontends/grpc.py) with a small servicer context of its own.

Why: grpc.aio costs about 800 µs of server CPU per small request here, nearly all of it in grpcio's
C/cython layer (the event loop thread and its poller thread); this transport does the same work in a
fraction of that (benchmarks/NOTES.md has the measurements).

Modules: connection (the HTTP/2 server connection on the asyncio loop, over the HTTP/2 layer that
`tcli perf`'s client shares, server/protocol/http2: framing, flow control, HPACK), wire (gRPC's
conventions over HTTP/2), calls (gRPC calls and the servicer context), server (listening and
graceful shutdown).
"""

from server.frontends.grpc_native.server import NativeGrpcServerHandle, serve_native

__all__ = ["NativeGrpcServerHandle", "serve_native"]
