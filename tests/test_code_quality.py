"""ruff and mypy clean, as the project's habits require; run here so CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install 'tcli[test]')")
    return found


def test_ruff_lint_and_format() -> None:
    lint = subprocess.run(
        [_tool("ruff"), "check", "server", "tcli", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout
    fmt = subprocess.run(
        [_tool("ruff"), "format", "--check", "server", "tcli", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert fmt.returncode == 0, fmt.stdout


def test_mypy() -> None:
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
