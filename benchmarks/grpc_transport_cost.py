"""CPU per gRPC unary call spent in the HTTP/2 layer alone, in-process (no sockets, no model):
the `h2` library's server connection against tcli's native transport (server/frontends/grpc_native).

The same bytes go in (a grpc-core-like client's HEADERS + DATA per call, encoded once up front by an
h2 client connection) and a 120-byte answer goes out. h2 is driven the way a server would drive it
(receive_data, acknowledge, send_headers/send_data/trailers, data_to_send); the native transport
runs its whole path, including the asyncio task of a trivial async handler.

    python benchmarks/grpc_transport_cost.py [calls]

Needs `h2` (the test extras). Results are in benchmarks/NOTES.md.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events

from server.frontends.grpc_native.calls import CallServer, MethodTable
from server.frontends.grpc_native.connection import Connection

REQUEST = b"x" * 100
ANSWER = b"y" * 120
HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/bench.Service/Call"),
    (":authority", "localhost:8001"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("grpc-accept-encoding", "identity,deflate,gzip"),
    ("user-agent", "grpc-c++/1.67.1 grpc-c/44.0.0 (linux; chttp2)"),
]


def client_bytes(calls: int) -> tuple[bytes, list[bytes]]:
    """The connection preface, then the bytes of each call, as an HTTP/2 client sends them."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    preface = client.data_to_send()
    each = []
    for _ in range(calls):
        stream = client.get_next_available_stream_id()
        client.send_headers(stream, HEADERS)
        client.send_data(stream, b"\x00" + len(REQUEST).to_bytes(4, "big") + REQUEST, end_stream=True)
        each.append(client.data_to_send())
        client.streams.pop(stream, None)  # keep the client's own state small
        client.outbound_flow_control_window = 2**30
    return preface, each


def h2_cost(preface: bytes, calls: list[bytes]) -> float:
    config = h2.config.H2Configuration(
        client_side=False,
        header_encoding=None,
        validate_inbound_headers=False,
        validate_outbound_headers=False,
        normalize_inbound_headers=False,
        normalize_outbound_headers=False,
    )
    server = h2.connection.H2Connection(config)
    server.initiate_connection()
    server.receive_data(preface)
    server.data_to_send()
    server.outbound_flow_control_window = 2**30
    head = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    trailers = [(b"grpc-status", b"0")]
    answer = b"\x00" + len(ANSWER).to_bytes(4, "big") + ANSWER
    start = time.process_time()
    for data in calls:
        for event in server.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                server.send_headers(event.stream_id, head)
                server.send_data(event.stream_id, answer)
                server.send_headers(event.stream_id, trailers, end_stream=True)
        server.data_to_send()
    return (time.process_time() - start) / len(calls)


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def native_cost(preface: bytes, calls: list[bytes]) -> float:
    async def handler(request: bytes, context: Any) -> bytes:
        return ANSWER

    table = MethodTable()
    methods = {"Call": grpc.unary_unary_rpc_method_handler(handler)}
    table.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bench.Service", methods)])
    connection = Connection(CallServer(table, 2**31 - 1).open_call, lambda _: None)
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    connection.data_received(preface)
    start = time.process_time()
    for data in calls:
        connection._send_window = 2**31 - 1  # the client's WINDOW_UPDATEs, which this bench omits
        connection.data_received(data)
        await asyncio.sleep(0)  # the handler's task runs and answers
    return (time.process_time() - start) / len(calls)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    preface, calls = client_bytes(count)
    try:
        import uvloop

        native = uvloop.run(native_cost(preface, calls))
    except ImportError:
        native = asyncio.run(native_cost(preface, calls))
    print(f"h2 server connection:      {1e6 * h2_cost(preface, calls):6.1f} µs CPU per call")
    print(f"native transport (+ task): {1e6 * native:6.1f} µs CPU per call")


if __name__ == "__main__":
    main()
