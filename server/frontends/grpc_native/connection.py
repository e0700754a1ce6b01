"""One HTTP/2 server connection as an asyncio Protocol, on the shared HTTP/2 layer
(server/protocol/http2): streams opened for the client's requests, their header blocks decoded, their
DATA fed to the `Call` that `open_call` returns for each new stream (gRPC calls are the business of
calls.py), and writes batched per turn of the event loop. Flow control both ways is the shared
layer's; a call holds back a stream's window (`Stream.hold`) while its handler has not read what it
already has. A connection carries at most `max_streams` calls at once (SETTINGS_MAX_CONCURRENT_STREAMS,
advertised in our SETTINGS; a stream beyond it is refused with RST_STREAM REFUSED_STREAM, which a
client may retry, RFC 9113 5.1.2), and one that stalls mid-frame is closed (`expire`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, cast

import hpack

from server.protocol.http2 import connection as h2
from server.protocol.http2 import frames as f
from server.protocol.http2.frames import H2Error
from server.protocol.http2.header_decoder import HeaderDecoder

log = logging.getLogger("tcli.server.grpc")

STREAM_WINDOW = 4 * 2**20  # our INITIAL_WINDOW_SIZE: a request of a few MB needs no round trip
CONNECTION_WINDOW = 16 * 2**20
MAX_FRAME_IN = 2**20  # our MAX_FRAME_SIZE: large tensors arrive in few frames
MAX_HEADER_LIST = 64 * 2**10


class Call(Protocol):
    """What a stream's content goes to."""

    def on_data(self, data: bytes | bytearray) -> None: ...
    def on_end(self) -> None: ...  # the client half-closed the stream
    def on_reset(self) -> None: ...  # the stream was reset or the connection is gone
    def cancel(self) -> None: ...  # the server ends the call (it is shutting down)


class Stream(h2.Stream):
    """A client's stream and the call it carries."""

    __slots__ = ("call",)

    def __init__(self, stream_id: int, window: int) -> None:
        super().__init__(stream_id, window, STREAM_WINDOW)
        self.call: Call | None = None


OpenCall = Callable[["Connection", Stream, list[tuple[bytes, bytes]]], Call]


class Connection(h2.Endpoint[Stream], asyncio.Protocol):
    """A cleartext HTTP/2 server connection (prior knowledge, as gRPC clients speak it)."""

    stream_window = STREAM_WINDOW
    connection_window = CONNECTION_WINDOW
    max_frame_in = MAX_FRAME_IN
    reset_after_end = True

    def __init__(
        self, open_call: OpenCall, on_closed: Callable[[Connection], None], max_streams: int = 1024
    ) -> None:
        super().__init__()
        self.max_streams = max_streams
        self.open_call = open_call
        self.on_closed = on_closed
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._out: list[bytes] | None = None  # written this turn of the loop, not yet sent
        self._decoder = HeaderDecoder(MAX_HEADER_LIST)
        self._paused = False  # the transport's buffer is full
        self._writers: list[asyncio.Future[None]] = []  # calls waiting to write more
        self._goaway_sent = False
        self.last_read = self.loop.time()

    # asyncio ----------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._write = self._buffered
        self._write(
            self.preface(
                ((f.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST), (f.MAX_CONCURRENT_STREAMS, self.max_streams))
            )
        )

    def data_received(self, data: bytes) -> None:
        self.last_read = self.loop.time()
        super().data_received(data)

    def expire(self, now: float, timeout: float) -> None:
        """Close when the client began a frame (or owes its preface) and sent nothing for `timeout`
        seconds: what it buffered goes with the connection."""
        if not self.closed and self.mid_frame() and now - self.last_read > timeout:
            self._fail(f.PROTOCOL_ERROR, f"no complete frame for {timeout:g}s")
            if self.transport is not None and self.transport.get_write_buffer_size():
                self.transport.abort()

    def _buffered(self, data: bytes) -> None:
        """With other streams open, frames written in one turn of the event loop leave in one send
        (answers finished together share a system call); a lone stream's go at once (no call_soon)."""
        out = self._out
        if out is not None:
            out.append(data)
        elif len(self.streams) > 1:
            self._out = [data]
            self.loop.call_soon(self._send_out)
        else:
            assert self.transport is not None
            self.transport.write(data)

    def _send_out(self) -> None:
        out, self._out = self._out, None
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()
        self.on_closed(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._unblocked()

    # the shared layer's hooks -----------------------------------------------------------------------
    def _header_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        try:
            headers = self._decoder.decode(block)  # always decoded: the HPACK state must follow
        except hpack.OversizedHeaderListError:
            raise H2Error(f.ENHANCE_YOUR_CALM, "header list too large") from None
        except hpack.HPACKError as exc:
            raise H2Error(f.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client: only an end of stream means anything
            if not end_stream:
                raise H2Error(f.PROTOCOL_ERROR, "second HEADERS without END_STREAM")
            if not stream.remote_closed:
                self._stream_data(stream, b"", True)
            return
        if stream_id % 2 == 0 or stream_id <= self._highest_stream:
            raise H2Error(f.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}, not a new client stream")
        self._highest_stream = stream_id
        if self._goaway_sent or len(self.streams) >= self.max_streams:
            self._write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        stream = Stream(stream_id, self._initial_window)
        stream.remote_closed = end_stream
        self.streams[stream_id] = stream
        call = stream.call = self.open_call(self, stream, headers)
        if end_stream and not stream.finished:
            call.on_end()

    def _stream_data(self, stream: Stream, data: bytes | bytearray, end: bool) -> None:
        call = stream.call
        assert call is not None
        if data:
            call.on_data(data)
        if end and not stream.finished:
            stream.remote_closed = True
            call.on_end()

    def _stream_reset(self, stream: Stream, code: int | None) -> None:
        call = stream.call
        if call is not None:
            call.on_reset()

    def _goaway_received(self, last_stream_id: int, code: int) -> None:
        self._draining = True  # the client opens no more streams: close once these are done
        if not self.streams:
            self.close()

    def _unblocked(self) -> None:
        writers, self._writers = self._writers, []
        for waiter in writers:
            if not waiter.done():
                waiter.set_result(None)

    # what calls use ---------------------------------------------------------------------------------
    def send_answer(
        self, stream: Stream, head: bytes, prefix: bytes, message: bytes, trailers: bytes
    ) -> None:
        """Response headers, one DATA frame (`prefix` + `message`) and the trailers ending the stream:
        in one write when the windows allow (every small unary answer)."""
        self.send(stream, head, prefix, message, trailers)

    def writable(self, stream: Stream) -> bool:
        """Whether more may be written for `stream` without growing a queue."""
        return stream.blocked is None and not self._paused

    async def wait_writable(self, stream: Stream) -> None:
        while not self.writable(stream) and not stream.finished and not self.closed:
            waiter = self.loop.create_future()
            self._writers.append(waiter)
            await waiter

    # ending -----------------------------------------------------------------------------------------
    def goaway(self) -> None:
        """Graceful shutdown: no new streams (GOAWAY); closes once the open ones are done."""
        if self.closed or self._goaway_sent:
            return
        self._goaway_sent = self._draining = True
        self._write(f.goaway(self._highest_stream, f.NO_ERROR))
        if not self.streams:
            self.close()

    def cancel_calls(self) -> None:
        """End every call still open with CANCELLED, as a gRPC server shutting down ends them (the
        client reads a status, not a dropped connection)."""
        for stream in list(self.streams.values()):
            if stream.call is not None:
                stream.call.cancel()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self._send_out()
            self.transport.close()

    def _fail(self, code: int, message: str) -> None:
        log.debug("closing an HTTP/2 connection: %s", message)
        super()._fail(code, message)
