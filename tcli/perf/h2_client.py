"""The load generator's gRPC client: one HTTP/2 connection (cleartext, prior knowledge) carrying many
concurrent calls of pre-serialized messages, on the same HTTP/2 layer as the server
(server/protocol/http2: frames, flow control, answers to SETTINGS and PING). Standard library only
besides that layer, so that a worker process starts cheaply.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from server.protocol.http2 import connection as h2
from server.protocol.http2 import frames as f
from server.protocol.http2.header_block import indexed, literal, literal_named
from tcli.perf.load_spec import RequestFailed, now_ns

# grpcio costs about ten times more CPU per call than the raw HTTP/1.1 client of http1_client.py
# (measured: ~250 µs against ~25 µs per request), enough to take CPU from the server being measured on
# a small machine.
# gRPC needs little of HTTP/2 from a client that sends pre-encoded requests: a HEADERS frame whose HPACK
# block never changes (static-table names, literal values, no dynamic table), DATA frames, flow control,
# and answers to SETTINGS and PING. Responses are not decoded: a unary call succeeded when its stream
# carried a gRPC message (Triton and grpcio servers answer errors with trailers only); the error text
# of a failed call is then fetched once through grpcio.
_BIG_WINDOW = 2**31 - 1


def grpc_header_block(path: str, authority: str, metadata: list[tuple[str, str]]) -> bytes:
    """The HPACK block of every request on `path`: indexed :method POST and :scheme http, then
    literals without indexing (static-table names where there is one), so no dynamic table is used."""
    block = indexed(3) + indexed(6)  # :method POST, :scheme http
    block += literal_named(4, path.encode())  # :path
    block += literal_named(1, authority.encode())  # :authority
    block += literal_named(31, b"application/grpc")  # content-type
    block += literal(b"te", b"trailers")
    for name, value in metadata:
        block += literal(name.lower().encode(), value.encode())
    return block


class _H2Stream(h2.Stream):
    __slots__ = ("first_ns", "got_data", "messages", "pending", "streaming", "waiter")

    def __init__(self, stream_id: int, window: int, streaming: bool) -> None:
        super().__init__(stream_id, window, _BIG_WINDOW)
        self.streaming = streaming
        self.first_ns = 0
        self.got_data = False
        self.waiter: asyncio.Future[Any] | None = None
        self.pending = bytearray()  # streaming: bytes of gRPC messages not yet complete
        self.messages: list[bytes] = []  # streaming: complete messages not yet read

    @property
    def ended(self) -> bool:
        return self.remote_closed or self.closed


class H2Connection(h2.Endpoint[_H2Stream], asyncio.Protocol):
    """One HTTP/2 connection (prior knowledge, cleartext) carrying many concurrent gRPC calls."""

    client_side = True
    stream_window = _BIG_WINDOW  # responses never wait for a WINDOW_UPDATE from us
    connection_window = _BIG_WINDOW

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.next_id = 1
        self.goaway_received = False
        self.failure = "the server closed the connection"

    def usable(self) -> bool:
        """Whether new calls may go on this connection."""
        return not self.closed and not self.goaway_received

    # connection -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        self._write = self.transport.write
        self._write(self.preface(((f.ENABLE_PUSH, 0),)))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.failure = f"the server closed the connection: {exc}"
        self._lost()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, code: int, message: str) -> None:
        self.failure = f"the server broke HTTP/2: {message}"
        super()._fail(code, message)

    # calls ----------------------------------------------------------------------------------------
    def _open(self, streaming: bool) -> _H2Stream:
        if not self.usable() or self.transport is None:
            raise RequestFailed(self.failure)
        stream = _H2Stream(self.next_id, self._initial_window, streaming)
        self.next_id += 2
        self._opened(stream)
        return stream

    def unary(self, header_block: bytes, message: bytes) -> asyncio.Future[tuple[int, int, bool]]:
        """Send one call; the future gives (first response byte ns, end ns, carried a message)."""
        stream = self._open(streaming=False)
        waiter = stream.waiter = self.loop.create_future()
        self.send(stream, header_block, len(message).to_bytes(5, "big"), message, b"", True)
        return waiter

    def open_stream(self, header_block: bytes) -> _H2Stream:
        stream = self._open(streaming=True)
        self.send_headers(stream, header_block)
        return stream

    def stream_call(self, stream: _H2Stream, message: bytes) -> asyncio.Future[bytes]:
        """Write one message on a bidirectional stream; the future gives the next message read."""
        if stream.ended:
            raise RequestFailed("the server ended the stream")
        waiter = stream.waiter = self.loop.create_future()
        self.send(stream, b"", len(message).to_bytes(5, "big"), message, b"", False)
        return waiter

    def close_stream(self, stream: _H2Stream) -> None:
        if not stream.ended and not self.closed:
            self.reset(stream, f.CANCEL)
        else:
            self.forget(stream)

    # the shared layer's hooks ---------------------------------------------------------------------
    def _header_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        stream = self.streams.get(stream_id)
        if stream is not None and end_stream:  # trailers (or a trailers-only answer): the call is over
            self._complete(stream)

    def _stream_data(self, stream: _H2Stream, data: bytes | bytearray, end: bool) -> None:
        if not stream.first_ns:
            stream.first_ns = now_ns()
        if data:
            stream.got_data = True
            if stream.streaming:
                self._stream_messages(stream, data)
        if end:
            self._complete(stream)

    def _stream_reset(self, stream: _H2Stream, code: int | None) -> None:
        message = self.failure if code is None else f"the server reset the call (HTTP/2 error {code})"
        _fail(stream, message)

    def _goaway_received(self, last_stream_id: int, code: int) -> None:
        self.goaway_received = True  # calls up to last_stream_id still finish here
        self.failure = "the server is closing the connection (GOAWAY)"
        for stream_id in [sid for sid in self.streams if sid > last_stream_id]:
            stream = self.streams[stream_id]
            self.forget(stream)
            _fail(stream, self.failure)

    # answers --------------------------------------------------------------------------------------
    def _stream_messages(self, stream: _H2Stream, payload: bytes | bytearray) -> None:
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

    def _complete(self, stream: _H2Stream) -> None:
        stream.remote_closed = True
        self.forget(stream)
        waiter, stream.waiter = stream.waiter, None
        if waiter is None or waiter.done():
            return
        if not stream.streaming:
            end = now_ns()
            waiter.set_result((stream.first_ns or end, end, stream.got_data))
        elif stream.messages:
            waiter.set_result(stream.messages.pop(0))
        else:  # the server ended the stream (an error's trailers) without answering this request
            waiter.set_exception(RequestFailed("the server ended the stream"))


def _fail(stream: _H2Stream, message: str) -> None:
    waiter, stream.waiter = stream.waiter, None
    if waiter is not None and not waiter.done():
        waiter.set_exception(RequestFailed(message))
