"""The life of an instance process at its two ends: starting one (from the zygote, without re-running
the server's __main__), telling how one ended, and ending every one at once when the server process
ends (`end_all`).

The zygote is multiprocessing's "forkserver": a helper process started once, single-threaded, that
imports numpy and the worker (`process_worker`) and then forks one child per instance. A child so
starts in a few milliseconds instead of importing numpy and the worker anew (0.5 s of CPU each on
the project's machine under "spawn"), and its pages stay shared copy-on-write with the zygote's. The
server itself is never forked: it has event-loop and gRPC threads, which a fork would copy in a
broken state. The zygote ends when the server does (multiprocessing closes its socket); each child
takes the server's environment, working directory and sys.path of the moment it starts, which the
zygote's may no longer be (`process_worker.main` applies them).

An instance process ignores SIGINT and SIGTERM (the server stops it after draining), so multiprocessing's
own clean-up at exit, which sends SIGTERM to daemon children and then joins them, would wait forever on
one the server never stopped: a signal during start-up, a second Ctrl-C. `end_all` runs first (at exit,
or called by the server's signal handling): it kills them, unlinks the shared memory, and stops the
zygote and the resource tracker, so the server leaves nothing behind.
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
import time
import types
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from server.backends.python import shm
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext
    from multiprocessing.process import BaseProcess

# one start at a time, and none once end_all() began (RLock: end_all may run in a signal handler while
# the same thread starts a process)
_start_lock = threading.RLock()
_started: weakref.WeakSet[BaseProcess] = weakref.WeakSet()  # instance processes started here
_starting: weakref.WeakSet[BaseProcess] = weakref.WeakSet()  # of those, the ones not serving yet
_ending = False  # end_all() began: no process starts any more
_at_exit = False  # end_all() is registered to run at exit
# a killed process is gone in milliseconds; the bound keeps a stuck join from holding the exit up
_JOIN_SECONDS = 2.0
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


def start(process: BaseProcess) -> None:
    """Start an instance process (see main_hidden) and keep it in view for end_all(); refused with
    UNAVAILABLE once the server is ending."""
    with main_hidden():
        if _ending:
            raise TritonError(ErrorCode.UNAVAILABLE, "the server is stopping: no instance process starts")
        _end_at_exit()
        with _sigint_blocked():
            process.start()
        _started.add(process)
        _starting.add(process)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread, and so in what it starts (the zygote, the first time; a process
    under an execution environment's python): Ctrl-C reaches the whole process group, and a new
    interpreter it meets while still initializing dies with "Fatal Python error: init_sys_streams" and
    a traceback. Once running they ignore SIGINT (the zygote, and the instance processes it forks);
    multiprocessing starts its resource tracker the same way."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _end_at_exit() -> None:
    """Have end_all() run at exit, inside multiprocessing's own clean-up, before it joins its children
    (which ignore its SIGTERM); the in-process server's stop at exit (a weakref finalizer) comes
    before both."""
    global _at_exit
    if not _at_exit:
        multiprocessing.util.Finalize(None, end_all, exitpriority=0)
        _at_exit = True


def serving(process: BaseProcess) -> None:
    """The process's model is initialized: cancel_starting() leaves it alone from now on."""
    _starting.discard(process)


def cancel_starting() -> None:
    """Kill the instance processes still starting (their model's initialize() under way): the
    server stops, and their loads fail now instead of holding the stop up for as long as initialize()
    takes. The loads report it (`ModelManager.cancel_loading` keeps the report out of the log)."""
    with _start_lock:
        processes = list(_starting)
    for process in processes:
        with contextlib.suppress(Exception):  # ended already, or closed
            process.kill()


def ending() -> bool:
    """Whether end_all() began: an instance process ending now was ended on purpose."""
    return _ending


def end_all() -> None:
    """End, at once, everything the python backend started in this process: kill the instance
    processes (no finalize(): the server is going away now), unlink every shared-memory segment, stop
    the zygote and the resource tracker. Afterwards no process starts. For the end of the server
    process only (atexit, a signal during start-up, a second Ctrl-C)."""
    global _ending
    with _start_lock:
        _ending = True
        processes = list(_started)
    for process in processes:
        with contextlib.suppress(Exception):  # ended already, or closed
            process.kill()
    deadline = time.monotonic() + _JOIN_SECONDS
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
    shm.unlink_all()  # before the tracker stops: it would warn about each name left
    _stop_helpers()


def _stop_helpers() -> None:
    """Stop the zygote (it ends when its "alive" pipe closes) and then the resource tracker (it ends
    once every holder of its pipe has: this process, the zygote and the instance processes). Both
    would end by themselves when this process exits, a moment after it; stopped here they are gone
    before it. CPython has no public way to stop either: their private parts are used, each under
    `suppress`, so that a Python that renames them only loses the early stop. On a thread with a
    bound: a tracker pipe also held by another child of the program (in-process use) would keep its
    stop waiting."""
    from multiprocessing import forkserver, resource_tracker

    def stop() -> None:
        with contextlib.suppress(Exception):
            zygote: Any = forkserver._forkserver
            pid = zygote._forkserver_pid  # killed: it has nothing to finish (its exit took 0.5 s)
            if pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            zygote._stop()  # CPython's own way to stop it (its tests'): reaps it, removes its socket
        with contextlib.suppress(Exception):
            resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]

    stopper = threading.Thread(target=stop, name="tcli-end-helpers", daemon=True)
    stopper.start()
    stopper.join(_JOIN_SECONDS)


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
