"""The shared HTTP/2 layer (server/protocol/http2) that the native gRPC server and `tcli perf`'s client
both run on, without sockets: frames round-trip between two endpoints, flow-control windows are
accounted both ways, our header blocks decode with `hpack`'s public Decoder and the `h2` library, a
peer's blocks (dynamic table, Huffman) decode with ours, and malformed frames end the connection
with GOAWAY and the RFC's error code."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import hpack
import pytest

from server.protocol.http2 import frames as f
from server.protocol.http2.connection import Endpoint, Stream
from server.protocol.http2.header_block import indexed, integer, literal, literal_named
from server.protocol.http2.header_decoder import HeaderDecoder, changes_table

REQUEST_HEADERS = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"localhost:8001"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


def request_block() -> bytes:
    return (
        indexed(3)
        + indexed(6)
        + literal_named(4, b"/inference.GRPCInferenceService/ModelInfer")
        + literal_named(1, b"localhost:8001")
        + literal_named(31, b"application/grpc")
        + literal(b"te", b"trailers")
    )


class Peer(Endpoint[Stream]):
    """An endpoint that records what its streams carry; its writes collect in `out`."""

    def __init__(self, client_side: bool, stream_window: int = f.DEFAULT_WINDOW) -> None:
        self.client_side = client_side
        self.stream_window = stream_window
        super().__init__()
        self.out = bytearray()
        self._write = self.out.extend
        self.decoder = HeaderDecoder(65536)
        self.headers: dict[int, list[tuple[bytes, bytes]]] = {}
        self.received: dict[int, bytearray] = {}
        self.ended: list[int] = []
        self.resets: list[tuple[int, int | None]] = []
        self.goaways: list[tuple[int, int]] = []

    def open(self, stream_id: int) -> Stream:
        stream = Stream(stream_id, self._initial_window, self.stream_window)
        self._opened(stream)
        return stream

    def take(self) -> bytes:
        data = bytes(self.out)
        self.out.clear()
        return data

    def _header_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        self.headers[stream_id] = self.decoder.decode(block)
        stream = self.streams.get(stream_id) or self.open(stream_id)
        if end_stream:
            self._remote_end(stream)
            self.ended.append(stream_id)

    def _stream_data(self, stream: Stream, data: bytes | bytearray, end: bool) -> None:
        self.received.setdefault(stream.id, bytearray()).extend(data)
        if end:
            self._remote_end(stream)
            self.ended.append(stream.id)

    def _stream_reset(self, stream: Stream, code: int | None) -> None:
        self.resets.append((stream.id, code))

    def _goaway_received(self, last_stream_id: int, code: int) -> None:
        self.goaways.append((last_stream_id, code))

    def close(self) -> None:
        self.closed = True


def frames_in(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream id, payload) of each frame in `data`."""
    out, at = [], 0
    while at < len(data):
        word, flags, stream_id = f.HEAD.unpack_from(data, at)
        length = word >> 8
        out.append((word & 0xFF, flags, stream_id, data[at + 9 : at + 9 + length]))
        at += 9 + length
    return out


def connected(server_window: int = f.DEFAULT_WINDOW) -> tuple[Peer, Peer]:
    client, server = Peer(client_side=True), Peer(client_side=False, stream_window=server_window)
    server.data_received(client.preface())
    client.data_received(server.preface() + server.take())  # its SETTINGS and the ACK of the client's
    server.data_received(client.take())  # the client's SETTINGS ACK
    assert not server.out and not client.closed and not server.closed
    return client, server


def pump(client: Peer, server: Peer, sent: list[bytes] | None = None) -> None:
    """Carry bytes both ways until both are quiet; `sent` collects the client's writes."""
    while client.out or server.out:
        data = client.take()
        if sent is not None:
            sent.append(data)
        server.data_received(data)
        client.data_received(server.take())


# ------------------------------------------------------------------------------------ frames
def test_a_request_and_its_answer_round_trip_between_two_endpoints() -> None:
    client, server = connected()
    stream = client.open(1)
    client.send(stream, request_block(), b"\x00\x00\x00\x00\x03", b"abc", b"", True)
    pump(client, server)
    assert server.headers[1] == REQUEST_HEADERS
    assert bytes(server.received[1]) == b"\x00\x00\x00\x00\x03abc" and server.ended == [1]
    answer = server.streams[1]
    server.send(answer, indexed(8), b"", b"xyz", literal(b"grpc-status", b"0"), True)
    pump(client, server)
    assert client.headers[1] == [(b"grpc-status", b"0")]  # the trailers, last block of the stream
    assert bytes(client.received[1]) == b"xyz" and client.ended == [1]
    assert not client.streams and not server.streams  # closed both ways, forgotten on both sides


def test_a_header_block_larger_than_a_frame_goes_in_continuation_frames() -> None:
    client, server = connected()
    block = request_block() + literal(b"x-big", b"v" * 40000)
    client.send_headers(client.open(1), block, end=True)
    kinds = [kind for kind, *_ in frames_in(bytes(client.out))]
    assert kinds == [f.HEADERS, f.CONTINUATION, f.CONTINUATION]
    pump(client, server)
    assert server.headers[1][-1] == (b"x-big", b"v" * 40000) and server.ended == [1]


def test_ping_is_answered_with_the_same_payload() -> None:
    _client, server = connected()
    server.data_received(f.ping(b"12345678"))
    assert frames_in(server.take()) == [(f.PING, f.ACK, 0, b"12345678")]


def test_rst_stream_and_goaway_reach_the_other_side() -> None:
    client, server = connected()
    stream = client.open(1)
    client.send_headers(stream, request_block())
    pump(client, server)
    client.reset(stream, f.CANCEL)
    pump(client, server)
    assert server.resets == [(1, f.CANCEL)] and not server.streams
    server.data_received(f.goaway(7, f.NO_ERROR))
    assert server.goaways == [(7, f.NO_ERROR)]


# ------------------------------------------------------------------------------------ flow control
def test_data_beyond_the_windows_waits_and_flows_as_the_receiver_credits_it() -> None:
    client, server = connected()
    payload = bytes(range(256)) * 800  # 204,800 bytes: three default windows and more
    stream = client.open(1)
    client.send(stream, request_block(), b"", payload, b"", True)
    first = frames_in(bytes(client.out))
    data_sent = sum(len(p) for kind, _, _, p in first if kind == f.DATA)
    assert data_sent == f.DEFAULT_WINDOW  # the default windows, no more
    assert client._send_window == 0 and stream.window == 0 and stream.blocked
    sent: list[bytes] = []
    pump(client, server, sent)
    assert bytes(server.received[1]) == payload and server.ended == [1]
    sizes = [len(p) for data in sent for kind, _, _, p in frames_in(data) if kind == f.DATA]
    assert max(sizes) <= f.DEFAULT_MAX_FRAME  # the peer's MAX_FRAME_SIZE
    # every byte sent was taken from the sender's window and given back by the receiver's credits
    credited = server._recv_window - (f.DEFAULT_WINDOW - len(payload))
    assert client._send_window == f.DEFAULT_WINDOW - len(payload) + credited
    assert client._send_window == server._recv_window  # both sides agree on the connection window
    assert server._recv_window + server._recv_unacked == f.DEFAULT_WINDOW


def test_a_held_stream_is_not_credited_until_its_reader_catches_up() -> None:
    client, server = connected()
    stream = client.open(1)
    client.send_headers(stream, request_block())
    pump(client, server)
    server.streams[1].hold = True
    client.send_data(stream, b"x" * 100_000, end=False)
    pump(client, server)
    assert len(server.received[1]) == f.DEFAULT_WINDOW  # stalled: the stream's window is not credited
    assert stream.window == 0 and stream.blocked
    server.streams[1].hold = False
    server.credit(server.streams[1])
    pump(client, server)
    assert len(server.received[1]) == 100_000 and stream.blocked is None


def test_a_larger_initial_window_in_settings_releases_queued_data() -> None:
    client, _server = connected()
    stream = client.open(1)
    client.send(stream, request_block(), b"", b"y" * 70000, b"", False)
    client.take()
    assert stream.window == 0
    client.data_received(f.settings([(f.INITIAL_WINDOW_SIZE, 100000)]) + f.window_update(0, 100000))
    assert stream.window == 100000 - 70000  # the delta applies to open streams
    sent = frames_in(client.take())
    assert sum(len(p) for kind, _, _, p in sent if kind == f.DATA) == 70000 - f.DEFAULT_WINDOW
    assert (f.SETTINGS, f.ACK, 0, b"") in sent


def test_data_beyond_the_granted_connection_window_is_a_flow_control_error() -> None:
    _client, server = connected()
    server.data_received(f.header_frames(1, request_block(), False, f.DEFAULT_MAX_FRAME))
    server.streams[1].hold = True
    server._credit_at = 10**9  # never credits the connection window in this test
    chunk = f.frame(f.DATA, 0, 1, b"z" * 16384)
    server.data_received(chunk * 3 + f.frame(f.DATA, 0, 1, b"z" * 16383))  # 65,535: all it granted
    assert not server.closed
    server.data_received(f.frame(f.DATA, 0, 1, b"z"))
    assert server.closed
    assert frames_in(server.take())[-1][:3] == (f.GOAWAY, 0, 0)


# ------------------------------------------------------------------------------------ HPACK
def test_our_header_blocks_decode_with_hpacks_public_decoder() -> None:
    block = request_block() + literal(b"x-long", b"v" * 300) + literal(b"n" * 200, b"")
    decoded = hpack.Decoder().decode(block, raw=True)
    assert decoded == [*REQUEST_HEADERS, (b"x-long", b"v" * 300), (b"n" * 200, b"")]
    assert not changes_table(block)


@pytest.mark.parametrize(
    ("value", "bits", "encoded"), [(10, 5, b"\x0a"), (1337, 5, b"\x1f\x9a\x0a"), (42, 8, b"\x2a")]
)
def test_integers_are_encoded_as_rfc_7541_shows(value: int, bits: int, encoded: bytes) -> None:
    assert integer(value, bits) == encoded  # RFC 7541 appendix C.1


def test_blocks_that_change_the_dynamic_table_are_never_cached() -> None:
    encoder = hpack.Encoder()  # indexes what it sends: the first block adds to the table
    first, second = encoder.encode(REQUEST_HEADERS), encoder.encode(REQUEST_HEADERS)
    other = encoder.encode([*REQUEST_HEADERS, (b"x-new", b"1")])  # adds x-new: the indices shift
    assert changes_table(first) and not changes_table(second) and changes_table(other)
    assert changes_table(b"\x3f\xe1\x1f")  # a dynamic table size update
    decoder, reference = HeaderDecoder(65536), hpack.Decoder()
    results = [decoder.decode(block) for block in (first, second, second, other, second)]
    assert results == [reference.decode(block, raw=True) for block in (first, second, second, other, second)]
    assert results[1] == REQUEST_HEADERS and results[2] is results[1]  # the repeated block: cached
    # after the table changed the same bytes mean other headers: decoded afresh, not from the cache
    assert results[4] is not results[1] and results[4] != REQUEST_HEADERS


def test_our_client_frames_satisfy_the_h2_library() -> None:
    """h2 checks every frame it receives: windows, frame sizes, header blocks."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    client = Peer(client_side=True)
    payload = b"q" * 150_000
    stream = client.open(1)
    server.receive_data(client.preface())
    client.send(stream, request_block(), b"", payload, literal(b"x-trailer", b"1"), True)
    headers: list[tuple[bytes, bytes]] = []
    received = bytearray()
    ended = False
    for _ in range(100):
        for event in server.receive_data(client.take()):
            if isinstance(event, h2.events.RequestReceived):
                headers = list(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                received += event.data
                server.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                ended = True
        client.data_received(server.data_to_send())
        if ended:
            break
    assert headers == REQUEST_HEADERS and bytes(received) == payload and ended


def test_the_h2_librarys_header_blocks_decode_with_ours() -> None:
    """A peer's blocks use the dynamic table and Huffman coding: decoded the same, call after call."""
    peer = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    peer.initiate_connection()
    server = Peer(client_side=False)
    metadata = [(b"user-agent", b"grpc-python/1.67"), (b"x-request-id", b"42")]
    for stream_id in (1, 3, 5):
        peer.send_headers(stream_id, [*REQUEST_HEADERS, *metadata], end_stream=True)
        server.data_received(peer.data_to_send())
        assert server.headers[stream_id] == [*REQUEST_HEADERS, *metadata]
    assert server.headers[5] is server.headers[3]  # the repeated, fully indexed block came from the cache
    assert not server.closed


# ------------------------------------------------------------------------------------ malformed
@pytest.mark.parametrize(
    ("data", "code"),
    [
        (f.frame(f.PING, 0, 0, b"1234567"), f.FRAME_SIZE_ERROR),
        (f.frame(f.DATA, 0, 9, b"x"), f.PROTOCOL_ERROR),  # DATA on an idle stream
        (f.frame(f.CONTINUATION, f.END_HEADERS, 1, b"\x82"), f.PROTOCOL_ERROR),
        (f.frame(f.SETTINGS, 0, 0, b"\x00\x04\x00"), f.FRAME_SIZE_ERROR),
        (f.settings([(f.INITIAL_WINDOW_SIZE, 2**31)]), f.FLOW_CONTROL_ERROR),
        (f.settings([(f.MAX_FRAME_SIZE, 100)]), f.PROTOCOL_ERROR),
        (f.window_update(0, 0), f.PROTOCOL_ERROR),
        (f.window_update(0, 2**31 - 1), f.FLOW_CONTROL_ERROR),
        (f.frame(f.HEADERS, f.END_HEADERS, 0, b"\x82"), f.PROTOCOL_ERROR),
        (f.frame(f.HEADERS, f.END_HEADERS | f.PADDED, 1, b"\x09\x82"), f.PROTOCOL_ERROR),
        (f.frame(f.RST_STREAM, 0, 1, b"\x00"), f.FRAME_SIZE_ERROR),
        (f.frame(f.PUSH_PROMISE, f.END_HEADERS, 1, b"\x00\x00\x00\x02\x82"), f.PROTOCOL_ERROR),
        (f.HEAD.pack((f.DEFAULT_MAX_FRAME + 1) << 8 | f.DATA, 0, 1), f.FRAME_SIZE_ERROR),
    ],
    ids=[
        "short-ping",
        "data-idle",
        "lone-continuation",
        "settings-length",
        "window-too-large",
        "frame-size-too-small",
        "window-update-0",
        "window-overflow",
        "headers-stream-0",
        "padding-too-long",
        "rst-length",
        "push-promise",
        "frame-too-large",
    ],
)
def test_a_malformed_frame_ends_the_connection_with_goaway(data: bytes, code: int) -> None:
    _client, server = connected()
    server.data_received(data)
    assert server.closed
    kind, _, stream_id, payload = frames_in(server.take())[-1]
    assert (kind, stream_id, int.from_bytes(payload[4:8], "big")) == (f.GOAWAY, 0, code)


def test_a_server_refuses_what_is_not_an_http2_preface() -> None:
    server = Peer(client_side=False)
    server.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert server.closed
    assert frames_in(server.take())[-1][0] == f.GOAWAY
