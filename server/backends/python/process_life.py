"""The life of an instance process at its two ends: starting one without re-running the server's
__main__, and telling how one ended."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import types
from collections.abc import Iterator

_start_lock = threading.Lock()


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """Start a process without it importing the server's __main__ again: "spawn" re-runs the main
    script (or module) in the child unless sys.modules["__main__"] has no file, and the worker needs
    nothing from it. Re-running it costs start-up time (typer for `tcli serve`), and starts the
    server again when the main script has no `if __name__ == "__main__":` guard. Only the entry in
    sys.modules is swapped, for the moment multiprocessing reads it."""
    with _start_lock:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def exit_text(code: int | None) -> str:
    """How a process ended: "exit code 7", or "signal 11: SIGSEGV" (a negative exit code)."""
    if code is not None and code < 0:
        try:
            return f"signal {-code}: {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
