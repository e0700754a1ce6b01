"""Tests that need torch, skipped with one reason where torch is not installed.

make installs torch's CPU build only: from local disk or PyTorch's CPU index. Where neither has one
for the running Python (on the test machines, Pythons other than 3.11), it installs everything else.
"""

from __future__ import annotations

import importlib.util
import platform
from types import ModuleType

import pytest

TORCH_MISSING = importlib.util.find_spec("torch") is None
REASON = (
    f"needs torch, which is not installed: no CPU build of torch was installable for Python "
    f"{platform.python_version()} here (pip install 'tcli[torch]' from PyTorch's CPU index)"
)
requires_torch = pytest.mark.skipif(TORCH_MISSING, reason=REASON)


def import_torch() -> ModuleType:
    """torch, or this test (or module, at import time) skipped with the reason."""
    return pytest.importorskip("torch", reason=REASON)
