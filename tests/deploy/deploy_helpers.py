"""What the deployment tests share: the deploy/ folder, a repository with the add_sub example, free
ports, and a server started from a command line taken out of a deployment file."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent  # the virtualenv's console scripts: tcli, tritonserver
HEALTH_PATHS = ("/v2/health/live", "/v2/health/ready")


def add_sub_repository(folder: Path) -> Path:
    """A model repository holding only the add_sub example (a python model: starts in a second)."""
    repository = folder / "models"
    shutil.copytree(
        ROOT / "model_repository" / "add_sub",
        repository / "add_sub",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return repository


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status(url: str) -> int:
    """The HTTP status of a GET (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


class Served:
    """A server started from `argv` as a deployment would start it; `wait_ok(path)` polls until 200."""

    def __init__(self, argv: list[str], http_port: int, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.http_port = http_port
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            start_new_session=True,  # stop() signals the python model processes too
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def wait_ok(self, path: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if status(self.url(path)) == 200:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(
            f"{path} never answered 200 for {' '.join(self.argv)}\n" + "".join(self.lines[-40:])
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


CHART = DEPLOY / "helm" / "tcli"
KUBERNETES = "1.30"


def render_chart(values: dict[str, Any] | None = None, release: str = "demo") -> list[dict[str, Any]]:
    """The chart's manifests, rendered offline by Helm's own library (namespace `ml`)."""
    import helm_python as helm

    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=release, namespace="ml")
    return [
        document
        for name, text in sorted(rendered.items())
        if not name.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def only(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} manifests"
    return found[0]


def server_container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "tcli")
