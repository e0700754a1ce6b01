"""HTTP/2 framing (RFC 9113) as the native gRPC server needs it: frame headers, the frames a server
writes, SETTINGS parsing, and request header blocks decoded with `hpack`.

Header blocks the server writes never use the HPACK dynamic table (static-table names or literals
"without indexing"): they are a handful of fixed bytes, cost nothing to build, and stay valid
whatever header table size the client announces.
"""

from __future__ import annotations

import logging
import struct
from collections import deque

import hpack
from hpack.hpack import encode_integer

# hpack logs every header it codes at DEBUG: with `tcli serve --log-verbose 1` that is several lines
# per call, and the formatting alone costs more than the transport
logging.getLogger("hpack").setLevel(logging.WARNING)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

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
    """A connection error: the server answers GOAWAY with `code` and closes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return HEAD.pack(len(payload) << 8 | kind, flags, stream_id) + payload


def settings(pairs: list[tuple[int, int]]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value) for key, value in pairs))


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    if len(payload) % 6:
        raise H2Error(FRAME_SIZE_ERROR, "SETTINGS payload is not a multiple of 6 bytes")
    return [_SETTING.unpack_from(payload, at) for at in range(0, len(payload), 6)]


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, last_stream_id.to_bytes(4, "big") + code.to_bytes(4, "big") + debug)


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


def literal(name: bytes, value: bytes) -> bytes:
    """One header as an HPACK literal without indexing, new name, no Huffman coding."""
    return b"\x00" + encode_integer(len(name), 7) + name + encode_integer(len(value), 7) + value


class HeaderDecoder:
    """`hpack.Decoder` with a cache of decoded blocks.

    Clients index their request headers, so after the first call a block is a few bytes of table
    references, repeated call after call; decoding one costs ~15-25 µs of Python, a lookup well under
    one. A cached block is only valid while the dynamic table is unchanged: any block that changes the
    table is never cached and empties the cache."""

    _LIMIT = 256  # distinct blocks kept (varying metadata, e.g. grpc-timeout, would grow it forever)

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._cache: dict[bytes, list[tuple[bytes, bytes]]] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The (name, value) pairs of a complete header block; raises hpack.HPACKError."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        table = self._decoder.header_table
        entries: deque[tuple[bytes, bytes]] = table.dynamic_entries
        first, count, size = (entries[0] if entries else None), len(entries), table.maxsize
        headers: list[tuple[bytes, bytes]] = self._decoder.decode(block, raw=True)  # type: ignore[assignment]
        if (entries[0] if entries else None) is not first or len(entries) != count or table.maxsize != size:
            self._cache.clear()
        else:
            if len(self._cache) >= self._LIMIT:
                self._cache.clear()
            self._cache[block] = headers
        return headers
