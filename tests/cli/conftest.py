from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_tcli(*args: str, cwd: Path | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `tcli` console script (as a user would), returning its output and exit code."""
    tcli = Path(sys.executable).parent / "tcli"
    command = [str(tcli)] if tcli.exists() else [sys.executable, "-m", "tcli.main"]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    result = subprocess.run(
        [*command, *args], cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"tcli {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture
def tcli():  # type: ignore[no-untyped-def]
    return run_tcli
