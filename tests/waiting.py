"""Waiting on a condition in a test: polled with a deadline, never a fixed pause."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.01  # the polling interval, not an assumed duration


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Return once `condition()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(POLL_S)
