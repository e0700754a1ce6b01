"""Header blocks in: `hpack`'s public Decoder behind a cache of decoded blocks.

Clients index their request headers, so after the first call a block is a few bytes of table
references, repeated call after call; decoding one costs ~15-25 µs of Python, a lookup well under
one. A cached block is only valid while the dynamic table is unchanged, so a block whose
representations change the table (RFC 7541 section 6: a literal with incremental indexing, a table
size update) is never cached and empties the cache; we read that from the block's bytes ourselves.
"""

from __future__ import annotations

import logging

import hpack

# hpack logs every header it codes at DEBUG: with `tcli serve --log-verbose 1` that is several lines
# per call, and the formatting alone costs more than the transport
logging.getLogger("hpack").setLevel(logging.WARNING)

HeaderList = list[tuple[bytes, bytes]]


class HeaderDecoder:
    """One connection's HPACK decoding state, as (name, value) byte pairs."""

    _LIMIT = 256  # distinct blocks kept (varying metadata, e.g. grpc-timeout, would grow it forever)

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._cache: dict[bytes, HeaderList] = {}

    def decode(self, block: bytes) -> HeaderList:
        """The (name, value) pairs of a complete header block; raises hpack.HPACKError (its
        OversizedHeaderListError when the list is over the limit). A repeated block gives the same
        list object."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        headers: HeaderList = self._decoder.decode(block, raw=True)  # type: ignore[assignment]
        if changes_table(block):
            self._cache.clear()
        else:
            if len(self._cache) >= self._LIMIT:
                self._cache.clear()
            self._cache[block] = headers
        return headers


def changes_table(block: bytes) -> bool:
    """Whether decoding `block` changes the HPACK dynamic table (a block hpack decoded without error;
    anything unreadable counts as a change, so it is never cached)."""
    at, size = 0, len(block)
    try:
        while at < size:
            first = block[at]
            if first & 0x80:  # indexed header field
                at = _skip_integer(block, at, 0x7F)
            elif first & 0x60:  # literal with incremental indexing (01), table size update (001)
                return True
            else:  # literal without indexing (0000) or never indexed (0001): index, [name], value
                new_name = not first & 0x0F
                at = _skip_integer(block, at, 0x0F)
                if new_name:
                    at = _skip_string(block, at)
                at = _skip_string(block, at)
    except IndexError:
        return True
    return at != size


def _integer(block: bytes, at: int, mask: int) -> tuple[int, int]:
    """(value, offset after it) of the HPACK integer at `at` with a prefix of `mask`'s bits."""
    value = block[at] & mask
    at += 1
    if value < mask:
        return value, at
    shift = 0
    while True:
        byte = block[at]
        at += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _skip_integer(block: bytes, at: int, mask: int) -> int:
    return _integer(block, at, mask)[1]


def _skip_string(block: bytes, at: int) -> int:
    length, at = _integer(block, at, 0x7F)
    return at + length
