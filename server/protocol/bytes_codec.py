"""The BYTES wire format, in one place: a tensor's elements in row-major order, each a 4-byte
little-endian length followed by that many bytes. HTTP binary data, gRPC raw contents, shared memory,
the python backend's process hop, warmup and initial-state files, pb_utils and tcli's clients all
read and write it through `serialize` and `deserialize`.

A malformed buffer raises `BytesFormatError` naming the tensor and what is wrong, in Triton's words
(its HTTP front end's: 'incomplete string length for inference input 'S', expecting 4 bytes but
only 2 bytes available'). The gRPC front end words a cut-short length differently; its caller
passes that wording as `short_length`.

Both directions avoid per-element Python work where they can: lengths are packed and unpacked by
numpy, and a buffer whose elements are all one length is split without a loop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from server.protocol.errors import ErrorCode, TritonError

LENGTH_SIZE = 4
_LENGTH = struct.Struct("<I")
_MAX_LENGTH = (1 << 32) - 1
_LENGTHS = np.dtype("<u4")
# below this many elements a plain loop beats numpy's fixed costs (measured: about 64 short strings)
_FEW = 64
_FEW_BYTES = _FEW * LENGTH_SIZE  # a buffer shorter than this cannot hold _FEW elements


class BytesFormatError(TritonError, ValueError):
    """A BYTES buffer that does not parse. A TritonError (INVALID_ARG) for the server, and a
    ValueError for models, where pb_utils' deserialize_bytes_tensor raises it."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_ARG, message)


def as_bytes(item: Any) -> bytes:
    """One element's bytes: bytes as they are, str as UTF-8, anything else as its str() in UTF-8."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    return str(item).encode()


def serialize(elements: Any) -> bytes:
    """Elements (an array of any shape, flattened in C order, or a sequence) as the wire format."""
    items: list[Any] = np.asarray(elements, dtype=object).reshape(-1).tolist()
    if len(items) < _FEW:
        parts: list[bytes] = []
        append = parts.append
        for item in items:
            raw = item if type(item) is bytes else as_bytes(item)
            if len(raw) > _MAX_LENGTH:
                raise _too_long(len(raw))
            append(_LENGTH.pack(len(raw)))
            append(raw)
        return b"".join(parts)
    kinds = set(map(type, items))  # one pass in C; most tensors hold only bytes, or only str
    if kinds == {str}:
        items = [item.encode() for item in items]
    elif kinds != {bytes}:
        items = [as_bytes(item) for item in items]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    longest = int(lengths.max())
    if longest > _MAX_LENGTH:
        raise _too_long(longest)
    parts = [b""] * (2 * len(items))
    parts[0::2] = lengths.astype(_LENGTHS).view("V4").tolist()  # each length as its own 4 bytes
    parts[1::2] = items
    return b"".join(parts)


def _too_long(size: int) -> BytesFormatError:
    return BytesFormatError(
        f"a BYTES element of {size} bytes is longer than a 4-byte length can say ({_MAX_LENGTH} bytes); "
        "split it"
    )


def deserialize(
    data: bytes | bytearray | memoryview,
    tensor: str = "BYTES tensor",
    short_length: Callable[[int], str] | None = None,
) -> list[bytes]:
    """The elements of a serialized BYTES tensor (the inverse of `serialize`). `tensor` says which
    tensor the error names ("inference input 'S'"); a length cut short is worded `short_length(bytes
    available)` when given."""
    raw = data if type(data) is bytes else bytes(data)  # slicing bytes makes each element in one step
    end = len(raw)
    if end == 0:
        return []
    if end >= _FEW_BYTES:  # room for enough elements to be worth numpy's fixed costs
        uniform = _uniform(raw)
        if uniform is not None:
            return uniform
    elements: list[bytes] = []
    append = elements.append
    unpack = _LENGTH.unpack_from
    cursor = 0
    while cursor < end:
        start = cursor + LENGTH_SIZE
        if start > end:
            available = end - cursor
            raise BytesFormatError(
                short_length(available)
                if short_length is not None
                else f"incomplete string length for {tensor}, expecting {LENGTH_SIZE} bytes but only "
                f"{available} bytes available"
            )
        (length,) = unpack(raw, cursor)
        cursor = start + length
        if cursor > end:
            raise BytesFormatError(
                f"incomplete string data for {tensor}, expecting string of length {length} but only "
                f"{end - start} bytes available"
            )
        append(raw[start:cursor])
    return elements


def _uniform(raw: bytes) -> list[bytes] | None:
    """The elements when every one has the first one's length (fixed-width ids, perf_analyzer's
    strings): numpy checks the lengths and cuts the elements in C. None when they differ."""
    (first,) = _LENGTH.unpack_from(raw)
    stride = LENGTH_SIZE + first
    if first == 0 or len(raw) % stride or len(raw) // stride < _FEW:
        return None
    records = np.frombuffer(raw, dtype=np.dtype([("length", _LENGTHS), ("data", f"V{first}")]))
    if not (records["length"] == first).all():
        return None
    elements: list[bytes] = records["data"].tolist()
    return elements


def object_array(elements: list[bytes], shape: tuple[int, ...] | None = None) -> np.ndarray[Any, Any]:
    """Elements as an object array (of `shape` when given). np.array(elements) would not do: it
    makes a fixed-width 'S' array, or a 2-D one when the elements are sequences."""
    array = np.empty(len(elements), dtype=object)
    array[:] = elements
    return array if shape is None else array.reshape(shape)
