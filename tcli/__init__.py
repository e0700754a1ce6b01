"""tcli: a Triton-compatible toolkit (the `tcli` command, tcli/main.py)."""

from __future__ import annotations

from tcli import startup_signals

startup_signals.default_while_starting()  # first of all: Ctrl-C while tcli starts ends it quietly
