"""HTTP/2 frames (RFC 9113 section 6): the numbers of the protocol and the frames an endpoint
writes. Reading frames is the connection's frame loop (connection.py), inlined there because it
runs for every frame."""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what a client sends first

# frame types
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# error codes
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB
# settings
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384
MAX_WINDOW = 2**31 - 1
MAX_FRAME_LIMIT = 2**24 - 1

# a frame header: (length << 8 | type) as 4 bytes, flags, stream id
HEAD = struct.Struct(">IBI")
_SETTING = struct.Struct(">HI")


class H2Error(Exception):
    """A connection error: the endpoint answers GOAWAY with `code` and closes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload) << 8 | kind, flags, stream_id) + payload


def settings(pairs: list[tuple[int, int]]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value) for key, value in pairs))


def parse_settings(payload: bytes | bytearray) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise H2Error(FRAME_SIZE_ERROR, "SETTINGS payload is not a multiple of 6 bytes")
    return [_SETTING.unpack_from(payload, at) for at in range(0, len(payload), 6)]


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)


def ping(payload: bytes, ack: bool = False) -> bytes:
    return frame(PING, ACK if ack else 0, 0, payload)


def header_frames(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """HEADERS, then CONTINUATION frames when the block is larger than the peer's frame size."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return HEAD.pack(len(block) << 8 | HEADERS, flags | END_HEADERS, stream_id) + block
    parts = [block[at : at + max_frame] for at in range(0, len(block), max_frame)]
    out = [frame(HEADERS, flags, stream_id, parts[0])]
    out += [frame(CONTINUATION, 0, stream_id, part) for part in parts[1:-1]]
    out.append(frame(CONTINUATION, END_HEADERS, stream_id, parts[-1]))
    return b"".join(out)


def unpad(payload: bytes | bytearray) -> bytes | bytearray:
    """The content of a PADDED frame's payload (its first byte is the pad length)."""
    if not payload or payload[0] >= len(payload):
        raise H2Error(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]
