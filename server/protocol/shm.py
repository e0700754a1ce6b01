"""System (POSIX) shared memory regions registered by clients, Triton's system shared memory extension.

A client creates `/dev/shm/<key>` (tritonclient.utils.shared_memory), registers a named region of it
(key, offset, byte_size), then names that region in inference requests instead of sending tensor
bytes. Each region is mapped once with mmap; requests get memoryviews of it, so inputs are read and
outputs written in place. Messages follow Triton's shared memory manager.

A region is in use from the moment a request names it (decoded through a `session()`) until the
request's response is written: then it cannot be unregistered, as Triton refuses (its regions are
held by every request that names them).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.protocol.errors import ErrorCode, TritonError, internal, invalid_arg, not_found

SHM_ROOT = Path("/dev/shm")


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    view: memoryview = field(repr=False)
    users: int = 0  # requests naming it, still answering (see ShmSession)

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
                    f"failed to register shared memory region '{name}': invalid args (offset {offset} + "
                    f"byte_size {byte_size} do not fit the {size} bytes of '{key}')"
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
        """One region, or all of them when `name` is empty; unknown names are not an error. A region a
        request still uses stays (Triton's words): all the others go even when one stays."""
        if name:
            region = self._regions.get(name)
            if region is not None and region.users:
                raise internal(f"Cannot unregister shared memory region '{name}', it is currently in use.")
            if region is not None:
                del self._regions[name]
                region.close()
            return
        in_use = [region_name for region_name, region in self._regions.items() if region.users]
        for region_name in [n for n in self._regions if n not in in_use]:
            self._regions.pop(region_name).close()
        if in_use:
            listed = "".join(f"{region_name} ," for region_name in in_use)
            raise internal(f"Failed to unregister the following system shared memory regions: {listed}")

    def session(self) -> ShmSession:
        """The shared memory one request reads and writes: the regions it names are in use until
        the session's release()."""
        return ShmSession(self)

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
        for region in self._regions.values():
            region.users = 0  # the server stops: no request answers any more
        self.unregister()


class ShmSession:
    """A ShmView for one request: each region it names is held (in use) until release()."""

    __slots__ = ("_held", "_registry")

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._registry = registry
        self._held: list[_Region] = []

    def __call__(self, name: str, offset: int, byte_size: int) -> memoryview:
        view = self._registry.view(name, offset, byte_size)
        region = self._registry._regions[name]
        if not any(held is region for held in self._held):
            region.users += 1
            self._held.append(region)
        return view

    def release(self) -> None:
        for region in self._held:
            region.users -= 1
        self._held.clear()
