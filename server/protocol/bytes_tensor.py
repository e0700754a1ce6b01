"""Triton's BYTES tensor layout on the wire: per element a 4-byte little-endian length, then the bytes.
Shared by the HTTP and gRPC codecs and tcli's clients."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from server.protocol.errors import invalid_arg

LENGTH = struct.Struct("<I")


def serialize_bytes(data: Any) -> bytes:
    """BYTES elements as 4-byte little-endian lengths, each followed by its bytes."""
    pack = LENGTH.pack
    parts: list[bytes] = []
    append = parts.append
    for item in np.asarray(data, dtype=object).reshape(-1):
        raw = as_bytes(item)
        append(pack(len(raw)))
        append(raw)
    return b"".join(parts)


def deserialize_bytes(data: bytes | bytearray | memoryview) -> list[bytes]:
    """The elements of a serialized BYTES tensor (the inverse of `serialize_bytes`)."""
    return split_bytes(memoryview(data), "")


def split_bytes(view: memoryview, name: str, short_length: Callable[[int], str] | None = None) -> list[bytes]:
    """The elements of input `name`. A length indicator cut short is reported with `short_length(available)`
    when given (the gRPC front end words it as Triton's does), otherwise with the HTTP wording."""
    end = len(view)
    elements: list[bytes] = []
    append = elements.append
    unpack = LENGTH.unpack_from
    cursor = 0
    while cursor < end:
        if end - cursor < 4:
            if short_length is not None:
                raise invalid_arg(short_length(end - cursor))
            raise invalid_arg(
                f"incomplete string length for inference input '{name}', expecting 4 bytes but only "
                f"{end - cursor} bytes available"
            )
        (length,) = unpack(view, cursor)
        cursor += 4
        if length > end - cursor:
            raise invalid_arg(
                f"incomplete string data for inference input '{name}', expecting string of length "
                f"{length} but only {end - cursor} bytes available"
            )
        append(bytes(view[cursor : cursor + length]))
        cursor += length
    return elements


def as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    return str(item).encode()
