"""Importing torch for serving, without the CUDA bindings a machine with no GPU cannot use.

torch's `torch.cuda._utils` imports cuda-python's `cuda.bindings` whenever that package is installed
(`tritonclient[all]` brings it), ~150 ms of the 1-2 s torch import, spent with the GIL held while the
rest of the repository waits to load. torch treats the package as optional (it catches the
ImportError). With no GPU visible, torch's own imports of it are refused for the duration of the
import; any other importer (a python model, tritonclient's CUDA shared memory) still gets it.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from server.backends.devices import visible_gpu_count

_SKIPPED = "cuda.bindings"
_lock = threading.Lock()


class SkipCudaBindingsForTorch(importlib.abc.MetaPathFinder):
    """A meta path finder that refuses `cuda.bindings` (and its submodules) to torch's modules only."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if (fullname == _SKIPPED or fullname.startswith(_SKIPPED + ".")) and _importer().startswith("torch."):
            raise ModuleNotFoundError(
                f"No module named '{fullname}' (not needed: no GPU visible)", name=fullname
            )
        return None  # let the next finder look


def _importer() -> str:
    """The module whose code runs the import under way on this thread (importlib's own frames skipped)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith("importlib") and name != __name__:
            return name
        frame = frame.f_back  # type: ignore[assignment]
    return ""


def import_torch() -> ModuleType:
    """`import torch`, without its CUDA bindings when no GPU is visible. Raises ImportError when torch
    is not installed."""
    with _lock:
        if "torch" in sys.modules or visible_gpu_count() > 0:
            import torch

            return torch
        finder = SkipCudaBindingsForTorch()
        sys.meta_path.insert(0, finder)
        try:
            import torch
        finally:
            sys.meta_path.remove(finder)
        return torch
