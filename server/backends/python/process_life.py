"""The life of an instance process at its two ends: starting one (from the zygote, without re-running
the server's __main__), and telling how one ended.

The zygote is multiprocessing's "forkserver": a helper process started once, single-threaded, that
imports numpy and the worker (`process_worker`) and then forks one child per instance. A child so
starts in a few milliseconds instead of importing numpy and the worker anew (0.5 s of CPU each on
the project's machine under "spawn"), and its pages stay shared copy-on-write with the zygote's. The
server itself is never forked: it has event-loop and gRPC threads, which a fork would copy in a
broken state. The zygote ends when the server does (multiprocessing closes its socket); each child
takes the server's environment, working directory and sys.path of the moment it starts, which the
zygote's may no longer be (`process_worker.main` applies them).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext

_start_lock = threading.Lock()
_temp_dir_lock = threading.Lock()
# what every instance process needs, imported once in the zygote
_PRELOAD = ["numpy", "server.backends.python.process_worker"]


def instance_context() -> ForkServerContext:
    """The multiprocessing context that starts instance processes: the preloaded zygote."""
    context: ForkServerContext = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    _short_socket_folder()
    return context


# A Unix socket's path holds 107 bytes; multiprocessing puts the zygote's socket at
# <temp dir>/pymp-XXXXXXXX/listener-XXXXXXXX, 32 bytes past the temp dir
_SOCKET_PATH_MAX, _SOCKET_SUFFIX = 107, 32


def _short_socket_folder() -> None:
    """A long TMPDIR (a scratch volume mounted deep, a test's own folder) would make the zygote's
    socket path too long for a Unix socket, and every instance process would fail to start with
    "AF_UNIX path too long" (Triton's stubs talk through /dev/shm and never meet it). Then
    multiprocessing's folder alone goes to /tmp: it is made once per process, so it is made here,
    before the zygote starts, with /tmp as the temp dir for that one call."""
    if len(os.fsencode(tempfile.gettempdir())) + _SOCKET_SUFFIX <= _SOCKET_PATH_MAX:
        return
    with _temp_dir_lock:
        saved = tempfile.tempdir
        tempfile.tempdir = "/tmp"
        try:
            multiprocessing.util.get_temp_dir()
        finally:
            tempfile.tempdir = saved


def server_state() -> tuple[dict[str, str], str]:
    """The environment and working directory a new instance process takes (see the module's text)."""
    return dict(os.environ), os.getcwd()


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """Start a process without it importing the server's __main__ again: "spawn" re-runs the main
    script (or module) in the child, and the zygote imports it once, unless sys.modules["__main__"]
    has no file; the worker needs nothing from it. Re-running it costs start-up time (typer for `tcli serve`), and starts the
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
