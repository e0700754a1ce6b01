"""The load generator: one process with an asyncio loop that sends pre-encoded requests and records,
per request, when it started and when its response was complete.

It is kept lean on purpose, because it must never be the bottleneck: requests are encoded once by
the parent (tcli/perf/encode.py); HTTP goes over raw HTTP/1.1 keep-alive connections driven by an
asyncio Protocol (no HTTP library, no response decoding beyond the status line and the length),
under uvloop when it is installed; gRPC goes through grpc.aio with identity serializers, so that
serialized ModelInferRequest bytes go out and response bytes come back untouched. This module imports
only the standard library (and grpc for gRPC): starting a worker process is cheap.

The parent (tcli/perf/profiler.py) starts workers with `python -m tcli.perf.worker FD` and talks to
each over a multiprocessing Connection on that file descriptor:

    parent -> worker   ("concurrency", n)            keep n requests in flight (closed loop)
                       ("rate", per_second, poisson)  send on a schedule (open loop)
                       ("collect",)                   answer with the records since the last collect
                       ("stop",)                      finish in-flight requests, answer, and exit
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from array import array
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, cast

now_ns = time.monotonic_ns  # CLOCK_MONOTONIC: one clock for every process on the machine
# gRPC clients per HTTP/2 connection: perf_analyzer's C++ client shares one channel among at most
# this many clients, its own statistics client being the first (measured with `ss`: 2 connections
# at concurrency 6-8, 3 at 13), so slot i rides connection (i + 1) // 6; the same variable changes it
_SHARE = os.environ.get("TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT", "6")
GRPC_SLOTS_PER_CONNECTION = max(1, int(_SHARE)) if _SHARE.strip().isdigit() else 6
UNARY_PATH = "/inference.GRPCInferenceService/ModelInfer"
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"


# --- what the parent sends --------------------------------------------------------------------------
@dataclass
class HttpRequestParts:
    """One data step, encoded for HTTP: the JSON header without its closing brace and the binary
    tensors that follow it. Sequence parameters are appended to the header per request."""

    header_open: bytes  # b'{"inputs":[...],"parameters":{"binary_data_output":true'
    blob: bytes


@dataclass
class LoadSpec:
    protocol: str  # "http" | "grpc"
    host: str
    port: int
    # HTTP: "POST <path> HTTP/1.1" and the fixed header lines (Host, Content-Type, -H ...)
    http_path: str = ""
    http_headers: list[tuple[str, str]] = field(default_factory=list)
    # gRPC: metadata (-H) and whether to use ModelStreamInfer (one bidirectional stream per slot)
    grpc_metadata: list[tuple[str, str]] = field(default_factory=list)
    streaming: bool = False
    grpc_client: str = "raw"  # "raw": tcli's own HTTP/2 driver; "grpcio": grpc.aio (for comparison)
    # Non-sequence models: complete requests, sent round robin (HTTP: whole HTTP messages; gRPC:
    # serialized ModelInferRequest messages)
    requests: list[bytes] = field(default_factory=list)
    # Sequence models: streams of steps (HTTP: HttpRequestParts; gRPC: serialized messages without the
    # sequence parameters). A new sequence takes the next stream; its requests take its steps in turn.
    sequence_streams: list[list[Any]] = field(default_factory=list)
    sequence_length: int = 20
    sequence_length_variation: float = 20.0  # percent
    sequence_length_from_data: bool = False  # no --sequence-length with user data: a stream per sequence
    sequence_id_start: int = 1
    sequence_id_end: int = 0  # exclusive; 0 = unbounded
    sequence_id_offset: int = 0  # this worker's first id is start + offset; ids step by sequence_id_stride
    sequence_id_stride: int = 1
    num_of_sequences: int = 4  # request-rate mode
    seed: int = 0
    timeout_s: float = 60.0


# --- protobuf by hand: the three sequence parameters of ModelInferRequest -----------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _parameter(key: bytes, value: bytes) -> bytes:
    """One `map<string, InferParameter> parameters = 4` entry."""
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value
    return b"\x22" + _varint(len(entry)) + entry


def grpc_sequence_parameters(sequence_id: int, start: bool, end: bool) -> bytes:
    """sequence_id (int64_param = 2), sequence_start and sequence_end (bool_param = 1), serialized as
    ModelInferRequest fields: appended to a serialized request, protobuf merges them in."""
    return (
        _parameter(b"sequence_id", b"\x10" + _varint(sequence_id))
        + _parameter(b"sequence_start", b"\x08" + (b"\x01" if start else b"\x00"))
        + _parameter(b"sequence_end", b"\x08" + (b"\x01" if end else b"\x00"))
    )


def _grpc_error(response: bytes) -> str | None:
    """ModelStreamInferResponse.error_message (field 1) when set: the first field on the wire."""
    if not response or response[0] != 0x0A:
        return None
    length, shift, index = 0, 0, 1
    while True:
        byte = response[index]
        length |= (byte & 0x7F) << shift
        index += 1
        if not byte & 0x80:
            break
        shift += 7
    return response[index : index + length].decode("utf-8", "replace")


# --- HTTP/1.1 over an asyncio Protocol ------------------------------------------------------------
class RequestFailed(Exception):
    pass


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight. The response is complete when
    its body has arrived (Content-Length, or the last chunk of a chunked body)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, int, int, bytes]] | None = None
        self.first_ns = 0
        self.body_at = -1
        self.length = -1
        self.chunked = False
        self.status = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: bytes) -> asyncio.Future[tuple[int, int, int, bytes]]:
        if self.closed or self.transport is None:
            raise RequestFailed("the server closed the connection")
        self.buffer.clear()
        self.first_ns = 0
        self.body_at = -1
        self.waiter = self.loop.create_future()
        self.transport.write(message)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        if not self.first_ns:
            self.first_ns = now_ns()
        buffer = self.buffer
        buffer += data
        if self.body_at < 0:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            self.body_at = head_end + 4
            try:
                self.status = int(buffer[9:12])
            except ValueError:
                self._fail("the server's answer is not HTTP")
                return
            head = bytes(buffer[:head_end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                self.length = int(head[at + 17 : stop if stop >= 0 else len(head)])
                self.chunked = False
            else:
                self.length = -1
                self.chunked = b"transfer-encoding: chunked" in head
                if not self.chunked:
                    self.length = 0
        if self.chunked:
            if not buffer.endswith(b"0\r\n\r\n"):
                return
            body = _dechunk(bytes(buffer[self.body_at :]))
        else:
            if len(buffer) - self.body_at < self.length:
                return
            body = bytes(buffer[self.body_at : self.body_at + self.length]) if self.status != 200 else b""
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.first_ns, now_ns(), body))

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(RequestFailed(message))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail("the server closed the connection" + (f": {exc}" if exc else ""))


def _dechunk(data: bytes) -> bytes:
    out, at = bytearray(), 0
    while True:
        line_end = data.find(b"\r\n", at)
        size = int(data[at:line_end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += data[line_end + 2 : line_end + 2 + size]
        at = line_end + 4 + size


def _http_error(status: int, body: bytes) -> str:
    import json

    try:
        message = json.loads(body).get("error")
    except (ValueError, AttributeError):
        message = None
    return str(message or body[:200].decode("utf-8", "replace") or f"HTTP {status}")


# --- gRPC over a hand-driven HTTP/2 connection --------------------------------------------------------
# grpcio costs about ten times more CPU per call than the raw HTTP/1.1 client above (measured: ~250 µs
# against ~25 µs per request), enough to take CPU from the server being measured on a small machine.
# gRPC needs little of HTTP/2 from a client that sends pre-encoded requests: a HEADERS frame whose HPACK
# block never changes (static-table names, literal values, no dynamic table), DATA frames, flow control,
# and answers to SETTINGS and PING. Responses are not decoded: a unary call succeeded when its stream
# carried a gRPC message (Triton and grpcio servers answer errors with trailers only); the error text
# of a failed call is then fetched once through grpcio.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    0,
    1,
    3,
    4,
    6,
    7,
    8,
    9,
)
_END_STREAM, _ACK, _END_HEADERS, _PADDED = 0x1, 0x1, 0x4, 0x8
_BIG_WINDOW = 2**31 - 1


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_string(text: str) -> bytes:
    raw = text.encode()
    return _hpack_int(len(raw), 7, 0) + raw


def grpc_header_block(path: str, authority: str, metadata: list[tuple[str, str]]) -> bytes:
    """The HPACK block of every request on `path`: indexed :method POST and :scheme http, then
    literals without indexing (static-table names where there is one), so no dynamic table is used."""
    block = b"\x83\x86"  # :method POST, :scheme http
    block += _hpack_int(4, 4, 0) + _hpack_string(path)  # :path
    block += _hpack_int(1, 4, 0) + _hpack_string(authority)  # :authority
    block += _hpack_int(31, 4, 0) + _hpack_string("application/grpc")  # content-type
    block += b"\x00" + _hpack_string("te") + _hpack_string("trailers")
    for name, value in metadata:
        block += b"\x00" + _hpack_string(name.lower()) + _hpack_string(value)
    return block


class _H2Stream:
    __slots__ = (
        "ended",
        "first_ns",
        "got_data",
        "id",
        "messages",
        "pending",
        "received",
        "streaming",
        "waiter",
        "window",
    )

    def __init__(self, stream_id: int, window: int, streaming: bool) -> None:
        self.id = stream_id
        self.streaming = streaming
        self.window = window
        self.first_ns = 0
        self.got_data = False
        self.ended = False
        self.waiter: asyncio.Future[Any] | None = None
        self.pending = bytearray()  # streaming: bytes of gRPC messages not yet complete
        self.messages: list[bytes] = []  # streaming: complete messages not yet read
        self.received = 0


class H2Connection(asyncio.Protocol):
    """One HTTP/2 connection (prior knowledge, cleartext) carrying many concurrent gRPC calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.streams: dict[int, _H2Stream] = {}
        self.next_id = 1
        self.send_window = 65535
        self.peer_initial_window = 65535
        self.max_frame = 16384
        self.blocked: list[tuple[_H2Stream, memoryview, bool]] = []  # data waiting for flow control
        self.received = 0
        self.headers_stream = 0  # a header block continues in CONTINUATION frames on this stream
        self.closed = False
        self.failure = "the server closed the connection"

    # connection -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        settings = (2).to_bytes(2, "big") + (0).to_bytes(4, "big")  # ENABLE_PUSH 0
        settings += (4).to_bytes(2, "big") + _BIG_WINDOW.to_bytes(4, "big")  # INITIAL_WINDOW_SIZE
        self.transport.write(
            _PREFACE
            + _frame(_SETTINGS, 0, 0, settings)
            + _frame(_WINDOW_UPDATE, 0, 0, (_BIG_WINDOW - 65535).to_bytes(4, "big"))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self.failure = f"the server closed the connection: {exc}"
        for stream in list(self.streams.values()):
            self._fail(stream, self.failure)
        self.streams.clear()

    def _fail(self, stream: _H2Stream, message: str) -> None:
        stream.ended = True
        waiter, stream.waiter = stream.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(RequestFailed(message))

    # sending --------------------------------------------------------------------------------------
    def _open(self, header_block: bytes, streaming: bool, write: bool = True) -> _H2Stream:
        if self.closed or self.transport is None:
            raise RequestFailed(self.failure)
        stream = _H2Stream(self.next_id, self.peer_initial_window, streaming)
        self.next_id += 2
        self.streams[stream.id] = stream
        if write:
            self.transport.write(_frame(_HEADERS, _END_HEADERS, stream.id, header_block))
        return stream

    def _send(self, stream: _H2Stream, message: bytes, end_stream: bool, head: bytes = b"") -> None:
        """Write a message as DATA (after `head`, the stream's HEADERS frame when not yet written)."""
        data = b"\x00" + len(message).to_bytes(4, "big") + message
        size = len(data)
        if (
            not self.blocked
            and size <= self.max_frame
            and size <= self.send_window
            and size <= stream.window
            and self.transport is not None
        ):
            self.send_window -= size
            stream.window -= size
            self.transport.write(head + _frame(_DATA, _END_STREAM if end_stream else 0, stream.id, data))
            return
        if head and self.transport is not None:
            self.transport.write(head)
        self.blocked.append((stream, memoryview(data), end_stream))
        self._flush()

    def _flush(self) -> None:
        while self.blocked and self.transport is not None:
            stream, data, end_stream = self.blocked[0]
            if stream.ended:
                self.blocked.pop(0)
                continue
            size = min(len(data), self.max_frame, self.send_window, stream.window)
            if size <= 0 and len(data) > 0:
                return  # wait for WINDOW_UPDATE
            last = size == len(data)
            self.send_window -= size
            stream.window -= size
            self.transport.write(
                _frame(_DATA, _END_STREAM if (last and end_stream) else 0, stream.id, bytes(data[:size]))
            )
            if last:
                self.blocked.pop(0)
            else:
                self.blocked[0] = (stream, data[size:], end_stream)

    def unary(self, header_block: bytes, message: bytes) -> asyncio.Future[tuple[int, int, bool]]:
        """Send one call; the future gives (first response byte ns, end ns, carried a message)."""
        stream = self._open(header_block, streaming=False, write=False)
        stream.waiter = self.loop.create_future()
        waiter = stream.waiter
        self._send(stream, message, True, _frame(_HEADERS, _END_HEADERS, stream.id, header_block))
        return waiter

    def open_stream(self, header_block: bytes) -> _H2Stream:
        return self._open(header_block, streaming=True)

    def stream_call(self, stream: _H2Stream, message: bytes) -> asyncio.Future[bytes]:
        """Write one message on a bidirectional stream; the future gives the next message read."""
        if stream.ended:
            raise RequestFailed("the server ended the stream")
        stream.waiter = self.loop.create_future()
        waiter = stream.waiter
        self._send(stream, message, end_stream=False)
        return waiter

    def close_stream(self, stream: _H2Stream) -> None:
        if not stream.ended and self.transport is not None and not self.closed:
            self.transport.write(_frame(_RST_STREAM, 0, stream.id, (8).to_bytes(4, "big")))  # CANCEL
        self.streams.pop(stream.id, None)

    # receiving ------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        at, size = 0, len(buffer)
        while size - at >= 9:
            length = int.from_bytes(buffer[at : at + 3], "big")
            if size - at - 9 < length:
                break
            kind, flags = buffer[at + 3], buffer[at + 4]
            stream_id = int.from_bytes(buffer[at + 5 : at + 9], "big") & 0x7FFFFFFF
            payload = bytes(buffer[at + 9 : at + 9 + length])
            at += 9 + length
            self._frame_received(kind, flags, stream_id, payload)
        del buffer[:at]

    def _frame_received(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == _DATA:
            self.received += len(payload)
            if self.received > 2**30 and self.transport is not None:
                self.transport.write(_frame(_WINDOW_UPDATE, 0, 0, self.received.to_bytes(4, "big")))
                self.received = 0
            stream = self.streams.get(stream_id)
            if stream is None:
                return
            if not stream.first_ns:
                stream.first_ns = now_ns()
            if flags & _PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            stream.got_data = stream.got_data or bool(payload)
            stream.received += len(payload)
            if stream.received > 2**30 and self.transport is not None:
                self.transport.write(_frame(_WINDOW_UPDATE, 0, stream_id, stream.received.to_bytes(4, "big")))
                stream.received = 0
            if stream.streaming:
                self._stream_messages(stream, payload)
            if flags & _END_STREAM:
                self._ended(stream)
        elif kind in (_HEADERS, _CONTINUATION):
            stream = self.streams.get(stream_id)
            if kind == _HEADERS and flags & _END_STREAM and stream is not None:
                stream.ended = True
            if flags & _END_HEADERS:
                self.headers_stream = 0
                if stream is not None and stream.ended:
                    self._ended(stream)
            else:
                self.headers_stream = stream_id
        elif kind == _RST_STREAM:
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                code = int.from_bytes(payload[:4], "big")
                self._fail(stream, f"the server reset the call (HTTP/2 error {code})")
        elif kind == _SETTINGS:
            if flags & _ACK:
                return
            for offset in range(0, len(payload) - 5, 6):
                key = int.from_bytes(payload[offset : offset + 2], "big")
                value = int.from_bytes(payload[offset + 2 : offset + 6], "big")
                if key == 4:
                    delta = value - self.peer_initial_window
                    self.peer_initial_window = value
                    for stream in self.streams.values():
                        stream.window += delta
                elif key == 5:
                    self.max_frame = value
            if self.transport is not None:
                self.transport.write(_frame(_SETTINGS, _ACK, 0))
            self._flush()
        elif kind == _PING:
            if not flags & _ACK and self.transport is not None:
                self.transport.write(_frame(_PING, _ACK, 0, payload))
        elif kind == _WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream_id == 0:
                self.send_window += increment
            elif stream_id in self.streams:
                self.streams[stream_id].window += increment
            self._flush()
        elif kind == _GOAWAY:
            self.closed = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self.failure = "the server is closing the connection (GOAWAY)"
            for sid in [sid for sid in self.streams if sid > last]:
                self._fail(self.streams.pop(sid), self.failure)

    def _stream_messages(self, stream: _H2Stream, payload: bytes) -> None:
        """Streaming calls: split DATA into gRPC messages and hand each to the waiting reader."""
        pending = stream.pending
        pending += payload
        while len(pending) >= 5:
            length = int.from_bytes(pending[1:5], "big")
            if len(pending) < 5 + length:
                break
            stream.messages.append(bytes(pending[5 : 5 + length]))
            del pending[: 5 + length]
        if stream.messages and stream.waiter is not None and not stream.waiter.done():
            waiter, stream.waiter = stream.waiter, None
            waiter.set_result(stream.messages.pop(0))

    def _ended(self, stream: _H2Stream) -> None:
        self.streams.pop(stream.id, None)
        stream.ended = True
        waiter, stream.waiter = stream.waiter, None
        if waiter is None or waiter.done():
            return
        if not stream.streaming:
            end = now_ns()
            waiter.set_result((stream.first_ns or end, end, stream.got_data))
        elif stream.messages:
            waiter.set_result(stream.messages.pop(0))
        else:
            waiter.set_exception(RequestFailed("the server ended the stream"))


# --- sequences ---------------------------------------------------------------------------------------
class SequenceState:
    """One live sequence: its id, its data stream, and how many requests remain."""

    __slots__ = ("id", "remaining", "step", "stream")

    def __init__(self) -> None:
        self.id = 0
        self.remaining = 0
        self.stream: list[Any] = []
        self.step = 0


# --- the worker ------------------------------------------------------------------------------------
class Worker:
    def __init__(self, spec: LoadSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        self.loop = asyncio.get_event_loop()
        self.rng = random.Random(spec.seed)
        # records since the last collect
        self.starts = array("q")
        self.ends = array("q")
        self.sequence_ends = array("b")
        self.send_ns = 0
        self.receive_ns = 0
        self.request_ns = 0
        self.completed = 0
        self.sent = 0
        self.delayed = 0
        self.errors = 0
        self.first_error = ""
        # load
        self.target = 0  # concurrency: the number of slots that should run
        self.slots: list[asyncio.Task[None]] = []
        self.rate_task: asyncio.Task[None] | None = None
        self.inflight: set[asyncio.Task[None]] = set()
        self.next_request = 0
        self.next_stream = 0
        self.next_sequence = 0
        self.idle_http: list[HttpConnection] = []
        self.stopped = asyncio.Event()
        self.grpc_channel: Any = None
        self.grpc_unary: Any = None
        self.grpc_stream: Any = None
        self.rate_sequences: list[SequenceState] = []
        self.rate_locks: list[asyncio.Lock] = []
        self.h2: dict[int, H2Connection] = {}  # by connection group, see GRPC_SLOTS_PER_CONNECTION
        self.h2_connecting: dict[int, asyncio.Task[Any]] = {}
        authority = f"{spec.host}:{spec.port}"
        self.unary_block = grpc_header_block(UNARY_PATH, authority, spec.grpc_metadata)
        self.stream_block = grpc_header_block(STREAM_PATH, authority, spec.grpc_metadata)

    # commands -------------------------------------------------------------------------------------
    def on_command(self) -> None:
        try:
            command = self.conn.recv()
        except (EOFError, OSError):
            self.stopped.set()  # the parent is gone
            return
        kind = command[0]
        if kind == "concurrency":
            self._set_concurrency(int(command[1]))
        elif kind == "rate":
            self._set_rate(float(command[1]), bool(command[2]))
        elif kind == "collect":
            self.conn.send(self._take_records())
        elif kind == "stop":
            self.loop.create_task(self._stop())

    def _take_records(self) -> dict[str, Any]:
        records = {
            "starts": self.starts.tobytes(),
            "ends": self.ends.tobytes(),
            "sequence_ends": self.sequence_ends.tobytes(),
            "send_ns": self.send_ns,
            "receive_ns": self.receive_ns,
            "request_ns": self.request_ns,
            "completed": self.completed,
            "sent": self.sent,
            "delayed": self.delayed,
            "errors": self.errors,
            "first_error": self.first_error,
            "cpu_ns": time.process_time_ns(),
            "at_ns": now_ns(),
        }
        self.starts = array("q")
        self.ends = array("q")
        self.sequence_ends = array("b")
        self.send_ns = self.receive_ns = self.request_ns = self.completed = 0
        self.sent = self.delayed = 0
        return records

    async def _stop(self) -> None:
        self.target = 0
        if self.rate_task is not None:
            self.rate_task.cancel()
        pending = [t for t in self.slots if not t.done()] + list(self.inflight)
        try:
            if pending:
                await asyncio.wait(pending, timeout=self.spec.timeout_s)
            self.conn.send(self._take_records())
        except OSError:
            pass  # the parent is gone already
        finally:
            self.stopped.set()

    def _record(self, start: int, end: int, send: int, receive: int, sequence_end: bool) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.sequence_ends.append(1 if sequence_end else 0)
        self.send_ns += send
        self.receive_ns += receive
        self.request_ns += end - start
        self.completed += 1

    def _error(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    # requests -----------------------------------------------------------------------------------
    def _plain_request(self) -> bytes:
        requests = self.spec.requests
        message = requests[self.next_request % len(requests)]
        self.next_request += 1
        return message

    def _new_sequence(self, state: SequenceState) -> None:
        spec = self.spec
        index = self.next_sequence
        self.next_sequence += 1
        sequence_id = spec.sequence_id_start + spec.sequence_id_offset + index * spec.sequence_id_stride
        if spec.sequence_id_end:
            span = spec.sequence_id_end - spec.sequence_id_start
            sequence_id = spec.sequence_id_start + (sequence_id - spec.sequence_id_start) % span
        state.id = sequence_id
        state.stream = spec.sequence_streams[self.next_stream % len(spec.sequence_streams)]
        self.next_stream += 1
        state.step = 0
        if spec.sequence_length_from_data:
            state.remaining = len(state.stream)
        else:
            spread = spec.sequence_length * spec.sequence_length_variation / 100.0
            low = max(1, round(spec.sequence_length - spread))
            high = max(low, round(spec.sequence_length + spread))
            state.remaining = self.rng.randint(low, high)

    def _sequence_request(self, state: SequenceState) -> tuple[bytes, bool]:
        if state.remaining <= 0:
            self._new_sequence(state)
        parts = state.stream[state.step % len(state.stream)]
        start = state.step == 0
        state.step += 1
        state.remaining -= 1
        end = state.remaining == 0
        if self.spec.protocol == "grpc":
            return parts + grpc_sequence_parameters(state.id, start, end), end
        tail = (
            f',"sequence_id":{state.id},"sequence_start":{"true" if start else "false"},'
            f'"sequence_end":{"true" if end else "false"}}}}}'
        ).encode()
        return self._http_message(parts.header_open + tail, parts.blob), end

    def _http_message(self, header: bytes, blob: bytes) -> bytes:
        lines = [f"POST {self.spec.http_path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self.spec.http_headers]
        lines.append(f"Inference-Header-Content-Length: {len(header)}")
        lines.append(f"Content-Length: {len(header) + len(blob)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + header + blob

    # transports -----------------------------------------------------------------------------------
    async def _http_connect(self) -> HttpConnection:
        _, protocol = await self.loop.create_connection(
            lambda: HttpConnection(self.loop), self.spec.host, self.spec.port
        )
        return protocol

    def _open_grpcio(self) -> None:
        import grpc

        options = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ]
        self.grpc_channel = grpc.aio.insecure_channel(f"{self.spec.host}:{self.spec.port}", options=options)
        self.grpc_unary = self.grpc_channel.unary_unary(UNARY_PATH)
        self.grpc_stream = self.grpc_channel.stream_stream(STREAM_PATH)

    async def _h2(self, group: int = 0) -> H2Connection:
        """The HTTP/2 connection of a group of slots, (re)connected on first use."""
        connection = self.h2.get(group)
        if connection is None or connection.closed:
            connecting = self.h2_connecting.get(group)
            if connecting is None:
                connecting = self.h2_connecting[group] = self.loop.create_task(
                    self.loop.create_connection(
                        lambda: H2Connection(self.loop), self.spec.host, self.spec.port
                    )
                )
            try:
                _, connection = await connecting
                self.h2[group] = connection
            finally:
                self.h2_connecting.pop(group, None)
        return connection

    async def _http_exchange(self, connection: HttpConnection, message: bytes) -> tuple[int, int, int, int]:
        """(start, end, send_ns, receive_ns) of one request; raises RequestFailed."""
        start = now_ns()
        waiter = connection.send(message)
        sent = now_ns()
        status, first, end, body = await asyncio.wait_for(waiter, self.spec.timeout_s)
        if status != 200:
            raise RequestFailed(_http_error(status, body))
        return start, end, sent - start, end - first

    async def _grpc_exchange(self, message: bytes, group: int = 0) -> tuple[int, int, int, int]:
        if self.spec.grpc_client == "grpcio":
            import grpc

            start = now_ns()
            try:
                await self.grpc_unary(
                    message, timeout=self.spec.timeout_s, metadata=self.spec.grpc_metadata or None
                )
            except grpc.aio.AioRpcError as exc:
                raise RequestFailed(exc.details() or exc.code().name) from None
            return start, now_ns(), 0, 0
        connection = await self._h2(group)
        start = now_ns()
        waiter = connection.unary(self.unary_block, message)
        sent = now_ns()
        _first, end, answered = await asyncio.wait_for(waiter, self.spec.timeout_s)
        if not answered:
            raise RequestFailed(await self._grpc_error_text(message))
        return start, end, sent - start, 0

    async def _grpc_error_text(self, message: bytes) -> str:
        """The server's error for a call that came back without a message: asked once via grpcio."""
        spec = self.spec

        def call() -> str:
            import grpc

            with grpc.insecure_channel(f"{spec.host}:{spec.port}") as channel:
                try:
                    channel.unary_unary(UNARY_PATH)(
                        message, timeout=spec.timeout_s, metadata=spec.grpc_metadata or None
                    )
                except grpc.RpcError as exc:
                    return str(exc.details() or exc.code().name)
            return "the server answered the call without a response message"

        return await self.loop.run_in_executor(None, call)

    async def _stream_exchange(
        self, stream: Any, message: bytes, connection: H2Connection | None
    ) -> tuple[int, int, int, int]:
        start = now_ns()
        if self.spec.grpc_client == "grpcio":
            await stream.write(message)
            response = await stream.read()
            if not isinstance(response, bytes):
                raise RequestFailed("the server ended the stream")
        else:
            assert connection is not None
            response = await asyncio.wait_for(connection.stream_call(stream, message), self.spec.timeout_s)
        end = now_ns()
        error = _grpc_error(response)
        if error is not None:
            raise RequestFailed(error)
        return start, end, 0, 0

    # closed loop: concurrency -------------------------------------------------------------------------
    def _set_concurrency(self, count: int) -> None:
        if self.rate_task is not None:
            self.rate_task.cancel()
            self.rate_task = None
        self.target = count
        self.slots = [t for t in self.slots if not t.done()]
        running = len(self.slots)
        for index in range(running, count):
            self.slots.append(self.loop.create_task(self._slot(index)))

    async def _slot(self, index: int) -> None:
        spec = self.spec
        state = SequenceState() if spec.sequence_streams else None
        stream_call = None
        connection: HttpConnection | None = None
        h2: H2Connection | None = None  # the connection of this slot's stream
        group = (index + 1) // GRPC_SLOTS_PER_CONNECTION
        try:
            while index < self.target:
                if state is not None:
                    message, sequence_end = self._sequence_request(state)
                else:
                    message, sequence_end = self._plain_request(), False
                self.sent += 1
                if spec.protocol == "http":
                    if connection is None or connection.closed:
                        connection = await self._http_connect()
                    timing = await self._http_exchange(connection, message)
                elif spec.streaming:
                    if stream_call is None:
                        if spec.grpc_client == "grpcio":
                            stream_call = self.grpc_stream(metadata=spec.grpc_metadata or None)
                        else:
                            h2 = await self._h2(group)
                            stream_call = h2.open_stream(self.stream_block)
                    timing = await self._stream_exchange(stream_call, message, h2)
                else:
                    timing = await self._grpc_exchange(message, group)
                self._record(*timing, sequence_end)
        except RequestFailed as exc:
            self._error(str(exc))
        except (TimeoutError, OSError) as exc:
            self._error(_connection_error(exc, spec))
        except Exception as exc:  # a worker must report, never die silently
            self._error(f"{type(exc).__name__}: {exc}")
        finally:
            if connection is not None and connection.transport is not None:
                connection.transport.close()
            if stream_call is not None:
                if spec.grpc_client == "grpcio":
                    stream_call.cancel()
                elif h2 is not None:
                    h2.close_stream(stream_call)

    # open loop: request rate ----------------------------------------------------------------------
    def _set_rate(self, per_second: float, poisson: bool) -> None:
        self.target = 0
        if self.rate_task is not None:
            self.rate_task.cancel()
        if self.spec.sequence_streams and not self.rate_sequences:
            self.rate_sequences = [SequenceState() for _ in range(max(1, self.spec.num_of_sequences))]
            self.rate_locks = [asyncio.Lock() for _ in self.rate_sequences]
        self.rate_task = self.loop.create_task(self._schedule(per_second, poisson))

    async def _schedule(self, per_second: float, poisson: bool) -> None:
        if per_second <= 0:
            return
        interval_ns = 1e9 / per_second
        due = float(now_ns())
        while True:
            current = now_ns()
            while due <= current:
                task = self.loop.create_task(self._one_shot(int(due)))
                self.inflight.add(task)
                task.add_done_callback(self.inflight.discard)
                due += self.rng.expovariate(1.0) * interval_ns if poisson else interval_ns
            await asyncio.sleep(max(0.0, (due - now_ns()) / 1e9))

    async def _one_shot(self, due_ns: int) -> None:
        spec = self.spec
        sequence_end = False
        lock: asyncio.Lock | None = None
        try:
            if self.rate_sequences:
                index = self.next_sequence_slot()
                lock = self.rate_locks[index]
                await lock.acquire()  # one request at a time per sequence: the START one arrives first
                message, sequence_end = self._sequence_request(self.rate_sequences[index])
            else:
                message = self._plain_request()
            self.sent += 1
            if now_ns() - due_ns > 1_000_000:
                self.delayed += 1
            if spec.protocol == "http":
                connection = self.idle_http.pop() if self.idle_http else await self._http_connect()
                timing = await self._http_exchange(connection, message)
                self.idle_http.append(connection)
            else:
                timing = await self._grpc_exchange(message)
            self._record(*timing, sequence_end)
        except RequestFailed as exc:
            self._error(str(exc))
        except (TimeoutError, OSError) as exc:
            self._error(_connection_error(exc, spec))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error(f"{type(exc).__name__}: {exc}")
        finally:
            if lock is not None:
                lock.release()

    def next_sequence_slot(self) -> int:
        index = self.next_request % len(self.rate_sequences)
        self.next_request += 1
        return index

    async def run(self) -> None:
        if self.spec.protocol == "grpc" and self.spec.grpc_client == "grpcio":
            self._open_grpcio()
        self.loop.add_reader(self.conn.fileno(), self.on_command)
        # the event loop made the descriptor non-blocking; commands and answers are whole pickled
        # messages, read only when readable and written while the parent waits for them
        os.set_blocking(self.conn.fileno(), True)
        self.conn.send(("ready",))
        await self.stopped.wait()
        self.loop.remove_reader(self.conn.fileno())
        if self.grpc_channel is not None:
            await self.grpc_channel.close()
        for h2 in self.h2.values():
            if h2.transport is not None:
                h2.transport.close()
        for connection in self.idle_http:
            if connection.transport is not None:
                connection.transport.close()


def _connection_error(exc: BaseException, spec: LoadSpec) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer from {spec.host}:{spec.port} within {spec.timeout_s:g} s"
    return f"cannot reach {spec.host}:{spec.port}: {exc}"


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells us to stop
    conn = Connection(int(sys.argv[1]))
    spec: LoadSpec = conn.recv()
    if spec.protocol == "http" or spec.grpc_client == "raw":
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(Worker(spec, conn).run())
    finally:
        loop.close()


if __name__ == "__main__":
    main()
