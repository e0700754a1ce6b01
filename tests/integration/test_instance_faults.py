"""A python instance whose process dies (issue 14), as a user of `tcli serve` sees it: the request it
was running fails with one line naming the model and instance, the instance restarts for the next
request, the rest of the server serves on; an instance that keeps dying (5 times within a minute) is
not restarted forever: its version turns UNAVAILABLE with the reason, and every other model still
answers.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import REPO
from tests.integration.serve_process import ServeProcess

CRASHY = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0:
                os._exit(7)  # a crash, as a segfault or a killed process ends it
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return answers
"""
CONFIG = """
name: "crashy"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "TCLI_INSTANCE_PROCESS" value: { string_value: "true" } }
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServeProcess]:
    repository = tmp_path / "models"
    (repository / "crashy" / "1").mkdir(parents=True)
    (repository / "crashy" / "1" / "model.py").write_text(CRASHY)
    (repository / "crashy" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(REPO / "add_sub", repository / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    server = ServeProcess(str(repository))
    try:
        yield server
    finally:
        server.stop()


def _infer(http: httpx.Client, value: int) -> httpx.Response:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]}
    return http.post("/v2/models/crashy/infer", json=body)


def _add_sub_serves(http: httpx.Client) -> bool:
    four = {"datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
    body = {"inputs": [{"name": "INPUT0", **four}, {"name": "INPUT1", **four}]}
    return http.post("/v2/models/add_sub/infer", json=body).status_code == 200


def test_a_crash_fails_its_request_and_the_instance_restarts(served: ServeProcess) -> None:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        crashed = _infer(http, -1)
        assert crashed.status_code == 500
        assert crashed.json()["error"] == (
            "python model 'crashy' instance 'crashy_0_0': its process exited unexpectedly (exit code 7); "
            "the instance restarts for later requests"
        )
        assert _infer(http, 4).json()["outputs"][0]["data"] == [4]
        assert http.get("/v2/models/crashy/ready").status_code == 200
        assert _add_sub_serves(http)
    assert served.process.poll() is None


def test_an_instance_that_keeps_dying_leaves_its_model_unavailable(served: ServeProcess) -> None:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        for _ in range(5):
            assert _infer(http, -1).status_code == 500
        reason = (
            "python model 'crashy' instance 'crashy_0_0': its process died 5 times within 60 s (last exit "
            "code 7); it is not restarted: fix the model and load it again"
        )
        (row,) = [row for row in http.post("/v2/repository/index").json() if row["name"] == "crashy"]
        assert row == {"name": "crashy", "version": "1", "state": "UNAVAILABLE", "reason": reason}
        assert http.get("/v2/models/crashy/ready").status_code == 400
        refused = _infer(http, 1)
        assert (refused.status_code, refused.json()) == (
            404,
            {"error": "Request for unknown model: 'crashy' has no available versions"},
        )
        assert http.get("/v2/health/live").status_code == 200
        assert _add_sub_serves(http)
    assert reason in served.output()
