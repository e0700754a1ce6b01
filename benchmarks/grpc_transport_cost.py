"""CPU per gRPC unary call spent in the HTTP/2 layer alone, in-process (no sockets, no model):
the `h2` library's server connection against tcli's native transport (server/frontends/grpc_native),
and the `h2` library's client connection against `tcli perf`'s (tcli/perf/h2_client.py); both of
tcli's sides run on the shared HTTP/2 layer, server/protocol/http2.

The same bytes go in (a grpc-core-like client's HEADERS + DATA per call, encoded once up front by an
h2 client connection) and a 120-byte answer goes out. h2 is driven the way a server would drive it
(receive_data, acknowledge, send_headers/send_data/trailers, data_to_send); the native transport
runs its whole path, including the asyncio task of a trivial async handler. The clients send the
same call and read the same answers (recorded once from an h2 server), each the way the load
generator uses it.

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
from tcli.perf.h2_client import H2Connection, grpc_header_block

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


def server_bytes(calls: int) -> tuple[bytes, list[bytes]]:
    """A server's preface, then its answer to each call (headers, a message, trailers)."""
    client_preface, requests = client_bytes(calls)
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    server.receive_data(client_preface)
    preface = server.data_to_send()
    server.outbound_flow_control_window = 2**30
    answer = b"\x00" + len(ANSWER).to_bytes(4, "big") + ANSWER
    each = []
    for data in requests:
        for event in server.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                server.send_headers(
                    event.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")]
                )
                server.send_data(event.stream_id, answer)
                server.send_headers(event.stream_id, [(b"grpc-status", b"0")], end_stream=True)
                server.streams.pop(event.stream_id, None)
        each.append(server.data_to_send())
    return preface, each


def h2_client_cost(preface: bytes, answers: list[bytes]) -> float:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    client.receive_data(preface)
    client.data_to_send()
    client.outbound_flow_control_window = 2**30
    message = b"\x00" + len(REQUEST).to_bytes(4, "big") + REQUEST
    start = time.process_time()
    for data in answers:
        stream = client.get_next_available_stream_id()
        client.send_headers(stream, HEADERS)
        client.send_data(stream, message, end_stream=True)
        client.data_to_send()
        for event in client.receive_data(data):
            if isinstance(event, h2.events.DataReceived):
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        client.data_to_send()
    return (time.process_time() - start) / len(answers)


async def tcli_client_cost(preface: bytes, answers: list[bytes]) -> float:
    client = H2Connection(asyncio.get_running_loop())
    client.connection_made(_Transport())  # type: ignore[arg-type]
    client.data_received(preface)
    block = grpc_header_block("/bench.Service/Call", "localhost:8001", [])
    start = time.process_time()
    for data in answers:
        waiter = client.unary(block, REQUEST)
        client.data_received(data)
        waiter.result()
    return (time.process_time() - start) / len(answers)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    preface, calls = client_bytes(count)
    server_preface, answers = server_bytes(count)
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    native = run(native_cost(preface, calls))
    client = run(tcli_client_cost(server_preface, answers))
    print(f"h2 server connection:      {1e6 * h2_cost(preface, calls):6.1f} µs CPU per call")
    print(f"native transport (+ task): {1e6 * native:6.1f} µs CPU per call")
    print(f"h2 client connection:      {1e6 * h2_client_cost(server_preface, answers):6.1f} µs CPU per call")
    print(f"tcli perf client:          {1e6 * client:6.1f} µs CPU per call")


if __name__ == "__main__":
    main()
