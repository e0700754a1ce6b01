"""A real `mlflow server` for tests: a sqlite backend store and a local artifact folder it serves
(clients upload and download through it, as with a team's server), on 127.0.0.1 and a free port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.object_storage import free_port

START_TIMEOUT_S = 120  # a cold start creates the sqlite schema: 10-20 s here


@contextlib.contextmanager
def mlflow_server(folder: Path) -> Iterator[str]:
    """Yield the tracking URI once the server answers /health; stop it (and its workers) at the end."""
    port = free_port()
    log = (folder / "mlflow-server.log").open("w")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the uvicorn workers stop with it
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(url, process, folder / "mlflow-server.log")
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()


def _wait_for_health(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"mlflow server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(
        f"mlflow server did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
    )
