"""`--log-verbose` tells what the server does, as Triton's verbose log does for its users: at level 1
each model's load steps (the config as served, each instance created, the scheduler chosen), at level
2 each request as well (admitted, then executed on an instance). The level changes at run time
through `POST /v2/logging`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repository = tmp_path_factory.mktemp("verbose") / "models"
    shutil.copytree(ROOT / "model_repository" / "add_sub", repository / "add_sub")
    batched = repository / "batched"
    shutil.copytree(ROOT / "model_repository" / "add_sub", batched)
    config = (batched / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "batched"')
    (batched / "config.pbtxt").write_text(
        config + "\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 500 }\n"
    )
    server = ServeProcess(str(repository), "--log-verbose=1")
    try:
        yield server
    finally:
        server.stop()


def _infer(http: httpx.Client, model: str, request_id: str) -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    shape = [1, 4] if model == "batched" else [4]
    body = {
        "id": request_id,
        "inputs": [
            {"name": name, "datatype": "FP32", "shape": shape, "data": data} for name in ("INPUT0", "INPUT1")
        ],
    }
    response = http.post(f"/v2/models/{model}/infer", json=body)
    assert response.status_code == 200, response.text


def test_level_1_tells_each_load_step(served: ServeProcess) -> None:
    out = served.output()
    assert "config of 'add_sub' as served, auto-completed:" in out
    assert "loading 'add_sub' version 1 with backend 'python'" in out
    assert "created instance 'add_sub_0_0' of model 'add_sub' version 1 on CPU device 0" in out
    assert "model 'add_sub' version 1: default scheduler" in out
    assert (
        "model 'batched' version 1: dynamic batching: max batch size 8, preferred [8], max queue delay 500 µs"
        in out
    )


def test_level_2_tells_each_request_and_level_1_does_not(served: ServeProcess) -> None:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        try:
            _infer(http, "add_sub", "quiet-1")  # level 1: no line per request
            http.post("/v2/logging", json={"log_verbose_level": 2})
            _infer(http, "add_sub", "loud-2")
            _infer(http, "batched", "loud-3")
            http.post("/v2/logging", json={"log_verbose_level": 1})
            _infer(http, "add_sub", "quiet-4")
        finally:
            http.post("/v2/logging", json={"log_verbose_level": 1})
    served.wait_for_output("executing 1 request(s): 'loud-3'")
    out = served.output()
    assert "infer request id 'loud-2' for model 'add_sub' version 1: inputs INPUT0 FP32 [4]" in out
    assert "model 'add_sub' version 1, instance 'add_sub_0_0', executing 1 request(s): 'loud-2'" in out
    assert "infer request id 'loud-3' for model 'batched' version 1: inputs INPUT0 FP32 [1, 4]" in out
    assert "quiet-" not in out
