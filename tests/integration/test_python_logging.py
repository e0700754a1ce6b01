"""`pb_utils.Logger` obeys the server's log settings as they change (`POST /v2/logging`), for a python
model in the server's process and for one whose instances run in processes of their own: with
log_info false its INFO lines stop, with log_warning false its WARNING lines stop too, and its
VERBOSE lines show while log_verbose_level is 1 or more (Triton's qa/L0_backend_python logging
subtest turns it on at run time and counts them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.serve_process import ServeProcess

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            tag = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            pb_utils.Logger.log_verbose(f"verbose-{tag}")
            pb_utils.Logger.log_info(f"info-{tag}")
            pb_utils.Logger.log_warn(f"warn-{tag}")
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([tag], np.int32))]))
        return answers
"""
CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
"""
MODELS = {"in_server": 1, "in_processes": 2}  # two instances run in processes of their own


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repository = tmp_path_factory.mktemp("logging") / "models"
    for name, count in MODELS.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(MODEL)
        (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name, count=count))
    server = ServeProcess(str(Path(repository)))
    try:
        yield server
    finally:
        server.stop()


def _infer(http: httpx.Client, model: str, tag: int) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [tag]}]}
    assert http.post(f"/v2/models/{model}/infer", json=body).status_code == 200


@pytest.mark.parametrize("model", list(MODELS))
def test_logger_follows_the_log_settings(served: ServeProcess, model: str) -> None:
    base = 10 * (list(MODELS).index(model) + 1)  # each model's own tags: 11..14, 21..24
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        try:
            _infer(http, model, base + 1)  # both lines
            http.post("/v2/logging", json={"log_info": False})
            _infer(http, model, base + 2)  # the warning only
            http.post("/v2/logging", json={"log_warning": False})
            _infer(http, model, base + 3)  # neither
            http.post("/v2/logging", json={"log_info": True, "log_warning": True})
            _infer(http, model, base + 4)  # both again: once the server printed these, the rest is in
            served.wait_for_output(f"warn-{base + 4}")
            served.wait_for_output(f"info-{base + 4}")
        finally:
            http.post("/v2/logging", json={"log_info": True, "log_warning": True})
    tags = {f"{kind}-{base + i}" for kind in ("info", "warn") for i in range(1, 5)}
    seen = [line.rsplit("] ", 1)[1] for line in served.output().splitlines() if "tcli.python_model]" in line]
    assert sorted(mark for mark in seen if mark in tags) == sorted(
        [f"info-{base + 1}", f"warn-{base + 1}", f"warn-{base + 2}", f"info-{base + 4}", f"warn-{base + 4}"]
    )


@pytest.mark.parametrize("model", list(MODELS))
def test_verbose_lines_follow_the_log_verbose_level(served: ServeProcess, model: str) -> None:
    base = 100 * (list(MODELS).index(model) + 1)  # each model's own tags: 101..103, 201..203
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=60) as http:
        try:
            _infer(http, model, base + 1)  # verbose off, as the server started
            http.post("/v2/logging", json={"log_verbose_level": 1})
            _infer(http, model, base + 2)
            http.post("/v2/logging", json={"log_verbose_level": 0})
            _infer(http, model, base + 3)
            for tag in (base + 1, base + 2, base + 3):  # each request's lines are in after its info
                served.wait_for_output(f"info-{tag}")
        finally:
            http.post("/v2/logging", json={"log_verbose_level": 0})
    seen = [line.rsplit("] ", 1)[1] for line in served.output().splitlines() if "tcli.python_model]" in line]
    assert [mark for mark in seen if mark.startswith("verbose-") and int(mark[8:]) // 100 == base // 100] == [
        f"verbose-{base + 2}"
    ]
