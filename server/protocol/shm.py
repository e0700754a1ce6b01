"""System (POSIX) shared memory regions registered by clients, Triton's system shared memory extension.

A client creates `/dev/shm/<key>` (tritonclient.utils.shared_memory), registers a named region of it
(key, offset, byte_size), then names that region in inference requests instead of sending tensor
bytes. Each region is mapped once with mmap; requests get memoryviews of it, so inputs are read and
outputs written in place. Messages follow Triton's shared memory manager.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.protocol.errors import ErrorCode, TritonError, invalid_arg, not_found

SHM_ROOT = Path("/dev/shm")


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    view: memoryview = field(repr=False)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def close(self) -> None:
        self.view.release()
        # views handed to in-flight requests keep the mapping alive; it closes when the last one goes
        with contextlib.suppress(BufferError):
            self.mapping.close()


def _shm_path(key: str, root: Path) -> Path:
    """The file behind a POSIX shared memory key ("/name" or "name"); keys naming anything else (a
    path with further slashes, '.' or '..') are refused, as shm_open refuses them."""
    name = key.lstrip("/")
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise invalid_arg(f"Unable to open shared memory region: '{key}'")
    return root / name


class SharedMemoryRegistry:
    """The registered regions by name. Used from the event loop only."""

    def __init__(self, root: Path = SHM_ROOT) -> None:
        self.root = root
        self._regions: dict[str, _Region] = {}

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if name in self._regions:
            raise TritonError(ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager")
        path = _shm_path(key, self.root)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            raise invalid_arg(f"Unable to open shared memory region: '{key}'") from None
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size or byte_size == 0:
                raise invalid_arg(
                    f"Invalid shared memory region: '{key}' (offset {offset} + byte_size {byte_size} does "
                    f"not fit its {size} bytes)"
                )
            try:
                mapping = mmap.mmap(fd, offset + byte_size)
            except (OSError, ValueError) as exc:
                raise invalid_arg(f"Unable to map shared memory region: '{key}': {exc}") from None
        finally:
            os.close(fd)
        view = memoryview(mapping)[offset : offset + byte_size]
        self._regions[name] = _Region(name, key, offset, byte_size, mapping, view)

    def unregister(self, name: str = "") -> None:
        """One region, or all of them when `name` is empty; unknown names are not an error."""
        names = [name] if name else list(self._regions)
        for region_name in names:
            region = self._regions.pop(region_name, None)
            if region is not None:
                region.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        if not name:
            return [region.status() for region in self._regions.values()]
        region = self._regions.get(name)
        if region is None:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def view(self, name: str, offset: int, byte_size: int) -> memoryview:
        """`byte_size` bytes of region `name` from `offset` (relative to the region), writable."""
        region = self._regions.get(name)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{name}'")
        if offset >= region.byte_size:
            raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
        if byte_size == 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        return region.view[offset : offset + byte_size]

    def close(self) -> None:
        self.unregister()
