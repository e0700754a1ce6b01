"""One HTTP/2 server connection as an asyncio Protocol: frames in, streams opened and fed, frames out
within the client's flow-control windows. What a stream carries (gRPC calls) is the business of the
`Call` that `open_call` returns for each new stream.

Flow control, receiving: the connection window is credited as DATA arrives; a stream's window too,
unless its call holds back (a streaming call whose handler has not read what it already has), so a
client cannot queue unbounded requests on a stream nobody reads. Sending: DATA never exceeds the
client's windows nor its MAX_FRAME_SIZE; what does not fit waits, in order with the trailers that
follow it, for WINDOW_UPDATE.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

import hpack

from server.frontends.grpc_native import frames as f
from server.frontends.grpc_native.frames import HEAD, H2Error

log = logging.getLogger("tcli.server.grpc")

STREAM_WINDOW = 4 * 2**20  # our INITIAL_WINDOW_SIZE: a request of a few MB needs no round trip
CONNECTION_WINDOW = 16 * 2**20
MAX_FRAME_IN = 2**20  # our MAX_FRAME_SIZE: large tensors arrive in few frames
MAX_HEADER_LIST = 64 * 2**10
MAX_HEADER_BLOCK = 256 * 2**10  # a HEADERS + CONTINUATION block longer than this ends the connection

_SETTINGS = f.settings(
    [
        (f.INITIAL_WINDOW_SIZE, STREAM_WINDOW),
        (f.MAX_FRAME_SIZE, MAX_FRAME_IN),
        (f.MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
    ]
)
_SERVER_PREFACE = _SETTINGS + f.window_update(0, CONNECTION_WINDOW - f.DEFAULT_WINDOW)
_SETTINGS_ACK = f.frame(f.SETTINGS, f.ACK, 0)


class Call(Protocol):
    """What a stream's content goes to."""

    def on_data(self, data: bytes | bytearray) -> None: ...
    def on_end(self) -> None: ...  # the client half-closed the stream
    def on_reset(self) -> None: ...  # the stream was reset or the connection is gone


class Stream:
    """The HTTP/2 state of one stream."""

    __slots__ = (
        "blocked",
        "call",
        "hold",
        "id",
        "local_closed",
        "recv_window",
        "remote_closed",
        "reset",
        "unacked",
        "window",
    )

    def __init__(self, stream_id: int, window: int) -> None:
        self.id = stream_id
        self.window = window  # what we may still send
        self.recv_window = STREAM_WINDOW  # what the client may still send
        self.unacked = 0  # received, not yet credited back
        self.hold = False  # the call asks not to credit the window for now
        self.remote_closed = False
        self.local_closed = False
        self.reset = False
        # frames waiting for flow control: (DATA, data, end) or (HEADERS, block, end)
        self.blocked: deque[tuple[int, memoryview | bytes, bool]] | None = None
        self.call: Call | None = None

    @property
    def finished(self) -> bool:
        return self.local_closed or self.reset


OpenCall = Callable[["Connection", Stream, list[tuple[bytes, bytes]]], Call]


class Connection(asyncio.Protocol):
    """A cleartext HTTP/2 connection (prior knowledge, as gRPC clients speak it)."""

    def __init__(self, open_call: OpenCall, on_closed: Callable[[Connection], None]) -> None:
        self.open_call = open_call
        self.on_closed = on_closed
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self._write: Callable[[bytes], None] = lambda data: None
        self._out: list[bytes] | None = None  # written this turn of the loop, not yet sent
        self._buffer = bytearray()
        self._preface = True  # the client preface is still expected
        self._decoder = f.HeaderDecoder(MAX_HEADER_LIST)
        self._continuing: tuple[int, bytearray, bool] | None = None  # a header block awaiting CONTINUATION
        self._last_stream_id = 0
        self._send_window = f.DEFAULT_WINDOW  # connection window for what we send
        self._initial_window = f.DEFAULT_WINDOW  # the client's INITIAL_WINDOW_SIZE
        self._max_frame_out = f.DEFAULT_MAX_FRAME
        self._recv_window = CONNECTION_WINDOW
        self._recv_unacked = 0
        self._blocked: dict[int, Stream] = {}  # streams with frames waiting for flow control
        self._paused = False  # the transport's buffer is full
        self._writers: list[asyncio.Future[None]] = []  # calls waiting to write more
        self._goaway_sent = False
        self._draining = False  # close as soon as no stream is open
        self.closed = False

    # asyncio ----------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._write = self._buffered
        self._write(_SERVER_PREFACE)

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
        self.closed = True
        streams, self.streams = self.streams, {}
        self._blocked.clear()
        for stream in streams.values():
            stream.reset = True
            if stream.call is not None:
                stream.call.on_reset()
        self._wake_writers()
        self.on_closed(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        try:
            used = self._frames(view)
        except H2Error as error:
            self._fail(error.code, str(error))
            return
        if view is buffer:
            del buffer[:used]
        elif used < len(data):
            buffer += data[used:]

    # frames in --------------------------------------------------------------------------------------
    def _frames(self, data: bytes | bytearray) -> int:
        """Handle each complete frame in `data`; returns how many bytes were used."""
        at, size = 0, len(data)
        if self._preface:
            if size < len(f.PREFACE):
                if not f.PREFACE.startswith(bytes(data)):
                    raise H2Error(f.PROTOCOL_ERROR, "not an HTTP/2 client (expected the connection preface)")
                return 0
            if data[: len(f.PREFACE)] != f.PREFACE:
                raise H2Error(f.PROTOCOL_ERROR, "not an HTTP/2 client (expected the connection preface)")
            self._preface = False
            at = len(f.PREFACE)
        unpack = HEAD.unpack_from
        while size - at >= 9 and not self.closed:
            word, flags, stream_id = unpack(data, at)
            length, kind = word >> 8, word & 0xFF
            if length > MAX_FRAME_IN:
                raise H2Error(f.FRAME_SIZE_ERROR, f"frame of {length} bytes exceeds MAX_FRAME_SIZE")
            end = at + 9 + length
            if end > size:
                break
            payload = data[at + 9 : end]
            at = end
            stream_id &= 0x7FFFFFFF
            if self._continuing is not None and kind != f.CONTINUATION:
                raise H2Error(f.PROTOCOL_ERROR, "expected a CONTINUATION frame")
            if kind == f.DATA:
                self._data(flags, stream_id, payload)
            elif kind == f.HEADERS:
                self._headers(flags, stream_id, payload)
            elif kind == f.CONTINUATION:
                self._continuation(flags, stream_id, payload)
            elif kind == f.WINDOW_UPDATE:
                self._window_update(stream_id, payload)
            elif kind == f.SETTINGS:
                self._settings(flags, stream_id, payload)
            elif kind == f.PING:
                if length != 8 or stream_id:
                    raise H2Error(f.FRAME_SIZE_ERROR, "PING must carry 8 bytes on stream 0")
                if not flags & f.ACK:
                    self._write(f.frame(f.PING, f.ACK, 0, bytes(payload)))
            elif kind == f.RST_STREAM:
                self._rst_stream(stream_id, payload)
            elif kind == f.GOAWAY:
                self._goaway_received()
            elif kind == f.PUSH_PROMISE:
                raise H2Error(f.PROTOCOL_ERROR, "clients must not send PUSH_PROMISE")
            # PRIORITY and unknown frame types are ignored, as the RFC asks
        return at

    def _data(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        length = len(payload)
        self._recv_window -= length
        if self._recv_window < 0:
            raise H2Error(f.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._recv_unacked += length
        if self._recv_unacked >= CONNECTION_WINDOW // 2:
            self._write(f.window_update(0, self._recv_unacked))
            self._recv_window += self._recv_unacked
            self._recv_unacked = 0
        if flags & f.PADDED:
            payload = _unpad(payload)
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id == 0 or stream_id > self._last_stream_id:
                raise H2Error(f.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream we ended or reset: its late data is dropped
        end = flags & f.END_STREAM
        stream.recv_window -= length
        if stream.recv_window < 0:
            self.reset(stream, f.FLOW_CONTROL_ERROR)
            return
        if not end:
            stream.unacked += length
            if stream.unacked >= STREAM_WINDOW // 2 and not stream.hold:
                self.credit(stream)
        call = stream.call
        assert call is not None
        if payload:
            call.on_data(payload)
        if end and not stream.finished:
            stream.remote_closed = True
            call.on_end()

    def _headers(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        if stream_id == 0:
            raise H2Error(f.PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & f.PADDED:
            payload = _unpad(payload)
        if flags & f.PRIORITY_FLAG:
            payload = payload[5:]
        end_stream = bool(flags & f.END_STREAM)
        if flags & f.END_HEADERS:
            self._header_block(stream_id, bytes(payload), end_stream)
        else:
            self._continuing = (stream_id, bytearray(payload), end_stream)

    def _continuation(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        if self._continuing is None or self._continuing[0] != stream_id:
            raise H2Error(f.PROTOCOL_ERROR, "CONTINUATION without the HEADERS it continues")
        block = self._continuing[1]
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise H2Error(f.ENHANCE_YOUR_CALM, "header block too large")
        if flags & f.END_HEADERS:
            end_stream = self._continuing[2]
            self._continuing = None
            self._header_block(stream_id, bytes(block), end_stream)

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
                self._data(f.END_STREAM, stream_id, b"")
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            raise H2Error(f.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}, not a new client stream")
        self._last_stream_id = stream_id
        if self._goaway_sent:
            self._write(f.rst_stream(stream_id, f.REFUSED_STREAM))
            return
        stream = Stream(stream_id, self._initial_window)
        stream.remote_closed = end_stream
        self.streams[stream_id] = stream
        call = stream.call = self.open_call(self, stream, headers)
        if end_stream and not stream.finished:
            call.on_end()

    def _window_update(self, stream_id: int, payload: bytes | bytearray) -> None:
        if len(payload) != 4:
            raise H2Error(f.FRAME_SIZE_ERROR, "WINDOW_UPDATE must carry 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise H2Error(f.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > f.MAX_WINDOW:
                raise H2Error(f.FLOW_CONTROL_ERROR, "connection window above 2^31-1")
        else:
            stream = self.streams.get(stream_id)
            if stream is None:
                return
            if increment == 0:
                self.reset(stream, f.PROTOCOL_ERROR)
                return
            stream.window += increment
            if stream.window > f.MAX_WINDOW:
                self.reset(stream, f.FLOW_CONTROL_ERROR)
                return
        if self._blocked:
            self._flush()

    def _settings(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        if stream_id:
            raise H2Error(f.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise H2Error(f.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            return
        for key, value in f.parse_settings(bytes(payload)):
            if key == f.INITIAL_WINDOW_SIZE:
                if value > f.MAX_WINDOW:
                    raise H2Error(f.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE above 2^31-1")
                delta, self._initial_window = value - self._initial_window, value
                for stream in self.streams.values():
                    stream.window += delta
            elif key == f.MAX_FRAME_SIZE:
                if not f.DEFAULT_MAX_FRAME <= value <= f.MAX_FRAME_LIMIT:
                    raise H2Error(f.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value} out of range")
                self._max_frame_out = value
            elif key == f.ENABLE_PUSH and value > 1:
                raise H2Error(f.PROTOCOL_ERROR, "ENABLE_PUSH must be 0 or 1")
            # HEADER_TABLE_SIZE: our header blocks never use the dynamic table, any size suits them
        self._write(_SETTINGS_ACK)
        if self._blocked:
            self._flush()

    def _rst_stream(self, stream_id: int, payload: bytes | bytearray) -> None:
        if len(payload) != 4:
            raise H2Error(f.FRAME_SIZE_ERROR, "RST_STREAM must carry 4 bytes")
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            if stream_id == 0 or stream_id > self._last_stream_id:
                raise H2Error(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
            return
        self._drop(stream)

    def _goaway_received(self) -> None:
        self._draining = True  # the client opens no more streams: close once these are done
        if not self.streams:
            self.close()

    # frames out -------------------------------------------------------------------------------------
    def send_headers(self, stream: Stream, block: bytes, end: bool = False) -> None:
        if stream.finished:
            return
        if stream.blocked is not None:
            self._enqueue(stream, f.HEADERS, block, end)
            return
        self._write(f.header_frames(stream.id, block, end, self._max_frame_out))
        if end:
            self._ended(stream)

    def send_data(self, stream: Stream, data: bytes, end: bool = False) -> None:
        if stream.finished:
            return
        size = len(data)
        if (
            stream.blocked is None
            and size <= self._max_frame_out
            and size <= self._send_window
            and size <= stream.window
        ):
            self._send_window -= size
            stream.window -= size
            self._write(HEAD.pack(size << 8 | f.DATA, f.END_STREAM if end else 0, stream.id) + data)
            if end:
                self._ended(stream)
            return
        self._enqueue(stream, f.DATA, memoryview(data), end)

    def send_answer(
        self, stream: Stream, head: bytes, prefix: bytes, message: bytes, trailers: bytes
    ) -> None:
        """Response headers, one DATA frame (`prefix` + `message`) and the trailers ending the stream:
        in one write when the windows allow (every small unary answer)."""
        if stream.finished:
            return
        size = len(prefix) + len(message)
        max_frame = self._max_frame_out
        if (
            stream.blocked is None
            and size <= max_frame
            and size <= self._send_window
            and size <= stream.window
            and len(head) <= max_frame
            and len(trailers) <= max_frame
        ):
            self._send_window -= size
            stream.window -= size
            sid = stream.id
            self._write(
                b"".join(
                    (
                        HEAD.pack(len(head) << 8 | f.HEADERS, f.END_HEADERS, sid),
                        head,
                        HEAD.pack(size << 8 | f.DATA, 0, sid),
                        prefix,
                        message,
                        HEAD.pack(len(trailers) << 8 | f.HEADERS, f.END_HEADERS | f.END_STREAM, sid),
                        trailers,
                    )
                )
            )
            self._ended(stream)
            return
        self.send_headers(stream, head)
        self.send_data(stream, prefix + message)
        self.send_headers(stream, trailers, end=True)

    def reset(self, stream: Stream, code: int) -> None:
        """End a stream with RST_STREAM (its call is told)."""
        if stream.reset:
            return
        if not stream.local_closed or not stream.remote_closed:
            self._write(f.rst_stream(stream.id, code))
        self.streams.pop(stream.id, None)
        self._drop(stream)

    def credit(self, stream: Stream) -> None:
        """Give the client back the stream window it used (WINDOW_UPDATE), unless it is done sending."""
        if stream.unacked and not stream.remote_closed and not stream.finished:
            self._write(f.window_update(stream.id, stream.unacked))
            stream.recv_window += stream.unacked
        stream.unacked = 0

    def writable(self, stream: Stream) -> bool:
        """Whether more may be written for `stream` without growing a queue."""
        return stream.blocked is None and not self._paused

    async def wait_writable(self, stream: Stream) -> None:
        while not self.writable(stream) and not stream.finished and not self.closed:
            waiter = self.loop.create_future()
            self._writers.append(waiter)
            await waiter

    def _enqueue(self, stream: Stream, kind: int, data: memoryview | bytes, end: bool) -> None:
        if stream.blocked is None:
            stream.blocked = deque()
            self._blocked[stream.id] = stream
        stream.blocked.append((kind, data, end))
        self._flush()

    def _flush(self) -> None:
        """Send what flow control now allows of the waiting frames, stream by stream in order."""
        for stream in list(self._blocked.values()):
            queue = stream.blocked
            assert queue is not None
            while queue and not stream.finished:
                kind, data, end = queue[0]
                if kind == f.HEADERS:
                    queue.popleft()
                    self._write(f.header_frames(stream.id, bytes(data), end, self._max_frame_out))
                    if end:
                        self._ended(stream)
                    continue
                size = min(len(data), self._max_frame_out, self._send_window, stream.window)
                if size <= 0 and len(data):
                    break
                last = size == len(data)
                self._send_window -= size
                stream.window -= size
                flags = f.END_STREAM if last and end else 0
                self._write(HEAD.pack(size << 8 | f.DATA, flags, stream.id) + bytes(data[:size]))
                if not last:
                    queue[0] = (kind, data[size:], end)
                    continue
                queue.popleft()
                if end:
                    self._ended(stream)
            if not queue or stream.finished:
                stream.blocked = None
                self._blocked.pop(stream.id, None)
                self._wake_writers()

    def _ended(self, stream: Stream) -> None:
        """We sent END_STREAM: a client still sending is asked to stop (RST_STREAM NO_ERROR)."""
        stream.local_closed = True
        if not stream.remote_closed:
            self._write(f.rst_stream(stream.id, f.NO_ERROR))
            stream.reset = True
        if stream.blocked is not None:
            stream.blocked = None
            self._blocked.pop(stream.id, None)
        if stream.reset or stream.remote_closed:
            self.streams.pop(stream.id, None)
        if self._draining and not self.streams:
            self.close()

    def _drop(self, stream: Stream) -> None:
        stream.reset = True
        if stream.blocked is not None:
            stream.blocked = None
            self._blocked.pop(stream.id, None)
        if stream.call is not None:
            stream.call.on_reset()
        self._wake_writers()
        if self._draining and not self.streams:
            self.close()

    def _wake_writers(self) -> None:
        writers, self._writers = self._writers, []
        for waiter in writers:
            if not waiter.done():
                waiter.set_result(None)

    # ending -----------------------------------------------------------------------------------------
    def goaway(self) -> None:
        """Graceful shutdown: no new streams (GOAWAY); closes once the open ones are done."""
        if self.closed or self._goaway_sent:
            return
        self._goaway_sent = self._draining = True
        self._write(f.goaway(self._last_stream_id, f.NO_ERROR))
        if not self.streams:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self._send_out()
            self.transport.close()

    def _fail(self, code: int, message: str) -> None:
        log.debug("closing an HTTP/2 connection: %s", message)
        if not self.closed:
            self._write(f.goaway(self._last_stream_id, code, message.encode()[:256]))
            self.close()


def _unpad(payload: bytes | bytearray) -> bytes | bytearray:
    if not payload or payload[0] >= len(payload):
        raise H2Error(f.PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]
