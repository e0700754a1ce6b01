"""A model repository on disk: a folder of model folders (each one read by config/model_folder.py)."""

from __future__ import annotations

import os
from pathlib import Path

from server.config.model_folder import ModelFolder, scan_model


def is_model_name(name: str) -> bool:
    """A name that can only mean one folder directly inside the repository: a request's model name
    is a path component, so "..", separators and NUL would reach outside it."""
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def scan_repository(repository: Path) -> list[ModelFolder]:
    """Every model folder in a repository, sorted by name. Plain files at the top level are ignored,
    as Triton ignores them; hidden folders and __pycache__ are skipped."""
    if not repository.is_dir():
        raise FileNotFoundError(f"model repository '{repository}' is not a directory")
    # scandir's entries know their type from the listing itself: no stat per model folder
    with os.scandir(repository) as entries:
        names = sorted(
            e.name for e in entries if e.is_dir() and not e.name.startswith(".") and e.name != "__pycache__"
        )
    return [scan_model(repository / name, repository) for name in names]
