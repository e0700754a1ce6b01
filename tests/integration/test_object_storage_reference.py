"""Real Triton 2.51 and tcli pointed at the same bucket on moto's S3 server, both in poll mode: they
start, answer ready, list and serve the same models, and pick up an uploaded model, a new version and
a removed model within a few polls."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.object_storage import delete_prefix, s3_env, s3_server, upload_folder
from tests.reference import RealTriton, require_reference_triton

pytestmark = pytest.mark.reference
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"


def index(address: str) -> list[tuple[str, str, str]]:
    request = urllib.request.Request(f"http://{address}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        import json

        rows = json.loads(response.read())
    return sorted((r["name"], r.get("version", ""), r.get("state", "")) for r in rows)


def converge(
    addresses: list[str], expected: Callable[[list[tuple[str, str, str]]], bool], timeout: float = 60
) -> None:
    """Wait until every server's index satisfies `expected`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(expected(index(a)) for a in addresses):
            return
        time.sleep(0.1)
    raise AssertionError("servers did not converge: " + "; ".join(f"{a}: {index(a)}" for a in addresses))


def add_sub(address: str) -> list[float]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(address)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.arange(4, dtype=np.float32))
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist()  # type: ignore[no-any-return]


def _moving(rows: list[tuple[str, str, str]]) -> bool:
    return any(state in ("LOADING", "UNLOADING") for _, _, state in rows)


def ready(address: str) -> bool:
    with urllib.request.urlopen(f"http://{address}/v2/health/ready", timeout=10) as response:
        return response.status == 200


def test_triton_and_tcli_serve_and_poll_the_same_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    binary = require_reference_triton()
    s3_env(monkeypatch)
    with s3_server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="shared")
        upload_folder(client, "shared", EXAMPLES / "add_sub", "repo/add_sub")
        url = s3.url("shared", "repo")
        triton = RealTriton(binary, url, ["--model-control-mode=poll", "--repository-poll-secs=1"])
        settings = ServerSettings(
            [url],
            ControlMode.POLL,
            repository_poll_secs=1,
            http_port=0,
            allow_grpc=False,
            allow_metrics=False,
        )
        with triton, Server(settings) as tcli:
            addresses = [triton.http_address, f"127.0.0.1:{tcli.http_port}"]
            assert [ready(a) for a in addresses] == [True, True]
            assert index(addresses[0]) == index(addresses[1]) == [("add_sub", "1", "READY")]
            assert add_sub(addresses[0]) == add_sub(addresses[1]) == [0.0, 2.0, 4.0, 6.0]

            upload_folder(client, "shared", EXAMPLES / "simple_identity", "repo/simple_identity")
            converge(addresses, lambda rows: ("simple_identity", "1", "READY") in rows)

            upload_folder(client, "shared", EXAMPLES / "add_sub" / "1", "repo/add_sub/2")
            converge(addresses, lambda rows: ("add_sub", "2", "READY") in rows and not _moving(rows))
            assert index(addresses[0]) == index(addresses[1])

            delete_prefix(client, "shared", "repo/simple_identity/")
            converge(addresses, lambda rows: all(r[0] != "simple_identity" or r[2] != "READY" for r in rows))
            assert [r for r in index(addresses[1]) if r[0] == "simple_identity"] == []
            assert add_sub(addresses[0]) == add_sub(addresses[1])
