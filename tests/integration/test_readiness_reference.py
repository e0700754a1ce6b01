"""Strict readiness and the index after unloads, side by side with real Triton 2.51: an explicitly
unloaded model, and a version the policy stops serving, are UNAVAILABLE "unloaded" and leave the
server ready."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.reference import RealTriton, require_reference_triton

pytestmark = pytest.mark.reference
ADD_SUB = Path(__file__).resolve().parents[2] / "model_repository" / "add_sub"


def post(address: str, path: str) -> bytes:
    request = urllib.request.Request(f"http://{address}{path}", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return bytes(response.read())


def index(address: str) -> list[dict[str, str]]:
    return json.loads(post(address, "/v2/repository/index"))  # type: ignore[no-any-return]


def settled(address: str, timeout: float = 60) -> list[dict[str, str]]:
    """The index once nothing is LOADING or UNLOADING (Triton's python stubs take a while to go)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = index(address)
        if not any(r.get("state") in ("LOADING", "UNLOADING") for r in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"{address} still moving: {index(address)}")


def ready(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/v2/health/ready", timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def test_an_explicit_unload_leaves_the_server_ready(tmp_path: Path) -> None:
    binary = require_reference_triton()
    shutil.copytree(ADD_SUB, tmp_path / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    settings = ServerSettings(
        [tmp_path],
        ControlMode.EXPLICIT,
        load_models=["add_sub"],
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
    )
    with RealTriton(binary, tmp_path, args) as triton, Server(settings) as tcli:
        addresses = [triton.http_address, f"127.0.0.1:{tcli.http_port}"]
        for address in addresses:
            post(address, "/v2/repository/models/add_sub/unload")
        rows = [settled(address) for address in addresses]
        assert (
            rows[0]
            == rows[1]
            == [{"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
        )
        assert [ready(address) for address in addresses] == [True, True]


def test_a_version_the_policy_drops_stays_listed_as_unloaded(tmp_path: Path) -> None:
    binary = require_reference_triton()
    shutil.copytree(ADD_SUB, tmp_path / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    settings = ServerSettings(
        [tmp_path],
        ControlMode.POLL,
        repository_poll_secs=0.5,
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
    )
    triton = RealTriton(binary, tmp_path, ["--model-control-mode=poll", "--repository-poll-secs=1"])
    with triton, Server(settings) as tcli:
        addresses = [triton.http_address, f"127.0.0.1:{tcli.http_port}"]
        shutil.copytree(
            ADD_SUB / "1", tmp_path / "add_sub" / "2", ignore=shutil.ignore_patterns("__pycache__")
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = [settled(address) for address in addresses]
            if all(any(r.get("version") == "2" and r["state"] == "READY" for r in row) for row in rows):
                break
            time.sleep(0.2)
        assert (
            rows[0]
            == rows[1]
            == [
                {"name": "add_sub", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
                {"name": "add_sub", "version": "2", "state": "READY"},
            ]
        )
        assert [ready(address) for address in addresses] == [True, True]
