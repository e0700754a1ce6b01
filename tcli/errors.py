"""How the CLI fails: one line on stderr, no traceback, a meaningful exit code."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn


class CliError(Exception):
    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def check_writable(path: Path, flag: str) -> None:
    """Fail now, before minutes of work, when `path` (an output file given with `flag`) cannot be
    written: its folder missing or read-only, or the path a folder. Nothing is created."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CliError(f"{flag} {path}: is a folder; give a file path")
    if not folder.is_dir():
        raise CliError(f"{flag} {path}: folder {folder} does not exist; create it or give another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"{flag} {path}: not writable; give a path you can write to")


def unknown_model(model: str, known: list[str]) -> str:
    """One wording, for every command, of a model the server does not have, with its closest names."""
    import difflib

    close = difflib.get_close_matches(model, sorted(set(known)), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return f"model '{model}' is not in the server's repositories: {hint}see `tcli model list`"


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
