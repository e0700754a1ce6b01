"""HTTP/2 (RFC 9113) for the two endpoints the project writes itself: the native gRPC server's
connections (server/frontends/grpc_native/connection.py) and `tcli perf`'s gRPC load generator
(tcli/perf/h2_client.py). One implementation of the wire for both.

Modules: frames (frame types, flags, settings, error codes and the frames either side writes),
header_block (our HPACK encoder: literals and static-table references, no dynamic table),
header_decoder (request header blocks decoded with `hpack`'s public Decoder, behind a cache),
connection (one endpoint's connection state: the frame loop, SETTINGS, flow-control windows both
ways, DATA queued in order behind the windows, RST_STREAM, GOAWAY, PING answers).

Why not the `h2` library: measured against it with `benchmarks/grpc_transport_cost.py`, an `h2`
server connection costs over ten times the CPU per unary call of this layer (benchmarks/NOTES.md).
"""
