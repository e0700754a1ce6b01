"""How the server process meets SIGINT and SIGTERM, phase by phase, as tritonserver does:

- until the front ends listen (models loading), tritonserver has no handler yet and dies by the
  signal; tcli dies by it too (`end_on_signal`), after ending what loading began: the instance
  processes being started and those started, their shared memory, the zygote and the resource
  tracker (`process_life.end_all`). Loading is not waited for: a framework import in a loading thread
  may take seconds and cannot be interrupted.
- while serving, the first signal stops the server gracefully (`server.app.run`), exit code 0.
- a second Ctrl-C (SIGINT) while it stops ends it at once, the same way as during start-up
  (tritonserver ignores it and waits out its exit timeout; a person pressing Ctrl-C twice wants it
  gone). A SIGTERM while it stops is ignored, as tritonserver ignores it (`ignore_sigterm`): scripts
  and process managers send it to a server already stopping and then wait for its exit code (Triton's
  own qa does, and stops at a code other than 0).

The in-process server (`tcli.inprocess`) keeps Python's Ctrl-C (KeyboardInterrupt, the program's to
handle); only SIGTERM, which would kill the program where it stands, first ends the instance processes
and shared memory (`end_on_sigterm`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from server.backends.python import process_life

log = logging.getLogger("tcli.server")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


_before_end: list[Callable[[], None]] = []  # what end_now() tells first (loading stops)


def end_on_signal(*before: Callable[[], None]) -> None:
    """From now on SIGINT and SIGTERM end the process at once (main thread only), after calling
    `before` (with those of earlier calls)."""
    _before_end.extend(before)
    for number in STOP_SIGNALS:
        signal.signal(number, _end_now)


def ignore_sigterm() -> None:
    """From now on SIGTERM is logged and ignored (main thread only): the server is already stopping."""
    signal.signal(signal.SIGTERM, _stopping_already)


def _stopping_already(number: int, _frame: object) -> None:
    log.info("%s: the server is already stopping", signal.Signals(number).name)


def end_on_sigterm() -> None:
    """SIGTERM ends the process at once, after the python backend's processes and shared memory,
    where it would end it anyway: its handler is the default and this is the main thread."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, _end_now)


def _end_now(number: int, _frame: object) -> None:
    end_now(number)


def end_now(number: int) -> NoReturn:
    """End the process as `number` would by default, once everything the server started outside it
    is gone; nothing waits on a model, a thread or a client."""
    log.info("%s: ending now", signal.Signals(number).name)
    for call in _before_end:
        with contextlib.suppress(Exception):  # nothing may keep the process from ending
            call()
    process_life.end_all()
    for stream in (sys.stdout, sys.stderr):  # the log so far reaches its reader
        with contextlib.suppress(Exception):  # a write the signal interrupted
            stream.flush()
    signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
    os.kill(os.getpid(), number)
    os._exit(128 + number)  # not reached: the default action of SIGINT and SIGTERM ends the process
