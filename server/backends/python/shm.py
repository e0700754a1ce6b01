"""Tensors between the server and a python instance's own process, through shared memory: the pipe
carries small tuples that say where each tensor is (BYTES tensors, numpy object arrays, ride in the
tuples themselves and are pickled).

Two regions per instance, both created and unlinked by the server process, so nothing outlives an
instance even when its process dies:
- the input arena (`InputArena`): the server writes one batch's input tensors; the instance process
  copies them out before execute() runs (a model may keep its inputs past execute()), so the arena is
  free again by the next batch, as an instance runs one batch at a time;
- the output ring (`RingWriter` in the instance process, `RingReader` in the server): every response
  the instance sends (returned by execute() or through a response sender, from any thread) appends
  its tensors; the server copies them out in the order they were sent and moves the ring's tail,
  which the writer reads to know which space is free again.
Both grow, to a new segment twice as large, when something does not fit.

A message whose tensors are small (INLINE_LIMIT) carries their bytes itself instead: copying a few
bytes through the pickle costs less than placing them in a segment and reading them back.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Callable, Sequence
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from server.backends.python.backend_settings import DEFAULT_SETTINGS, PythonSettings, next_size
from server.protocol.types import Tensor

ALIGN = 64  # every tensor starts on a cache line
_HEADER = 64  # the ring's first cache line holds its tail (int64), written by the reader only
INLINE_LIMIT = 16 << 10  # bytes: up to this, a message's tensors ride in the message

# (name, wire datatype, shape, numpy dtype str, offset) for a tensor in shared memory;
# (name, wire datatype, shape, numpy dtype str, bytes) for a small tensor carried in the message;
# (name, wire datatype, shape, None, object array) for a BYTES tensor carried in the message
TensorMeta = tuple[str, str, tuple[int, ...], str | None, Any]

_serial = itertools.count(1)


def segment_prefix() -> str:
    """Names of this process's segments start with this (short: macOS allows 31 characters)."""
    return f"tcli{os.getpid()}_"


def _new_segment(size: int) -> shared_memory.SharedMemory:
    return shared_memory.SharedMemory(name=f"{segment_prefix()}{next(_serial)}", create=True, size=size)


def _drop(segment: shared_memory.SharedMemory | None, unlink: bool) -> None:
    """Close our mapping; with `unlink`, first remove the name (the owner's job), so that it goes even
    if a view still pins the mapping."""
    if segment is None:
        return
    if unlink:
        with contextlib.suppress(FileNotFoundError):  # already gone
            segment.unlink()
    segment.close()


def _buf(segment: shared_memory.SharedMemory) -> memoryview:
    buf = segment.buf
    assert buf is not None  # None only once closed
    return buf


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def _raw(tensors: Sequence[Tensor]) -> list[np.ndarray[Any, Any] | None]:
    """Each tensor's array as it will be copied (contiguous), None for BYTES (object) tensors."""
    return [None if t.data.dtype == object else np.ascontiguousarray(t.data) for t in tensors]


def space(arrays: Sequence[np.ndarray[Any, Any] | None]) -> int:
    return sum(_aligned(a.nbytes) for a in arrays if a is not None)


def fits_inline(tensors: Sequence[Tensor]) -> bool:
    """Whether `tensors` ride in the message rather than through a segment (InputArena.write)."""
    return sum(_aligned(t.data.nbytes) for t in tensors if t.data.dtype != object) <= INLINE_LIMIT


def write(
    buf: memoryview, offset: int, tensors: Sequence[Tensor], arrays: Sequence[np.ndarray[Any, Any] | None]
) -> list[TensorMeta]:
    """Copy `tensors` (with their `_raw` arrays) into `buf` from `offset` on; their metadata."""
    metas: list[TensorMeta] = []
    for tensor, array in zip(tensors, arrays, strict=True):
        if array is None:
            metas.append((tensor.name, tensor.datatype, tensor.data.shape, None, tensor.data))
            continue
        size = array.nbytes
        if size:
            buf[offset : offset + size] = array.reshape(-1).view(np.uint8).data
        metas.append((tensor.name, tensor.datatype, array.shape, array.dtype.str, offset))
        offset += _aligned(size)
    return metas


def inline(tensors: Sequence[Tensor], arrays: Sequence[np.ndarray[Any, Any] | None]) -> list[TensorMeta]:
    """The metadata of `tensors` carrying their bytes (small tensors: no shared memory)."""
    return [
        (t.name, t.datatype, t.data.shape, None, t.data)
        if a is None
        else (t.name, t.datatype, a.shape, a.dtype.str, a.tobytes())
        for t, a in zip(tensors, arrays, strict=True)
    ]


def read(buf: memoryview | None, metas: Sequence[TensorMeta]) -> list[Tensor]:
    """Tensors from their metadata, copied out of `buf` (which is reused once they are read)."""
    tensors = []
    for name, datatype, shape, dtype, where in metas:
        count = math.prod(shape)
        if dtype is None:
            data = where
        elif count == 0:  # took no space (and may come without any segment)
            data = np.empty(shape, np.dtype(dtype))
        elif type(where) is bytes:
            data = np.frombuffer(where, np.dtype(dtype), count).reshape(shape).copy()  # writable
        else:
            assert buf is not None
            data = np.frombuffer(buf, np.dtype(dtype), count, where).reshape(shape).copy()
        tensors.append(Tensor(name, datatype, shape, data))
    return tensors


class InputArena:
    """The server's side of the input arena: a segment it rewrites for every batch."""

    def __init__(self, settings: PythonSettings = DEFAULT_SETTINGS) -> None:
        self.segment: shared_memory.SharedMemory | None = None
        self._settings = settings  # its sizes: --backend-config=python,shm-*-byte-size

    def write(self, tensors: Sequence[Tensor]) -> tuple[str | None, list[TensorMeta]]:
        arrays = _raw(tensors)
        needed = space(arrays)
        if needed <= INLINE_LIMIT:
            return None, inline(tensors, arrays)
        if self.segment is None or self.segment.size < needed:
            old_size = self.segment.size if self.segment is not None else 0
            # the instance process still maps the old one until it reads the new name: unlinking only
            # removes the name
            _drop(self.segment, unlink=True)
            self.segment = _new_segment(
                next_size(self._settings, old_size, needed, max(needed, 2 * old_size))
            )
        return self.segment.name, write(_buf(self.segment), 0, tensors, arrays)

    def close(self) -> None:
        _drop(self.segment, unlink=True)
        self.segment = None


class ArenaView:
    """The instance process's view of the input arena: attached again when its name changes."""

    def __init__(self) -> None:
        self._segment: shared_memory.SharedMemory | None = None

    def read(self, name: str | None, metas: Sequence[TensorMeta]) -> list[Tensor]:
        if name is not None and (self._segment is None or self._segment.name != name.lstrip("/")):
            _drop(self._segment, unlink=False)
            self._segment = shared_memory.SharedMemory(name=name)
        return read(_buf(self._segment) if self._segment is not None else None, metas)

    def close(self) -> None:
        _drop(self._segment, unlink=False)
        self._segment = None


class RingReader:
    """The server's side of the output ring: creates it (and its larger successors) and reads it."""

    def __init__(self, settings: PythonSettings = DEFAULT_SETTINGS) -> None:
        self.segment: shared_memory.SharedMemory | None = None
        self._tail: np.ndarray[Any, Any] | None = None
        self._settings = settings  # its sizes: --backend-config=python,shm-*-byte-size
        self.grow(0)

    @property
    def segment_name(self) -> str:
        assert self.segment is not None
        return self.segment.name

    def grow(self, needed: int) -> str:
        """A new ring with room for `needed` bytes; every message written in the old one has been
        read (messages are read in order, and the writer waits for this answer), so it goes."""
        old_size = self.segment.size - _HEADER if self.segment is not None else 0
        self.close()
        size = next_size(self._settings, old_size, needed, max(2 * needed, 2 * old_size))
        self.segment = _new_segment(_HEADER + size)
        self._tail = np.frombuffer(_buf(self.segment), np.int64, 1, 0)
        return self.segment.name

    def read(self, metas: Sequence[TensorMeta], end: int | None) -> list[Tensor]:
        """The tensors of one message, copied out; then their space is free again."""
        tensors = read(_buf(self.segment) if self.segment is not None else None, metas)
        if end is not None and self._tail is not None:
            self._tail[0] = end  # one aligned 8-byte store, which the writer reads whole
        return tensors

    def close(self) -> None:
        self._tail = None
        _drop(self.segment, unlink=True)
        self.segment = None


class RingWriter:
    """The instance process's side of the output ring. Not thread-safe: the caller holds the lock
    that also orders the messages, so that space is freed in the order it was taken."""

    def __init__(self, name: str, grow: Callable[[int], str]) -> None:
        self._grow = grow  # asks the server for a new ring with room for n bytes; returns its name
        self._segment: shared_memory.SharedMemory | None = None
        self._tail: np.ndarray[Any, Any] | None = None
        self._head = 0
        self._attach(name)

    def put(self, tensors: Sequence[Tensor]) -> tuple[list[TensorMeta], int | None]:
        """Write `tensors`: their metadata and the ring position the reader frees when done."""
        arrays = _raw(tensors)
        needed = space(arrays)
        if needed <= INLINE_LIMIT:
            return inline(tensors, arrays), None
        offset = self._reserve(needed)
        assert self._segment is not None
        metas = write(_buf(self._segment), _HEADER + offset, tensors, arrays)
        return metas, self._head

    def _reserve(self, needed: int) -> int:
        if self._segment is not None:
            assert self._tail is not None
            capacity = self._segment.size - _HEADER
            position = self._head
            offset = position % capacity
            if offset + needed > capacity:  # a message is contiguous: skip the end of the ring
                position += capacity - offset
                offset = 0
            if position + needed - int(self._tail[0]) <= capacity:
                self._head = position + needed
                return offset
        self._attach(self._grow(needed))
        self._head = needed
        return 0

    def _attach(self, name: str) -> None:
        self.close()
        self._segment = shared_memory.SharedMemory(name=name)
        self._tail = np.frombuffer(_buf(self._segment), np.int64, 1, 0)
        self._head = 0

    def close(self) -> None:
        self._tail = None
        _drop(self._segment, unlink=False)
        self._segment = None
