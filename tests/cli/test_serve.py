"""`tcli serve` as a user runs it: start-up tables, Triton's flags, a clean stop on SIGTERM that lets
in-flight requests finish."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gevent
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.cli.conftest import ROOT

SLOW_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        open(pb_utils.get_model_dir() + "/../started", "w").close()  # tells the test it is in flight
        time.sleep(0.5)  # long enough for SIGTERM to arrive while the request is in flight
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""

SLOW_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


class Served:
    def __init__(self, *args: str) -> None:
        tcli = Path(sys.executable).parent / "tcli"
        env = {**os.environ, "COLUMNS": "200"}
        self.process = subprocess.Popen(
            [str(tcli), "serve", *args, "--http-port", "0", "--metrics-port", "0", "--allow-grpc=false"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.port = 0
        deadline = time.monotonic() + 60
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = re.search(r"Started HTTP on [\d.]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                break
        assert self.port, "".join(self.lines)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        return self.process.wait(60)


@pytest.fixture
def slow_repo(tmp_path: Path) -> Path:
    (tmp_path / "slow" / "1").mkdir(parents=True)
    (tmp_path / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (tmp_path / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    shutil.copytree(ROOT / "model_repository" / "simple", tmp_path / "simple")
    return tmp_path


def test_serve_prints_startup_tables_and_serves(slow_repo: Path) -> None:
    served = Served(str(slow_repo))
    try:
        client = httpclient.InferenceServerClient(f"localhost:{served.port}")
        assert client.is_server_ready()
        assert client.is_model_ready("simple") and client.is_model_ready("slow")
        text = served.output()
        for title in ("Backends", "Models", "Options"):
            assert title in text
        assert "model_control_mode" in text and "strict_readiness" in text
        client.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
    finally:
        assert served.stop() == 0


def test_sigterm_drains_in_flight_requests(slow_repo: Path) -> None:
    served = Served("--model-repository", str(slow_repo), "--exit-timeout-secs", "10")
    client = httpclient.InferenceServerClient(f"localhost:{served.port}", concurrency=2)
    data = np.array([1.5, 2.5], np.float32)
    infer_input = httpclient.InferInput("IN", [2], "FP32")
    infer_input.set_data_from_numpy(data)
    pending = client.async_infer("slow", [infer_input])
    started = slow_repo / "slow" / "started"
    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:
        gevent.sleep(0.01)  # the client sends from a greenlet: time.sleep would never let it run
    assert started.exists(), "the request never reached the model"
    code = served.stop()  # SIGTERM while the request executes
    result = pending.get_result()
    assert result.as_numpy("OUT").tolist() == [1.5, 2.5]
    assert code == 0


def test_triton_style_boolean_flags_are_checked(tmp_path: Path) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    done = subprocess.run(
        [str(tcli), "serve", str(ROOT / "model_repository"), "--strict-readiness=maybe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--strict-readiness expects true or false, got 'maybe'" in done.stderr
    assert "Traceback" not in done.stderr
    missing = subprocess.run(
        [str(tcli), "serve", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 1 and "is not a directory" in missing.stderr


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--http-header-timeout=0", "--http-header-timeout must be above 0, got 0"),
        ("--http-max-connections=-1", "--http-max-connections must be above 0, got -1"),
        ("--grpc-max-message-size=4294967296", "--grpc-max-message-size must be at most 2147483647"),
    ],
)
def test_connection_limit_flags_are_checked(flag: str, message: str) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    done = subprocess.run(
        [str(tcli), "serve", str(ROOT / "model_repository"), flag], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


MARKING_MODEL = """
import pathlib
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pathlib.Path(args["model_repository"], "..", "loaded").touch()  # the test sees a load happened

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


def test_ports_in_use_are_named_before_any_model_loads(tmp_path: Path) -> None:
    (tmp_path / "marking" / "1").mkdir(parents=True)
    (tmp_path / "marking" / "config.pbtxt").write_text(SLOW_CONFIG)
    (tmp_path / "marking" / "1" / "model.py").write_text(MARKING_MODEL)
    holders = []
    for _ in range(2):
        holder = socket.socket()
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        holders.append(holder)
    http_port, grpc_port = (holder.getsockname()[1] for holder in holders)
    tcli = Path(sys.executable).parent / "tcli"
    try:
        result = subprocess.run(
            [
                str(tcli),
                "serve",
                str(tmp_path),
                "--http-port",
                str(http_port),
                "--grpc-port",
                str(grpc_port),
                "--metrics-port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1
        assert result.stderr.strip() == (
            # Triton's words for the first service it starts (gRPC), which its scripts grep for, then ours
            f"error: failed to start GRPC service: Unavailable - Socket '0.0.0.0:{grpc_port}' already in use; "
            f"--http-port {http_port} and --grpc-port {grpc_port} are in use (another server "
            "listens there): stop that server, or pick other ports (--http-port 0 --grpc-port 0 takes free ones)"
        )
        assert not (tmp_path / "loaded").exists()  # failed before loading any model

        # the hint works: the same command with the ports it names
        hint = re.search(r"\((--.*) takes free ones\)", result.stderr)
        assert hint is not None
        served = subprocess.Popen(
            [str(tcli), "serve", str(tmp_path), *hint.group(1).split(), "--metrics-port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            assert served.stdout is not None
            lines = []
            for line in served.stdout:  # ends when the server exits; it stops at its start-up line
                lines.append(line)
                if "Started HTTP" in line:
                    break
            assert any("Started HTTP" in line for line in lines), "".join(lines)
            assert (tmp_path / "loaded").exists()
        finally:
            os.killpg(served.pid, signal.SIGTERM)
            served.wait(60)
    finally:
        for holder in holders:
            holder.close()


def test_two_front_ends_on_one_port_are_refused(tmp_path: Path) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    result = subprocess.run(
        [str(tcli), "serve", str(tmp_path), "--http-port", "18123", "--metrics-port", "18123"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "error: --http-port and --metrics-port are both 18123: give each front end its own port"
    )
