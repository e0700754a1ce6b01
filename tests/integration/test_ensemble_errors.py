"""An ensemble step that fails or returns a wrong shape gives a clear error naming the step, on that
request only; the ensemble keeps serving and its statistics count the failure."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, Tensor
from server.repository.manager import ControlMode, ModelManager
from server.service import InferenceService
from tests.integration.conftest import REPO

IDENT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0] < 0:
                raise ValueError("negative input")
            out = x[:3] if x[0] == 99 else x  # 99: a wrong shape on purpose
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""

IDENT_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ENSEMBLE_CONFIG = """
platform: "ensemble"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "ident" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "Y" } input_map { key: "INPUT1" value: "X" }
    output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } }
] }
"""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[InferenceService]:
    shutil.copytree(REPO / "add_sub", tmp_path / "add_sub")
    (tmp_path / "ident" / "1").mkdir(parents=True)
    (tmp_path / "ident" / "config.pbtxt").write_text(IDENT_CONFIG)
    (tmp_path / "ident" / "1" / "model.py").write_text(IDENT)
    (tmp_path / "ens" / "1").mkdir(parents=True)
    (tmp_path / "ens" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    manager = ModelManager([tmp_path], ControlMode.NONE)
    manager.load_startup()
    yield InferenceService(manager)
    manager.shutdown()


def infer(service: InferenceService, first: float) -> dict[str, list[float]]:
    x = np.array([first, 1, 2, 3], np.float32)
    response = asyncio.run(service.infer(InferenceRequest("ens", inputs=[Tensor("X", "FP32", (4,), x)])))
    return {t.name: t.data.tolist() for t in response.outputs}


def test_step_errors_name_the_step_and_leave_the_ensemble_serving(service: InferenceService) -> None:
    assert infer(service, 5) == {"SUM": [10, 2, 4, 6], "DIFF": [0, 0, 0, 0]}
    with pytest.raises(TritonError) as failed:
        infer(service, -1)
    assert "in ensemble 'ens', step 0 (ident)" in failed.value.message
    assert "negative input" in failed.value.message
    with pytest.raises(TritonError) as wrong_shape:
        infer(service, 99)
    assert "in ensemble 'ens', step 1 (add_sub)" in wrong_shape.value.message
    assert "unexpected shape for input 'INPUT0'" in wrong_shape.value.message
    assert infer(service, 1) == {"SUM": [2, 2, 4, 6], "DIFF": [0, 0, 0, 0]}
    (stats,) = service.statistics("ens").model_stats
    assert stats.inference_stats.success.count == 2
    assert stats.inference_stats.fail.count == 2
    (ident,) = service.statistics("ident").model_stats
    assert ident.inference_stats.success.count == 3  # per-step statistics on the composing model
