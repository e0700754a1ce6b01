"""SIGTERM at any moment of `tcli serve`'s first 5 s (the example repository loading, then serving): in
200 ms steps through start-up (the first 3 s), offset by 100 ms from test_signals_sigint.py's, so that
the two files together signal every 100 ms of it, then every 500 ms; to the server process alone as a supervisor sends it (`kill`, Kubernetes): the server
ends within 5 s with tritonserver's exit code, no traceback, no shared memory and no process left
(instance processes, the zygote, the resource tracker). Ctrl-C: test_signals_sigint.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.integration.signal_runs import copy_repository, signal_after

# 0.0 s, 0.1 s to 2.9 s every 200 ms, 3.25 s to 4.75 s every 500 ms
STEPS = [0.0] + [step / 10 for step in range(1, 30, 2)] + [3.25, 3.75, 4.25, 4.75]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repository(tmp_path_factory.mktemp("sigterm"))


@pytest.mark.parametrize("delay", STEPS, ids=[f"{d:g}s" for d in STEPS])
def test_sigterm_ends_the_server_cleanly(repo: Path, delay: float) -> None:
    signal_after(repo, repo.parent, signal.SIGTERM, delay, group=False)
