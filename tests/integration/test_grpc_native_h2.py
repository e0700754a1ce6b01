"""The native gRPC transport at the HTTP/2 level, driven by hand through `h2` (python-hyper's HTTP/2
state machine, which also checks every frame the server sends: flow-control windows, frame sizes,
header blocks). Each test runs against both gRPC implementations (native and grpcio): grpcio is the
reference for what a gRPC server answers.

Covered: the client's SETTINGS honoured (small windows, no HPACK dynamic table), messages larger than
every window both ways, header blocks in CONTINUATION frames, messages split across DATA frames and
several in one, PING, a server-side grpc-timeout, compressed-message errors, a client's RST_STREAM,
and GOAWAY with calls in flight finishing on shutdown."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from tritonclient.grpc import service_pb2 as pb

from server.frontends.grpc import serve_grpc
from tests.integration.grpc_fixtures import RunningGrpcServer
from tests.integration.test_grpc_native import native_server

__all__ = ["native_server"]  # the fixture, re-exported for pytest

WAIT = 30.0  # failure timeout; never reached when things work
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


# ------------------------------------------------------------------------------------ a raw client
@dataclass
class Answer:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    ended: bool = False
    reset: int | None = None

    @property
    def status(self) -> int:
        """grpc-status, from the trailers (or the headers of a trailers-only answer)."""
        return int((self.trailers or self.headers)[b"grpc-status"])

    @property
    def details(self) -> str:
        from urllib.parse import unquote

        return unquote((self.trailers or self.headers).get(b"grpc-message", b"").decode())

    def messages(self) -> list[bytes]:
        out, at = [], 0
        while at < len(self.data):
            length = int.from_bytes(self.data[at + 1 : at + 5], "big")
            out.append(bytes(self.data[at + 5 : at + 5 + length]))
            at += 5 + length
        return out


class RawGrpc:
    """gRPC calls written frame by frame over one h2 connection."""

    def __init__(self, port: int, settings: dict[int, int] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.answers: dict[int, Answer] = {}
        self.events: list[Any] = []
        self.buffer = b""
        self.goaway = False
        self.late = b""  # bytes read after a GOAWAY
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def close(self) -> None:
        self.sock.close()

    def start(self, path: str, metadata: list[tuple[str, str]] = (), end: bool = False) -> int:  # type: ignore[assignment]
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *metadata,
        ]
        self.conn.send_headers(stream, headers, end_stream=end)
        self.answers[stream] = Answer()
        self.flush()
        return stream

    def send(self, stream: int, data: bytes, end: bool = False, frame: int | None = None) -> None:
        """`data` in DATA frames of at most `frame` bytes, as the server's windows let them go."""
        at = 0
        while at < len(data):
            room = min(
                self.conn.local_flow_control_window(stream),
                self.conn.max_outbound_frame_size,
                frame or len(data),
            )
            if room <= 0:
                self.pump()
                continue
            self.conn.send_data(stream, data[at : at + room])
            at += room
            self.flush()
        if end:
            self.conn.end_stream(stream)
            self.flush()

    def pump(self) -> None:
        """Read once from the socket and handle what came (acknowledging DATA as it is read)."""
        data = self.sock.recv(2**20)
        if not data:
            raise ConnectionError("the server closed the connection")
        if self.goaway:
            self._after_goaway(data)
            return
        self.buffer += data
        while len(self.buffer) >= 9:  # frame by frame, to stop feeding h2 at a GOAWAY
            end = 9 + int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < end:
                break
            frame, self.buffer = bytes(self.buffer[:end]), self.buffer[end:]
            if self.goaway:
                self._after_goaway(frame)
            else:
                self._events(self.conn.receive_data(frame))
        self.flush()

    def _events(self, events: list[Any]) -> None:
        for event in events:
            self.events.append(event)
            answer = self.answers.get(getattr(event, "stream_id", 0) or 0)
            if isinstance(event, h2.events.ResponseReceived) and answer is not None:
                answer.headers = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                if answer is not None:
                    answer.data += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived) and answer is not None:
                answer.trailers = dict(event.headers)
            elif isinstance(event, h2.events.StreamEnded) and answer is not None:
                answer.ended = True
            elif isinstance(event, h2.events.StreamReset) and answer is not None:
                answer.reset = event.error_code
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = True

    def _after_goaway(self, data: bytes) -> None:
        """h2 takes a GOAWAY as the end of the connection, but streams up to its last stream id go
        on (RFC 9113 6.8): their HEADERS and DATA frames are read here (small answers, one frame
        each, no flow control needed)."""
        self.late += data
        while len(self.late) >= 9:
            length = int.from_bytes(self.late[:3], "big")
            if len(self.late) < 9 + length:
                return
            kind, flags = self.late[3], self.late[4]
            stream = int.from_bytes(self.late[5:9], "big") & 0x7FFFFFFF
            payload, self.late = bytes(self.late[9 : 9 + length]), self.late[9 + length :]
            answer = self.answers.get(stream)
            if answer is None:
                continue
            if kind == 1:  # HEADERS (END_HEADERS expected: these blocks are small)
                headers = dict(self.conn.decoder.decode(payload, raw=True))
                if answer.headers:
                    answer.trailers = headers
                else:
                    answer.headers = headers
            elif kind == 0:  # DATA
                answer.data += payload
            if kind in (0, 1) and flags & 0x1:
                answer.ended = True

    def sync(self) -> None:
        """A PING round trip: the server has handled every frame sent before it."""
        self.conn.ping(b"tcli-syn")
        self.flush()
        acks = sum(isinstance(e, h2.events.PingAckReceived) for e in self.events)
        while sum(isinstance(e, h2.events.PingAckReceived) for e in self.events) == acks:
            self.pump()

    def wait(self, stream: int) -> Answer:
        answer = self.answers[stream]
        while not answer.ended and answer.reset is None:
            self.pump()
        return answer

    def call(self, path: str, message: bytes, metadata: list[tuple[str, str]] = (), **send: Any) -> Answer:  # type: ignore[assignment]
        stream = self.start(path, metadata)
        self.send(stream, framed(message), end=True, **send)
        return self.wait(stream)


def framed(message: bytes, compressed: bool = False) -> bytes:
    return bytes([compressed]) + len(message).to_bytes(4, "big") + message


def identity_request(payload: bytes) -> bytes:
    """simple_identity's ModelInferRequest for one BYTES element."""
    request = pb.ModelInferRequest(model_name="simple_identity")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 1])
    request.raw_input_contents.append(len(payload).to_bytes(4, "little") + payload)
    return request.SerializeToString()


def identity_output(message: bytes) -> bytes:
    response = pb.ModelInferResponse.FromString(message)
    return response.raw_output_contents[0][4:]


def add_sub_request(value: float, request_id: str = "") -> bytes:
    import numpy as np

    request = pb.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.full(4, value, dtype=np.float32).tobytes())
    return request.SerializeToString()


def gate_request(path: Path) -> bytes:
    request = pb.ModelInferRequest(model_name="gate")
    request.inputs.add(name="PATH", datatype="BYTES", shape=[1])
    raw = str(path).encode()
    request.raw_input_contents.append(len(raw).to_bytes(4, "little") + raw)
    return request.SerializeToString()


@pytest.fixture()
def raw(native_server: RunningGrpcServer) -> Iterator[RawGrpc]:
    client = RawGrpc(native_server.port)
    try:
        yield client
    finally:
        client.close()


# ------------------------------------------------------------------------------------ tests
def test_messages_larger_than_every_window_both_ways(native_server: RunningGrpcServer) -> None:
    """6 MB each way: more than the server's stream window going in (it must send WINDOW_UPDATE) and
    far more than the client's 16 KiB windows coming back (it must wait for the client's); h2
    raises if the server ever sends beyond a window or a frame larger than MAX_FRAME_SIZE."""
    small = {
        h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384,
        h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384,
        h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0,  # the server may not index its headers
    }
    client = RawGrpc(native_server.port, small)
    try:
        payload = bytes(range(256)) * (6 * 2**12)
        answer = client.call(INFER, identity_request(payload))
        assert answer.status == 0, answer.details
        [message] = answer.messages()
        assert identity_output(message) == payload
        data_frames = [e for e in client.events if isinstance(e, h2.events.DataReceived)]
        assert max(len(e.data) for e in data_frames) <= 16384
        assert len(data_frames) >= len(payload) // 16384
    finally:
        client.close()


def test_continuation_frames_and_a_message_split_across_data_frames(raw: RawGrpc) -> None:
    raw.pump()  # the server's SETTINGS
    raw.conn.max_outbound_frame_size = 40  # header block and message cut into tiny frames
    metadata = [(f"x-padding-{i}", "v" * 30) for i in range(8)]
    answer = raw.call(INFER, add_sub_request(2.0), metadata, frame=7)
    assert answer.status == 0, answer.details
    [message] = answer.messages()
    assert pb.ModelInferResponse.FromString(message).raw_output_contents[0] == b"\x00\x00\x80\x40" * 4


def test_several_messages_in_one_data_frame_on_a_stream(raw: RawGrpc) -> None:
    stream = raw.start(STREAM)
    raw.send(stream, b"".join(framed(add_sub_request(v, str(v))) for v in range(3)), end=True)
    answer = raw.wait(stream)
    assert answer.status == 0, answer.details
    ids = [pb.ModelStreamInferResponse.FromString(m).infer_response.id for m in answer.messages()]
    assert ids == ["0", "1", "2"]


def test_ping_is_acknowledged(raw: RawGrpc) -> None:
    raw.conn.ping(b"tcli-png")
    raw.flush()
    while not any(isinstance(e, h2.events.PingAckReceived) for e in raw.events):
        raw.pump()
    [ack] = [e for e in raw.events if isinstance(e, h2.events.PingAckReceived)]
    assert ack.ping_data == b"tcli-png"


def test_the_server_enforces_grpc_timeout(raw: RawGrpc, tmp_path: Path) -> None:
    """No client-side timer here: the server itself ends the call at the deadline."""
    gate = tmp_path / "open"
    try:
        answer = raw.call(INFER, gate_request(gate), [("grpc-timeout", "200m")])
        assert answer.status == 4  # DEADLINE_EXCEEDED
    finally:
        gate.touch()
    assert raw.call(INFER, add_sub_request(1.0)).status == 0  # the connection goes on


def test_compressed_messages(raw: RawGrpc, native_server: RunningGrpcServer) -> None:
    message = add_sub_request(1.0)
    stream = raw.start(INFER, [("grpc-encoding", "gzip")])
    raw.send(stream, framed(gzip.compress(message), compressed=True), end=True)
    assert raw.wait(stream).status == 0
    stream = raw.start(INFER, [("grpc-encoding", "snappy")])
    raw.send(stream, framed(message, compressed=True), end=True)
    # an encoding the server does not know: UNIMPLEMENTED, as gRPC's compression spec says; grpcio
    # refuses the header itself as unparseable (INTERNAL)
    native = native_server.server.settings.grpc_implementation == "native"
    assert raw.wait(stream).status == (12 if native else 13)
    stream = raw.start(INFER)  # the flag set, no grpc-encoding to decode it with
    raw.send(stream, framed(message, compressed=True), end=True)
    assert raw.wait(stream).status == 13  # INTERNAL


def test_rst_stream_cancels_a_call_and_the_connection_goes_on(raw: RawGrpc, tmp_path: Path) -> None:
    gate = tmp_path / "open"
    stream = raw.start(INFER)
    raw.send(stream, framed(gate_request(gate)), end=True)
    raw.conn.reset_stream(stream, error_code=8)  # CANCEL
    raw.flush()
    gate.touch()
    assert raw.call(INFER, add_sub_request(3.0)).status == 0
    assert not raw.answers[stream].data  # nothing was sent on the cancelled stream


def test_shutdown_sends_goaway_and_lets_calls_in_flight_finish(
    native_server: RunningGrpcServer, tmp_path: Path
) -> None:
    implementation = native_server.server.settings.grpc_implementation
    loop = native_server.loop

    def on_server_loop(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    handle = on_server_loop(
        serve_grpc(native_server.service, "127.0.0.1", 0, implementation=implementation)
    ).result(WAIT)
    client = RawGrpc(handle.port)
    gate = tmp_path / "open"
    stopped = None
    try:
        stream = client.start(INFER)
        client.send(stream, framed(gate_request(gate)), end=True)
        client.sync()  # the server has read the call
        stopped = on_server_loop(handle.shutdown())
        while not any(isinstance(e, h2.events.ConnectionTerminated) for e in client.events):
            client.pump()
        [goaway] = [e for e in client.events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway.error_code == 0 and goaway.last_stream_id >= stream
        assert not client.answers[stream].ended  # still in flight when the server said GOAWAY
        gate.touch()
        answer = client.wait(stream)
        assert answer.status == 0, answer.details
        assert len(answer.messages()) == 1
        stopped.result(WAIT)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", handle.port), timeout=WAIT).close()
    finally:
        gate.touch()
        client.close()
        if stopped is None:
            on_server_loop(handle.shutdown()).result(WAIT)


def test_streams_of_one_connection_do_not_wait_for_each_other(raw: RawGrpc, tmp_path: Path) -> None:
    """A call held in the model does not hold back the others on the same connection."""
    gate = tmp_path / "open"
    held = raw.start(INFER)
    raw.send(held, framed(gate_request(gate)), end=True)
    answers = [raw.call(INFER, add_sub_request(float(v))) for v in range(5)]
    assert [a.status for a in answers] == [0] * 5
    assert not raw.answers[held].ended
    gate.touch()
    assert raw.wait(held).status == 0


def test_a_stream_nobody_reads_holds_back_its_window(native_server: RunningGrpcServer) -> None:
    """Native only: a streaming call whose handler does not read gets no more window once 4 MiB wait
    unread (the client must stop sending), and gets it back as the handler reads."""
    if native_server.server.settings.grpc_implementation != "native":
        pytest.skip("the native transport's own backpressure")
    import grpc

    from server.frontends.grpc_native import serve_native

    loop = native_server.loop
    release = asyncio.Event()

    async def count(requests: Any, context: Any) -> Any:
        await release.wait()
        total = 0
        async for message in requests:
            total += len(message)
        yield str(total).encode()

    def register(table: Any) -> None:
        handler = grpc.stream_stream_rpc_method_handler(count)
        table.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.Slow", {"Count": handler})])

    handle = asyncio.run_coroutine_threadsafe(
        serve_native(register, _Closable(), "127.0.0.1", 0, max_message_size=2**31 - 1), loop
    ).result(WAIT)
    client = RawGrpc(handle.port)
    try:
        stream = client.start("/t.Slow/Count")
        message = framed(b"m" * (2**20 - 5))  # 1 MiB on the wire each
        sent = 0
        while sent < 16:  # send until the server stops giving window back
            client.sync()
            if client.conn.local_flow_control_window(stream) < len(message):
                break
            client.send(stream, message)
            sent += 1
        assert 4 <= sent < 16  # what the client could send: the held window, not everything
        loop.call_soon_threadsafe(release.set)
        for _ in range(16 - sent):
            client.send(stream, message)
        client.send(stream, b"", end=True)
        answer = client.wait(stream)
        assert answer.status == 0, answer.details
        assert answer.messages() == [str(16 * (2**20 - 5)).encode()]
    finally:
        client.close()
        asyncio.run_coroutine_threadsafe(handle.shutdown(), loop).result(WAIT)


class _Closable:
    def close(self) -> None:
        pass
