"""The load generator's gRPC client: one hand-driven HTTP/2 connection (cleartext, prior knowledge)
carrying many concurrent calls of pre-serialized messages: frames, the few HPACK encodings it needs,
flow control, and answers to SETTINGS and PING. Standard library only, so that a worker process
starts cheaply.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from tcli.perf.load_spec import RequestFailed, now_ns

# grpcio costs about ten times more CPU per call than the raw HTTP/1.1 client of http1_client.py
# (measured: ~250 µs against ~25 µs per request), enough to take CPU from the server being measured on
# a small machine.
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
