"""What an ensemble hands each step, as Triton does: the ensemble request's parameters (every one a
client sent, over HTTP and gRPC), and an optional input the client left out simply absent from the
step's request (the step runs; its model decides whether it may go without it)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server.app import Server, ServerSettings

INSPECT_CONFIG = """
name: "inspect"
backend: "python"
max_batch_size: 0
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "OPT" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

# answers what its request carried: its parameters and the names of its inputs
INSPECT_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = sorted(t.name() for t in request.inputs())
            seen = json.dumps({"parameters": json.loads(request.parameters()), "inputs": names})
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            outputs = [pb_utils.Tensor("Y", x), pb_utils.Tensor("SEEN", np.array([seen.encode()], dtype=object))]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

PIPELINE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [
  { name: "X" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "OPT" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }
]
ensemble_scheduling { step [ {
  model_name: "inspect" model_version: -1
  input_map { key: "X" value: "X" } input_map { key: "OPT" value: "OPT" }
  output_map { key: "Y" value: "Y" } output_map { key: "SEEN" value: "SEEN" }
} ] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ensemble_steps")
    (root / "inspect" / "1").mkdir(parents=True)
    (root / "inspect" / "config.pbtxt").write_text(INSPECT_CONFIG)
    (root / "inspect" / "1" / "model.py").write_text(textwrap.dedent(INSPECT_MODEL))
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(PIPELINE_CONFIG)
    settings = ServerSettings([Path(root)], host="127.0.0.1", http_port=0, grpc_port=0, allow_metrics=False)
    with Server(settings) as running:
        yield running


def _seen(result: object) -> dict[str, object]:
    (seen,) = result.as_numpy("SEEN").tolist()  # type: ignore[attr-defined]
    return json.loads(seen)  # type: ignore[no-any-return]


def test_the_requests_parameters_reach_the_step(server: Server) -> None:
    x = np.array([1.0, 2.0], dtype=np.float32)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    tensor = httpclient.InferInput("X", [2], "FP32")
    tensor.set_data_from_numpy(x)
    seen = _seen(http.infer("pipeline", [tensor], parameters={"custom": "v", "n": 3, "flag": True}))
    assert {k: seen["parameters"][k] for k in ("custom", "n", "flag")} == {
        "custom": "v",
        "n": 3,
        "flag": True,
    }  # type: ignore[index]
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    tensor = grpcclient.InferInput("X", [2], "FP32")
    tensor.set_data_from_numpy(x)
    seen = _seen(grpc.infer("pipeline", [tensor], parameters={"custom": "g", "ratio": 0.5}))
    assert {k: seen["parameters"][k] for k in ("custom", "ratio")} == {"custom": "g", "ratio": 0.5}  # type: ignore[index]


def test_an_optional_input_left_out_is_left_out_of_the_step(server: Server) -> None:
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = httpclient.InferInput("X", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    result = http.infer("pipeline", [x])
    assert _seen(result)["inputs"] == ["X"]
    assert result.as_numpy("Y").tolist() == [1.0, 2.0]
    optional = httpclient.InferInput("OPT", [2], "FP32")
    optional.set_data_from_numpy(np.array([3.0, 4.0], dtype=np.float32))
    assert _seen(http.infer("pipeline", [x, optional]))["inputs"] == ["OPT", "X"]


def test_each_ensemble_request_counts_one_execution_of_its_batch_size(server: Server) -> None:
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def counts() -> tuple[int, int, int]:
        (stats,) = grpc.get_inference_statistics("pipeline").model_stats
        batch = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
        return stats.execution_count, stats.inference_count, batch.get(1, 0)

    before = counts()
    x = grpcclient.InferInput("X", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    for _ in range(2):
        grpc.infer("pipeline", [x])
    # a model without batching: each request is one inference, in batch size 1, as Triton reports
    assert [after - then for after, then in zip(counts(), before, strict=True)] == [2, 2, 2]
