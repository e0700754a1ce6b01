"""Signals at the moments where something waits on a model: a poll-mode reload whose new instance is
still in initialize(), a second Ctrl-C while a model's finalize() holds the stop up, and a program
using the in-process API (`tcli.inprocess`) interrupted while its server starts or stops. Each time
the process ends within 5 s of the (last) signal, with the exit code it should have, no traceback, no
shared memory and no process left. The example repository serves beside the model that waits."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.integration.signal_runs import STARTED, Run, copy_repository, serve_command

# a python model whose initialize() or finalize() (as the test says) writes a marker file and then
# waits long past any deadline
WAITING_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.wait_in = os.environ.get("WAIT_IN", "")
        if self.wait_in == "initialize" and os.path.exists(os.environ["MARKER"] + ".armed"):
            open(os.environ["MARKER"], "w").close()
            time.sleep(600)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(1, np.float32))]) for _ in requests]

    def finalize(self):
        if self.wait_in == "finalize":
            open(os.environ["MARKER"], "w").close()
            time.sleep(600)
"""
WAITING_CONFIG = """
name: "waiting"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

# a program using the in-process API as its users write one: Ctrl-C ends it with 130 and no traceback
PROGRAM = """
import sys

import tcli.inprocess as tritonserver

try:
    server = tritonserver.Server(model_repository=sys.argv[1])
    print("starting", flush=True)
    server.start(wait_until_ready=True)
    print("started", flush=True)
    server.stop()
    print("stopped", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = copy_repository(tmp_path)
    (repo / "waiting" / "1").mkdir(parents=True)
    (repo / "waiting" / "1" / "model.py").write_text(WAITING_MODEL)
    (repo / "waiting" / "config.pbtxt").write_text(WAITING_CONFIG)
    return repo


def _run(command: list[str], repo: Path, wait_in: str) -> tuple[Run, Path]:
    marker = repo.parent / "waiting.marker"
    return Run(command, repo.parent, {"WAIT_IN": wait_in, "MARKER": str(marker)}).start(), marker


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_poll_reload_ends_the_server(repo: Path, number: int) -> None:
    """The reload's new instance is still in initialize(): the server stops (exit 0, as tritonserver
    once serving) without waiting for it."""
    run, marker = _run(
        serve_command(repo, "--model-control-mode=poll", "--repository-poll-secs=0.2"), repo, "initialize"
    )
    run.wait_for(lambda: STARTED in run.output(), "started")
    Path(f"{marker}.armed").touch()  # the next initialize() waits
    (repo / "waiting" / "config.pbtxt").write_text(WAITING_CONFIG + "\n# changed: reload\n")
    run.wait_for(marker.exists, "began reloading the model")
    run.send(number, group=number == signal.SIGINT)
    code, _, err = run.finish()
    assert code == 0, err[-3000:]


def test_a_second_ctrl_c_ends_the_server_at_once(repo: Path) -> None:
    """The first Ctrl-C stops the server gracefully; a model's finalize() holds that up; the second
    ends the server at once, killed by SIGINT as it would be without a handler."""
    run, marker = _run(serve_command(repo), repo, "finalize")
    run.wait_for(lambda: STARTED in run.output(), "started")
    run.send(signal.SIGINT, group=True)
    run.wait_for(marker.exists, "began finalize()")
    run.send(signal.SIGINT, group=True)
    code, _, err = run.finish()
    assert code == -signal.SIGINT, err[-3000:]


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.3, 1.5])
def test_a_signal_while_the_in_process_server_starts(repo: Path, number: int, delay: float) -> None:
    """Ctrl-C: KeyboardInterrupt in start(), the program's to handle (here: 130); SIGTERM: the
    program ends as SIGTERM ends it, with nothing left."""
    program = repo.parent / "program.py"
    program.write_text(PROGRAM)
    run, _ = _run([sys.executable, str(program), str(repo)], repo, "")
    run.wait_for(lambda: "starting" in run.output(), "began starting")
    time.sleep(delay)  # the moment of the signal is what the test varies, not a wait for something
    run.send(number, group=number == signal.SIGINT)
    code, out, err = run.finish()
    if number == signal.SIGTERM:
        assert code == -number, err[-3000:]
    else:  # on a fast machine it may have started and stopped by then: its own exit, 0
        assert code == (0 if "stopped" in out else 130), err[-3000:]


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_in_process_server_stops(repo: Path, number: int) -> None:
    """stop() waits on a model's finalize(): Ctrl-C interrupts it (the program exits 130), SIGTERM
    ends the program; either way nothing is left."""
    program = repo.parent / "program.py"
    program.write_text(PROGRAM)
    run, marker = _run([sys.executable, str(program), str(repo)], repo, "finalize")
    run.wait_for(marker.exists, "began finalize()")
    run.send(number, group=number == signal.SIGINT)
    code, _, err = run.finish()
    assert code == (130 if number == signal.SIGINT else -number), err[-3000:]


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_shutdown_log_ends_with_the_models_unloaded(repo: Path, number: int) -> None:
    """As tritonserver's: each model version loaded is logged unloaded in Triton's words (its qa
    counts "successfully unloaded" lines), and the last line says that the server stopped."""
    run, _ = _run(serve_command(repo), repo, "")
    run.wait_for(lambda: STARTED in run.output(), "started")
    run.send(number, group=number == signal.SIGINT)
    code, out, err = run.finish()
    assert code == 0, err[-3000:]
    log = out + err
    loaded = re.findall(r"successfully loaded '([^']+)' version (\d+)", log)
    unloaded = re.findall(r"successfully unloaded '([^']+)' version (\d+)", log)
    assert loaded and sorted(unloaded) == sorted(loaded), log[-3000:]
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.endswith(f"server stopped: {len(loaded)} model versions unloaded"), err[-3000:]
