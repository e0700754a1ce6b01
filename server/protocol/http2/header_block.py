"""Our HPACK encoder (RFC 7541), for header blocks that never use the dynamic table: entries of the
static table by index, and literals "without indexing" with a static-table name or a new one, no
Huffman coding. Such a block costs nothing to build, can be built once and sent on every call, and
stays valid whatever header table size the peer announces. Standard library only."""

from __future__ import annotations


def integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with an N-bit prefix, `first` holding the bits above the prefix."""
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


def string(raw: bytes) -> bytes:
    """A string literal, not Huffman-coded."""
    return integer(len(raw), 7) + raw


def indexed(index: int) -> bytes:
    """A whole header field of the static table (e.g. 2 is `:method: GET`, 8 `:status: 200`)."""
    return integer(index, 7, 0x80)


def literal(name: bytes, value: bytes) -> bytes:
    """One header as a literal without indexing, with a new name."""
    return b"\x00" + string(name) + string(value)


def literal_named(index: int, value: bytes) -> bytes:
    """One header as a literal without indexing, its name from the static table (e.g. 4 `:path`)."""
    return integer(index, 4) + string(value)
