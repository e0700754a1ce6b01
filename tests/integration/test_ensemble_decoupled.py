"""An ensemble with a decoupled step, as Triton runs one: the ensemble is decoupled (its config says
so, unary inference is refused), each response of the decoupled step goes on through the steps
after it to a response of the ensemble, in the step's order, and the stream ends with the flags-only
final; a step that sends no response gives no ensemble response. Nested too: an ensemble whose step
is such an ensemble. Real tritonclient over gRPC streaming, against a server on port 0."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.grpc_fixtures import RunningGrpcServer, start_grpc_server

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0  # failure timeout; never reached when things work

DOUBLE_CONFIG = """
name: "double"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
DOUBLE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
"""
IO = """
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
# repeat_int32 (decoupled: one response per IN value) then double
REPEAT_DOUBLE = (
    'name: "repeat_double" platform: "ensemble" max_batch_size: 0'
    + IO
    + """
ensemble_scheduling { step [
  { model_name: "repeat_int32" model_version: -1
    input_map { key: "IN" value: "IN" } input_map { key: "DELAY" value: "DELAY" } input_map { key: "WAIT" value: "WAIT" }
    output_map { key: "OUT" value: "repeated" } },
  { model_name: "double" model_version: -1 input_map { key: "X" value: "repeated" } output_map { key: "Y" value: "OUT" } }
] }
"""
)
# repeat_double, doubled again
NESTED = (
    'name: "nested" platform: "ensemble" max_batch_size: 0'
    + IO
    + """
ensemble_scheduling { step [
  { model_name: "repeat_double" model_version: -1
    input_map { key: "IN" value: "IN" } input_map { key: "DELAY" value: "DELAY" } input_map { key: "WAIT" value: "WAIT" }
    output_map { key: "OUT" value: "doubled" } },
  { model_name: "double" model_version: -1 input_map { key: "X" value: "doubled" } output_map { key: "Y" value: "OUT" } }
] }
"""
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGrpcServer]:
    root = tmp_path_factory.mktemp("ensemble_decoupled") / "models"
    shutil.copytree(ROOT / "model_repository" / "repeat_int32", root / "repeat_int32")
    (root / "double" / "1").mkdir(parents=True)
    (root / "double" / "config.pbtxt").write_text(DOUBLE_CONFIG)
    (root / "double" / "1" / "model.py").write_text(DOUBLE_MODEL)
    for name, config in (("repeat_double", REPEAT_DOUBLE), ("nested", NESTED)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
    running = start_grpc_server(root, ControlMode.NONE)
    try:
        yield running
    finally:
        running.stop()


def _inputs(values: list[int]) -> list[grpcclient.InferInput]:
    tensors = []
    for name, data in (
        ("IN", np.array(values, dtype=np.int32)),
        ("DELAY", np.zeros(len(values), dtype=np.uint32)),
        ("WAIT", np.zeros(1, dtype=np.uint32)),
    ):
        tensor = grpcclient.InferInput(name, list(data.shape), "INT32" if name == "IN" else "UINT32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors


def _stream(server: RunningGrpcServer, model: str, values: list[int]) -> list[tuple[list[int], bool]]:
    """(OUT, final flag) of each message answering one request, up to the final one."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(model, _inputs(values), request_id="r", enable_empty_final_response=True)
        messages = []
        while not messages or not messages[-1][1]:
            result, error = answers.get(timeout=WAIT)
            assert error is None, error
            out = result.as_numpy("OUT")
            final = result.get_response().parameters["triton_final_response"].bool_param
            messages.append(([] if out is None else out.tolist(), final))
        return messages
    finally:
        client.stop_stream()
        client.close()


def test_each_response_of_the_decoupled_step_is_a_response_of_the_ensemble(server: RunningGrpcServer) -> None:
    assert _stream(server, "repeat_double", [1, 2, 3]) == [
        ([2], False),
        ([4], False),
        ([6], False),
        ([], True),
    ]


def test_an_ensemble_of_a_decoupled_ensemble(server: RunningGrpcServer) -> None:
    assert _stream(server, "nested", [1, 5]) == [([4], False), ([20], False), ([], True)]


def test_no_response_from_the_step_is_only_the_final_flag(server: RunningGrpcServer) -> None:
    assert _stream(server, "repeat_double", []) == [([], True)]


def test_the_ensemble_is_decoupled(server: RunningGrpcServer) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    try:
        config = client.get_model_config("nested", as_json=True)["config"]
        assert config["model_transaction_policy"] == {"decoupled": True}
        with pytest.raises(InferenceServerException, match="doesn't support models with decoupled"):
            client.infer("repeat_double", _inputs([1]))
    finally:
        client.close()
