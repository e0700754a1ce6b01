"""Shared-memory segments of python instances when /dev/shm runs out of room (shm.py): a segment's
pages are reserved when it is made, a ring that cannot have the size it wants takes the room it
needs, and one that cannot have even that is refused in Triton's words, keeping the one it had.
/dev/shm filling up is simulated by a posix_fallocate that finds no room above a size (the
integration test test_python_values.py fills a real, small /dev/shm where it can mount one)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from server.backends.python import shm

MIB = 1 << 20
ROOM = 3 * MIB  # what /dev/shm has left, here


@pytest.fixture
def little_room(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """posix_fallocate refuses more than ROOM bytes; the sizes asked for are recorded."""
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate on this platform: segments are not reserved")
    real = os.posix_fallocate
    asked: list[int] = []

    def fallocate(fd: int, offset: int, size: int) -> None:
        asked.append(size)
        if size > ROOM:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, size)

    monkeypatch.setattr(shm.os, "posix_fallocate", fallocate)
    yield asked


def _ours() -> set[str]:
    folder = Path("/dev/shm")
    return {p.name for p in folder.glob(f"{shm.segment_prefix()}*")} if folder.is_dir() else set()


def test_a_ring_takes_the_room_it_needs_when_twice_that_does_not_fit(little_room: list[int]) -> None:
    before = _ours()
    ring = shm.RingReader()
    try:
        ring.grow(2 * MIB)  # wants twice that, which does not fit
        assert ring.segment is not None and ring.segment.size >= 2 * MIB
        assert little_room[-2] > ROOM >= little_room[-1]
    finally:
        ring.close()
    assert _ours() == before  # the refused segment went too


def test_a_ring_that_cannot_grow_is_refused_in_tritons_words_and_keeps_the_old_one(
    little_room: list[int],
) -> None:
    before = _ours()
    ring = shm.RingReader()
    try:
        old = ring.segment_name
        with pytest.raises(shm.NoRoom) as refused:
            ring.grow(4 * MIB)
        assert refused.value.message.startswith("Failed to increase the shared memory pool size for key '")
        assert refused.value.message.endswith(f"Error: {os.strerror(errno.ENOSPC)}")
        assert ring.segment_name == old and ring.view() is not None
    finally:
        ring.close()
    assert _ours() == before


def test_an_input_arena_that_cannot_grow_fails_the_batch_and_keeps_serving_small_ones(
    little_room: list[int],
) -> None:
    arena = shm.InputArena()
    try:
        small = [np.ones(MIB, np.uint8)]
        assert arena.place(small)[1] is not None
        with pytest.raises(shm.NoRoom):
            arena.place([np.ones(4 * MIB, np.uint8)])
        offsets, name, _ = arena.place(small)
        assert offsets == [0] and name == arena.segment.name  # type: ignore[union-attr]
    finally:
        arena.close()
