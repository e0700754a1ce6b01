"""Tensors between the server and a python instance's own process, through shared memory: the pipe
carries the frames of `hop_frames`, whose tensor descriptors say where each tensor is.

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
bytes into the frame costs less than placing them in a segment and reading them back.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from server.backends.python.backend_settings import DEFAULT_SETTINGS, PythonSettings, next_size
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import Tensor

ALIGN = 64  # every tensor starts on a cache line
_HEADER = 64  # the ring's first cache line holds its tail (int64), written by the reader only
INLINE_LIMIT = 16 << 10  # bytes: up to this, a message's tensors ride in the message


_serial = itertools.count(1)
# the names of the segments this process made and has not unlinked yet: what unlink_all() removes when
# the server ends before its instances were unloaded (a signal during start-up, a second Ctrl-C)
_created: set[str] = set()
_created_lock = threading.RLock()  # RLock: unlink_all() may run in a signal handler on any thread's turn
_closed = False  # once unlink_all() ran, no segment is made any more
# the server's arenas and rings not closed yet, held here until they are: one its owner dropped without
# closing (a stop that Ctrl-C interrupted) would be collected with its segment under the tail's numpy
# view, which prints "BufferError: cannot close exported pointers exist"; unlink_all() closes them
_owners: set[InputArena | RingReader] = set()


class SegmentsClosed(RuntimeError):
    """The server is ending: no new shared memory (what a load still running gets)."""


def segment_prefix() -> str:
    """Names of this process's segments start with this (short: macOS allows 31 characters)."""
    return f"tcli{os.getpid()}_"


class NoRoom(TritonError):
    """/dev/shm cannot hold a segment that must grow: the message that needed it fails, in Triton's
    words, and the instance goes on with the segment it had."""

    def __init__(self, name: str, size: int, cause: OSError) -> None:
        super().__init__(
            ErrorCode.INTERNAL,
            f"Failed to increase the shared memory pool size for key '{name}' to {size} bytes. If you "
            f"are running inside docker, use '--shm-size' flag to control the shared memory region "
            f"size. Error: {cause.strerror or cause}",
        )


def _new_segment(size: int, least: int | None = None) -> shared_memory.SharedMemory:
    """A new segment of `size` bytes, else of `least` (the room the caller cannot do without) when
    /dev/shm has no room for `size`; NoRoom when it has none for either. The pages are reserved now:
    tmpfs grants a segment of any size, and the first write to a page it cannot back then kills the
    writer (SIGBUS), the server itself for the input arena. Each is made and recorded as one step,
    so that unlink_all() misses none."""
    error: OSError | None = None
    name = ""
    for attempt in dict.fromkeys((size, size if least is None else least)):
        with _created_lock:
            if _closed:
                raise SegmentsClosed("the server is stopping")
            name = f"{segment_prefix()}{next(_serial)}"
            try:
                segment = shared_memory.SharedMemory(name=name, create=True, size=attempt)
            except OSError as exc:
                error = exc
                continue
            _created.add(segment.name)
        try:
            _reserve(segment, attempt)
        except OSError as exc:
            _drop(segment, unlink=True)
            error = exc
            continue
        return segment
    assert error is not None
    raise NoRoom(name, size, error)


def _reserve(segment: shared_memory.SharedMemory, size: int) -> None:
    fd = getattr(segment, "_fd", -1)  # POSIX only; macOS has no posix_fallocate, nor tmpfs to fill
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)


def _drop(segment: shared_memory.SharedMemory | None, unlink: bool) -> None:
    """Close our mapping; with `unlink`, first remove the name (the owner's job), so that it goes even
    if a view still pins the mapping."""
    if segment is None:
        return
    # one close at a time: a signal's unlink_all() and a load giving up may drop the same segment at
    # once, and SharedMemory.close() run twice together closes its descriptor number twice, the
    # second time someone else's by then (gRPC's epoll descriptor once: the server aborted)
    with _created_lock:
        if unlink:
            _created.discard(segment.name)
            with contextlib.suppress(FileNotFoundError):  # already gone
                segment.unlink()
        segment.close()


def unlink_all() -> None:
    """Remove every segment this process made and still names, and make no more: the process ends
    (mappings still held stay valid until they are closed, as for any unlinked file)."""
    global _closed
    with _created_lock:
        _closed = True
        owners = list(_owners)
    for owner in owners:
        with contextlib.suppress(Exception):  # a view still held: its name goes below all the same
            owner.close()
    with _created_lock:
        names = list(_created)
        _created.clear()
    for name in names:
        with contextlib.suppress(OSError):
            segment = shared_memory.SharedMemory(name=name)
            segment.unlink()  # also tells the resource tracker, which then has nothing to warn about
            segment.close()
    # and any other segment named as this process names its own (one made while a signal handler ran
    # on the very thread that was making it, say): the name says whose it is
    shm_folder = Path("/dev/shm")
    if shm_folder.is_dir():
        for path in shm_folder.glob(f"{segment_prefix()}*"):
            with contextlib.suppress(OSError):  # as above: the resource tracker is told too
                segment = shared_memory.SharedMemory(name=path.name)
                segment.unlink()
                segment.close()


def _buf(segment: shared_memory.SharedMemory) -> memoryview:
    buf = segment.buf
    assert buf is not None  # None only once closed
    return buf


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def space(arrays: Sequence[np.ndarray[Any, Any] | None]) -> int:
    return sum(_aligned(a.nbytes) for a in arrays if a is not None)


def fits_inline(tensors: Sequence[Tensor]) -> bool:
    """Whether `tensors` surely ride in the frame rather than through a segment (InputArena.place).
    BYTES tensors are counted out: their size is known only once serialized."""
    if any(t.datatype == "BYTES" for t in tensors):
        return False
    return sum(_aligned(t.data.nbytes) for t in tensors) <= INLINE_LIMIT


class InputArena:
    """The server's side of the input arena: a segment it rewrites for every batch."""

    def __init__(self, settings: PythonSettings = DEFAULT_SETTINGS) -> None:
        self.segment: shared_memory.SharedMemory | None = None
        self._settings = settings  # its sizes: --backend-config=python,shm-*-byte-size
        with _created_lock:
            _owners.add(self)

    def place(
        self, arrays: Sequence[np.ndarray[Any, Any]]
    ) -> tuple[list[int] | None, str | None, int | None]:
        """hop_frames.Placement: a batch's input arrays copied into the arena, unless they are small."""
        needed = space(arrays)
        if needed <= INLINE_LIMIT:
            return None, None, None
        self._ensure(needed)
        assert self.segment is not None
        return _copy_in(_buf(self.segment), 0, arrays), self.segment.name, None

    def _ensure(self, needed: int) -> None:
        if self.segment is None or self.segment.size < needed:
            old_size = self.segment.size if self.segment is not None else 0
            new = _new_segment(next_size(self._settings, old_size, needed, max(needed, 2 * old_size)), needed)
            # the instance process still maps the old one until it reads the new name: unlinking only
            # removes the name
            _drop(self.segment, unlink=True)
            self.segment = new

    def close(self) -> None:
        _drop(self.segment, unlink=True)
        self.segment = None
        with _created_lock:
            _owners.discard(self)


def _copy_in(buf: memoryview, offset: int, arrays: Sequence[np.ndarray[Any, Any]]) -> list[int]:
    """Copy contiguous `arrays` into `buf` from `offset` on, each aligned; their offsets."""
    offsets = []
    for array in arrays:
        size = array.nbytes
        if size:
            buf[offset : offset + size] = array.reshape(-1).view(np.uint8).data
        offsets.append(offset)
        offset += _aligned(size)
    return offsets


class ArenaView:
    """The instance process's view of the input arena: attached again when its name changes."""

    def __init__(self) -> None:
        self._segment: shared_memory.SharedMemory | None = None

    def view(self, name: str | None) -> memoryview | None:
        """The arena named `name` (attached again when it changed); None for no name."""
        if name is None:
            return None
        if self._segment is None or self._segment.name != name.lstrip("/"):
            _drop(self._segment, unlink=False)
            self._segment = shared_memory.SharedMemory(name=name)
        return _buf(self._segment)

    def close(self) -> None:
        _drop(self._segment, unlink=False)
        self._segment = None


class RingReader:
    """The server's side of the output ring: creates it (and its larger successors) and reads it."""

    def __init__(self, settings: PythonSettings = DEFAULT_SETTINGS) -> None:
        self.segment: shared_memory.SharedMemory | None = None
        self._tail: np.ndarray[Any, Any] | None = None
        self._settings = settings  # its sizes: --backend-config=python,shm-*-byte-size
        with _created_lock:
            _owners.add(self)
        self.grow(0)

    @property
    def segment_name(self) -> str:
        assert self.segment is not None
        return self.segment.name

    def grow(self, needed: int) -> str:
        """A new ring with room for `needed` bytes; every message written in the old one has been
        read (messages are read in order, and the writer waits for this answer), so it goes."""
        old_size = self.segment.size - _HEADER if self.segment is not None else 0
        size = next_size(self._settings, old_size, needed, max(2 * needed, 2 * old_size))
        new = _new_segment(_HEADER + size, _HEADER + needed)  # NoRoom: the writer keeps the old one
        self._release()
        self.segment = new
        self._tail = np.frombuffer(_buf(self.segment), np.int64, 1, 0)
        return self.segment.name

    def view(self) -> memoryview | None:
        return _buf(self.segment) if self.segment is not None else None

    def free(self, end: int | None) -> None:
        """The reader is done with a message's tensors, which ended at `end`."""
        if end is not None and self._tail is not None:
            self._tail[0] = end  # one aligned 8-byte store, which the writer reads whole

    def close(self) -> None:
        self._release()
        with _created_lock:
            _owners.discard(self)

    def _release(self) -> None:
        self._tail = None  # first: the segment closes only once no view of it is left
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

    def place(
        self, arrays: Sequence[np.ndarray[Any, Any]]
    ) -> tuple[list[int] | None, str | None, int | None]:
        """hop_frames.Placement: a message's output arrays appended to the ring, unless they are small."""
        needed = space(arrays)
        if needed <= INLINE_LIMIT:
            return None, None, None
        offset = self._reserve(needed)
        assert self._segment is not None
        return _copy_in(_buf(self._segment), _HEADER + offset, arrays), None, self._head

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
