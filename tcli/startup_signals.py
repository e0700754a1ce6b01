"""Ctrl-C while `tcli` or `tritonserver` is still starting (importing, reading its command line) ends
it as the signal does: no KeyboardInterrupt traceback from inside an import, and the exit status
tritonserver has before its handler is installed (killed by SIGINT). The package imports this module
first of all (tcli/__init__.py); `tcli.main.run` gives Ctrl-C back to Python (KeyboardInterrupt:
"interrupted", 130) for every command but `serve`, whose server installs its own handling before it
starts anything (server/signals.py).

Only modules the interpreter has loaded already, and `signal`.
"""

from __future__ import annotations

import os
import signal
import sys

# the console scripts; a test importing tcli keeps its Ctrl-C
_PROGRAMS = {"tcli", "tritonserver"}
_taken = False


def default_while_starting() -> None:
    """SIGINT's default action until the command runs (when Python's handler is in place)."""
    global _taken
    if (
        os.path.basename(sys.argv[0]) in _PROGRAMS
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _taken = True


def python_handles() -> None:
    """Give Ctrl-C back to Python: it raises KeyboardInterrupt, which the command handles."""
    global _taken
    if _taken:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _taken = False
