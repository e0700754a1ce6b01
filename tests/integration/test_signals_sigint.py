"""Ctrl-C at any moment of `tcli serve`'s first 5 s (the example repository loading, then serving): in
200 ms steps through start-up (the first 3 s; test_signals_sigterm.py's fall between them), then
every 500 ms; to the whole process group as a terminal sends it: the server ends within 5 s with
tritonserver's exit code, no traceback, no shared memory and no process left (instance processes, the
zygote, the resource tracker). SIGTERM: test_signals_sigterm.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.integration.signal_runs import copy_repository, signal_after

# 0.0 s to 3.0 s every 200 ms, 3.5 s to 5.0 s every 500 ms
STEPS = [step / 10 for step in range(0, 31, 2)] + [3.5, 4.0, 4.5, 5.0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repository(tmp_path_factory.mktemp("sigint"))


@pytest.mark.parametrize("delay", STEPS, ids=[f"{d:g}s" for d in STEPS])
def test_ctrl_c_ends_the_server_cleanly(repo: Path, delay: float) -> None:
    signal_after(repo, repo.parent, signal.SIGINT, delay, group=True)
