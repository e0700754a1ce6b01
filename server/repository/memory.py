"""Give the memory an unloaded model freed back to the system.

A model's weights are many allocations of a few hundred KB (DenseNet-121 has 848 initializers).
glibc serves those from its heaps, and after they are freed it keeps the pages for the process's next
allocations: measured here, unloading an onnxruntime model of 256 tensors of 480 KB returned 1% of its
120 MB. `malloc_trim(0)` hands every free page of every heap back (madvise), which returned all of
it. Weights in one large allocation (above glibc's mmap threshold) are returned on free anyway.
Loading frees as much again (the model file read and parsed to check it), so loads trim too. A trim
costs under a millisecond, or ~25 ms when it returns 400 MB.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("tcli.server")


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None elsewhere (macOS, musl) where there is nothing to call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed_memory() -> None:
    """Return the C heaps' free pages to the system (after a model loads or unloads)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
