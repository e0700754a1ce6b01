"""How the CLI fails: one line on stderr, no traceback, a meaningful exit code."""

from __future__ import annotations

import sys
from typing import NoReturn


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def exit_with(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def describe(exc: BaseException) -> str:
    """An unexpected failure in words, without the exception's class name: an OSError names its
    file and reason, anything else says what it says (or that it is tcli's fault when it says
    nothing)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    text = str(exc).strip()
    return text or "tcli failed unexpectedly (a bug in tcli; please report the command that did it)"
