"""Python model instances run in processes of their own by default (issue 20), as Triton's stubs do:
a model whose `initialize` segfaults or whose `execute` ends its process takes down only itself, and
`tcli serve` goes on serving every other model. A model (TCLI_INSTANCE_PROCESS "false") or the whole
server (`--backend-config=python,instance-process=false`) opts in to running in the server process.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import REPO
from tests.integration.serve_process import ServeProcess

# answers the process id it runs in; a negative input ends that process as a segfault would
PID_MODEL = """
import ctypes
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0:
                ctypes.string_at(0)  # SIGSEGV
            pid = np.array([os.getpid()], dtype=np.int64)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return answers
"""
SEGFAULT_AT_INIT = """
import ctypes


class TritonPythonModel:
    def initialize(self, args):
        ctypes.string_at(0)

    def execute(self, requests):
        return []
"""


def _config(name: str, parameter: str | None = None) -> str:
    config = f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
"""
    if parameter is not None:
        config += f'parameters {{ key: "TCLI_INSTANCE_PROCESS" value: {{ string_value: "{parameter}" }} }}\n'
    return config


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("isolation") / "models"
    for name, source, parameter in (
        ("pid_default", PID_MODEL, None),
        ("pid_in_server", PID_MODEL, "false"),
        ("pid_own_process", PID_MODEL, "true"),
        ("segfault_at_init", SEGFAULT_AT_INIT, None),
    ):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(source)
        (repository / name / "config.pbtxt").write_text(_config(name, parameter))
    shutil.copytree(REPO / "add_sub", repository / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    return repository


@pytest.fixture(scope="module")
def served(repository: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(str(repository), "--exit-on-error=false")
    try:
        yield server
    finally:
        server.stop()


def _pid(http: httpx.Client, model: str, value: int = 1) -> httpx.Response:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]}]}
    return http.post(f"/v2/models/{model}/infer", json=body)


def _add_sub_serves(http: httpx.Client) -> bool:
    four = {"datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
    body = {"inputs": [{"name": "INPUT0", **four}, {"name": "INPUT1", **four}]}
    return http.post("/v2/models/add_sub/infer", json=body).status_code == 200


def test_instances_run_in_their_own_process_unless_the_model_opts_out(served: ServeProcess) -> None:
    server_pid = served.process.pid
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        assert _pid(http, "pid_default").json()["outputs"][0]["data"][0] != server_pid
        assert _pid(http, "pid_own_process").json()["outputs"][0]["data"][0] != server_pid
        assert _pid(http, "pid_in_server").json()["outputs"][0]["data"][0] == server_pid


def test_a_segfault_in_initialize_fails_only_that_model(served: ServeProcess) -> None:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        (row,) = [r for r in http.post("/v2/repository/index").json() if r["name"] == "segfault_at_init"]
        assert row["state"] == "UNAVAILABLE"
        assert row["reason"] == (
            "Internal: python model 'segfault_at_init' instance 'segfault_at_init_0': its process exited "
            "while starting (signal 11: SIGSEGV)"
        )
        assert http.get("/v2/health/live").status_code == 200
        assert _add_sub_serves(http)
    assert served.process.poll() is None


def test_a_segfault_in_execute_fails_its_request_and_the_server_serves_on(served: ServeProcess) -> None:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        crashed = _pid(http, "pid_default", -1)
        assert crashed.status_code == 500
        assert "its process exited unexpectedly (signal 11: SIGSEGV)" in crashed.json()["error"]
        assert _pid(http, "pid_default").status_code == 200  # restarted
        assert _add_sub_serves(http)
        assert _pid(http, "pid_in_server").status_code == 200
    assert served.process.poll() is None


def test_the_server_setting_runs_python_models_in_the_server_process(repository: Path) -> None:
    server = ServeProcess(
        str(repository),
        "--exit-on-error=false",
        "--backend-config=python,instance-process=false",
        "--model-control-mode=explicit",
        "--load-model=pid_default",
        "--load-model=pid_own_process",
    )
    try:
        with httpx.Client(base_url=f"http://{server.http_url}", timeout=60) as http:
            assert _pid(http, "pid_default").json()["outputs"][0]["data"][0] == server.process.pid
            # the model's own parameter wins over the server's setting
            assert _pid(http, "pid_own_process").json()["outputs"][0]["data"][0] != server.process.pid
    finally:
        server.stop()
