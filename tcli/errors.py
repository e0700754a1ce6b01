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
