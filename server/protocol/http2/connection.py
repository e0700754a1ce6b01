"""One HTTP/2 endpoint's connection state (RFC 9113), shared by the native gRPC server and `tcli
perf`'s client: frames in (the frame loop, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, header
blocks assembled from HEADERS and CONTINUATION), frames out within the peer's flow-control windows
and frame size, and the windows we grant credited back as DATA is consumed.

No I/O here: a subclass sets `_write` (bytes out), feeds `data_received`, implements `close`, and
says what streams carry through four hooks: `_header_block` (a complete header block),
`_stream_data` (a stream's DATA, after flow control), `_stream_reset` (a stream ended abnormally) and
`_goaway_received`.

Flow control, receiving: the connection window is credited as DATA arrives, once half of it is used;
a stream's window likewise, unless the stream holds back (`Stream.hold`, set by a reader that has not
consumed what it already has), so a peer cannot queue unbounded data on a stream nobody reads.
Sending: DATA never exceeds the peer's windows nor its MAX_FRAME_SIZE; what does not fit waits, in
order with the HEADERS that follow it (trailers), for WINDOW_UPDATE or a larger INITIAL_WINDOW_SIZE.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from server.protocol.http2 import frames as f
from server.protocol.http2.frames import HEAD, H2Error

MAX_HEADER_BLOCK = 256 * 2**10  # a HEADERS + CONTINUATION block longer than this ends the connection


class Stream:
    """The HTTP/2 state of one stream."""

    __slots__ = (
        "blocked",
        "closed",
        "hold",
        "id",
        "local_closed",
        "recv_window",
        "remote_closed",
        "unacked",
        "window",
    )

    def __init__(self, stream_id: int, window: int, recv_window: int) -> None:
        self.id = stream_id
        self.window = window  # what we may still send
        self.recv_window = recv_window  # what the peer may still send
        self.unacked = 0  # received, not yet credited back
        self.hold = False  # do not credit the window for now
        self.remote_closed = False  # the peer sent END_STREAM
        self.local_closed = False  # we sent END_STREAM
        self.closed = False  # reset (either way) or dropped: nothing more is sent
        # frames waiting for flow control: (DATA, data, end) or (HEADERS, block, end)
        self.blocked: deque[tuple[int, memoryview | bytes, bool]] | None = None

    @property
    def finished(self) -> bool:
        return self.local_closed or self.closed


S = TypeVar("S", bound=Stream)


class Endpoint(Generic[S]):
    """The connection state of a client or a server endpoint (cleartext, prior knowledge), its
    streams of type S."""

    client_side = False
    # what we grant the peer: INITIAL_WINDOW_SIZE, the connection window, MAX_FRAME_SIZE
    stream_window = f.DEFAULT_WINDOW
    connection_window = f.DEFAULT_WINDOW
    max_frame_in = f.DEFAULT_MAX_FRAME
    # a server answers END_STREAM sent before the client's with RST_STREAM NO_ERROR (RFC 9113 8.1)
    reset_after_end = False

    def __init__(self) -> None:
        self.streams: dict[int, S] = {}
        self.closed = False  # nothing more is read or written
        self._write: Callable[[bytes], None] = lambda data: None
        self._buffer = bytearray()
        self._preface = not self.client_side  # a server expects the client's preface first
        self._continuing: tuple[int, bytearray, bool] | None = None  # a block awaiting CONTINUATION
        self._highest_stream = 0  # the highest stream id opened so far; above it streams are idle
        self._send_window = f.DEFAULT_WINDOW  # connection window for what we send
        self._initial_window = f.DEFAULT_WINDOW  # the peer's INITIAL_WINDOW_SIZE
        self._max_frame_out = f.DEFAULT_MAX_FRAME  # the peer's MAX_FRAME_SIZE
        self._recv_window = self.connection_window
        self._recv_unacked = 0
        self._credit_at = self.connection_window // 2  # credit the connection window past this
        self._stream_credit_at = self.stream_window // 2
        self._blocked: dict[int, S] = {}  # streams with frames waiting for flow control
        self._draining = False  # close as soon as no stream is open

    def preface(self, extra_settings: tuple[tuple[int, int], ...] = ()) -> bytes:
        """What this endpoint writes first: (a client's preface,) SETTINGS announcing our windows and
        frame size where they differ from the defaults, and the connection window's WINDOW_UPDATE."""
        pairs = list(extra_settings)
        if self.stream_window != f.DEFAULT_WINDOW:
            pairs.append((f.INITIAL_WINDOW_SIZE, self.stream_window))
        if self.max_frame_in != f.DEFAULT_MAX_FRAME:
            pairs.append((f.MAX_FRAME_SIZE, self.max_frame_in))
        out = (f.PREFACE if self.client_side else b"") + f.settings(pairs)
        if self.connection_window > f.DEFAULT_WINDOW:
            out += f.window_update(0, self.connection_window - f.DEFAULT_WINDOW)
        return out

    def mid_frame(self) -> bool:
        """Whether a frame (or the client's preface, or a header block's CONTINUATION) has begun
        and not yet arrived whole: a peer that stops here holds the connection."""
        return self._preface or bool(self._buffer) or self._continuing is not None

    # hooks ------------------------------------------------------------------------------------------
    def _header_block(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        raise NotImplementedError

    def _stream_data(self, stream: S, data: bytes | bytearray, end: bool) -> None:
        """A stream's DATA (flow control done); on `end` the hook marks the end (`_remote_end`)."""
        raise NotImplementedError

    def _stream_reset(self, stream: S, code: int | None) -> None:
        """The stream ended abnormally: `code` of the peer's RST_STREAM, None when we reset it or
        the connection is gone."""

    def _goaway_received(self, last_stream_id: int, code: int) -> None:
        pass

    def _unblocked(self) -> None:
        """A stream's queue emptied or a stream ended: writers waiting for room may go on."""

    def close(self) -> None:
        raise NotImplementedError

    # frames in --------------------------------------------------------------------------------------
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
        max_frame = self.max_frame_in
        while size - at >= 9 and not self.closed:
            word, flags, stream_id = unpack(data, at)
            length, kind = word >> 8, word & 0xFF
            if length > max_frame:
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
                    self._write(f.ping(bytes(payload), ack=True))
            elif kind == f.RST_STREAM:
                self._rst_stream(stream_id, payload)
            elif kind == f.GOAWAY:
                if len(payload) < 8 or stream_id:
                    raise H2Error(f.FRAME_SIZE_ERROR, "GOAWAY must carry 8 bytes on stream 0")
                last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                self._goaway_received(last, int.from_bytes(payload[4:8], "big"))
            elif kind == f.PUSH_PROMISE:
                raise H2Error(f.PROTOCOL_ERROR, "PUSH_PROMISE, never enabled here")
            # PRIORITY and unknown frame types are ignored, as the RFC asks
        return at

    def _data(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        length = len(payload)
        self._recv_window -= length
        if self._recv_window < 0:
            raise H2Error(f.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._recv_unacked += length
        if self._recv_unacked >= self._credit_at:
            self._write(f.window_update(0, self._recv_unacked))
            self._recv_window += self._recv_unacked
            self._recv_unacked = 0
        if flags & f.PADDED:
            payload = f.unpad(payload)
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id == 0 or stream_id > self._highest_stream:
                raise H2Error(f.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream we ended or reset: its late data is dropped
        end = flags & f.END_STREAM != 0
        stream.recv_window -= length
        if stream.recv_window < 0:
            self.reset(stream, f.FLOW_CONTROL_ERROR)
            return
        if not end:
            stream.unacked += length
            if stream.unacked >= self._stream_credit_at and not stream.hold:
                self.credit(stream)
        self._stream_data(stream, payload, end)

    def _headers(self, flags: int, stream_id: int, payload: bytes | bytearray) -> None:
        if stream_id == 0:
            raise H2Error(f.PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & f.PADDED:
            payload = f.unpad(payload)
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
        for key, value in f.parse_settings(payload):
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
        self._write(f.frame(f.SETTINGS, f.ACK, 0))
        if self._blocked:
            self._flush()

    def _rst_stream(self, stream_id: int, payload: bytes | bytearray) -> None:
        if len(payload) != 4:
            raise H2Error(f.FRAME_SIZE_ERROR, "RST_STREAM must carry 4 bytes")
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            if stream_id == 0 or stream_id > self._highest_stream:
                raise H2Error(f.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
            return
        self._drop(stream, int.from_bytes(payload, "big"))

    # streams ----------------------------------------------------------------------------------------
    def _opened(self, stream: S) -> None:
        """Count a new stream (ours, or the peer's once its HEADERS were checked)."""
        self._highest_stream = stream.id
        self.streams[stream.id] = stream

    def _remote_end(self, stream: S) -> None:
        """The peer sent END_STREAM: a stream closed both ways is forgotten."""
        stream.remote_closed = True
        if stream.local_closed:
            self.streams.pop(stream.id, None)
            self._closed_stream()

    def forget(self, stream: S) -> None:
        """Stop sending on a stream the peer has ended, without a frame (its queue is dropped)."""
        stream.closed = True
        self.streams.pop(stream.id, None)
        if stream.blocked is not None:
            stream.blocked = None
            self._blocked.pop(stream.id, None)

    # frames out -------------------------------------------------------------------------------------
    def send_headers(self, stream: S, block: bytes, end: bool = False) -> None:
        if stream.finished:
            return
        if stream.blocked is not None:
            self._enqueue(stream, f.HEADERS, block, end)
            return
        self._write(f.header_frames(stream.id, block, end, self._max_frame_out))
        if end:
            self._ended(stream)

    def send_data(self, stream: S, data: bytes, end: bool = False) -> None:
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

    def send(
        self, stream: S, head: bytes, prefix: bytes, body: bytes, trailers: bytes, end: bool = True
    ) -> None:
        """HEADERS `head` (none when empty), one DATA frame of `prefix` + `body`, then HEADERS
        `trailers` (none when empty); `end` ends the stream with the last of them. One write when the
        windows and the frame size allow (every small call); otherwise in order through the queue."""
        if stream.finished:
            return
        size = len(prefix) + len(body)
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
            data_head = HEAD.pack(size << 8 | f.DATA, f.END_STREAM if end and not trailers else 0, sid)
            if trailers:
                tail = HEAD.pack(
                    len(trailers) << 8 | f.HEADERS, f.END_HEADERS | (f.END_STREAM if end else 0), sid
                )
                if head:
                    parts: tuple[bytes, ...] = (
                        HEAD.pack(len(head) << 8 | f.HEADERS, f.END_HEADERS, sid),
                        head,
                        data_head,
                        prefix,
                        body,
                        tail,
                        trailers,
                    )
                else:
                    parts = (data_head, prefix, body, tail, trailers)
            elif head:
                parts = (
                    HEAD.pack(len(head) << 8 | f.HEADERS, f.END_HEADERS, sid),
                    head,
                    data_head,
                    prefix,
                    body,
                )
            else:
                parts = (data_head, prefix, body)
            self._write(b"".join(parts))
            if end:
                self._ended(stream)
            return
        if head:
            self.send_headers(stream, head)
        self.send_data(stream, prefix + body, end and not trailers)
        if trailers:
            self.send_headers(stream, trailers, end=end)

    def reset(self, stream: S, code: int) -> None:
        """End a stream with RST_STREAM (its `_stream_reset` hook is told)."""
        if stream.closed:
            return
        if not stream.local_closed or not stream.remote_closed:
            self._write(f.rst_stream(stream.id, code))
        self.streams.pop(stream.id, None)
        self._drop(stream, None)

    def credit(self, stream: S) -> None:
        """Give the peer back the stream window it used (WINDOW_UPDATE), unless it is done sending."""
        if stream.unacked and not stream.remote_closed and not stream.finished:
            self._write(f.window_update(stream.id, stream.unacked))
            stream.recv_window += stream.unacked
        stream.unacked = 0

    def _enqueue(self, stream: S, kind: int, data: memoryview | bytes, end: bool) -> None:
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
                self._unblocked()

    def _ended(self, stream: S) -> None:
        """We sent END_STREAM."""
        stream.local_closed = True
        if self.reset_after_end and not stream.remote_closed:
            self._write(f.rst_stream(stream.id, f.NO_ERROR))  # a client still sending is asked to stop
            stream.closed = True
        if stream.blocked is not None:
            stream.blocked = None
            self._blocked.pop(stream.id, None)
        if stream.closed or stream.remote_closed:
            self.streams.pop(stream.id, None)
            if self._draining and not self.streams:
                self.close()

    def _drop(self, stream: S, code: int | None) -> None:
        stream.closed = True
        if stream.blocked is not None:
            stream.blocked = None
            self._blocked.pop(stream.id, None)
        self._stream_reset(stream, code)
        self._unblocked()
        self._closed_stream()

    def _closed_stream(self) -> None:
        if self._draining and not self.streams:
            self.close()

    def _lost(self) -> None:
        """The connection is gone: every open stream is reset."""
        self.closed = True
        streams, self.streams = self.streams, {}
        self._blocked.clear()
        for stream in streams.values():
            stream.closed = True
            self._stream_reset(stream, None)
        self._unblocked()

    def _fail(self, code: int, message: str) -> None:
        """A connection error: GOAWAY with `code`, then close."""
        if not self.closed:
            last = 0 if self.client_side else self._highest_stream  # the peer's streams we processed
            self._write(f.goaway(last, code, message.encode()[:256]))
            self.close()
