"""The signals of a process a python model forks (a multiprocessing.Pool worker, an os.fork()).

A forked child inherits its parent's signal handling: an instance process ignores SIGINT and
SIGTERM (the server stops it), and the server's own handlers end the server (and its instance
processes). Inherited, either makes a child deaf to Pool.terminate(), whose SIGTERM is how it stops
its workers: the Pool then waits forever on a worker blocked on its task queue, and the request
with it. A child here gets SIGTERM's default action and ignores SIGINT; a multiprocessing child
also gets a process group of its own, so a Ctrl-C or a `kill -- -<pgid>` meant for the server does
not end it in the middle of a request (as it does not end the instance). (Any forked child cannot:
Popen's start_new_session makes its session after the fork hooks run, which a group leader may not.)
The two signals stay blocked across the fork: one sent before the child has its own handling waits
for it instead of meeting the parent's (nor does it reach the server's wake-up pipe, which the
child shares until then). Installed in an instance process and in `tcli serve`'s process; an
in-process server's program keeps its own handling.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import signal
import threading

_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_mask_before_fork = threading.local()  # per forking thread: each has its own mask
_installed = False


class _Registration:
    """What multiprocessing's after-fork registry holds (weakly: kept alive by this module)."""


_registration = _Registration()


def install() -> None:
    """Give the processes this process forks from now on their own signal handling (once)."""
    global _installed
    if not _installed:
        _installed = True
        os.register_at_fork(before=_hold, after_in_parent=_release, after_in_child=_own_signals)
        multiprocessing.util.register_after_fork(_registration, _own_group)


def _hold() -> None:
    _mask_before_fork.signals = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def _release() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_fork.signals)


def _own_signals() -> None:
    with contextlib.suppress(ValueError):  # the server's wake-up pipe is the server's alone
        signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _own_group(_registration: _Registration) -> None:
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
