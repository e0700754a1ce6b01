"""The dynamic batcher batches what Triton batches: requests that ask for different outputs, and requests
of different shapes on an input with `allow_ragged_batch`, share one execution.

Batch formation is made deterministic with Triton's own test knob, TRITONSERVER_DELAY_SCHEDULER=2:
each model's first batch waits until two requests are queued, so two concurrent requests can only run
apart when the batcher refuses to put them together. Every model copy here gets exactly those two
requests, and its statistics (inference_count 2, execution_count 1) say whether they shared an
execution. The python models run on tcli and on real Triton 2.51 with the same assertions; the ONNX
ones (built here with the onnx package) only on tcli.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess
from tests.reference import RealTriton, require_reference_triton
from tests.repo_builder import add_model, write_onnx_add_sub

PROTOCOLS = ("http", "grpc")

OUTPUTS_PY = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                # the names this request asked for, counted: a batch's union would show as 2
                asked = request.requested_output_names()
                tensors = []
                if "OUTPUT0" in asked:
                    tensors.append(pb_utils.Tensor("OUTPUT0", a + len(asked)))
                if "OUTPUT1" in asked:
                    tensors.append(pb_utils.Tensor("OUTPUT1", a - len(asked)))
                responses.append(pb_utils.InferenceResponse(tensors))
            return responses
    """
)

OUTPUTS_PY_CONFIG = """
backend: "python"
max_batch_size: 8
dynamic_batching { }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

RAGGED_PY = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            # ragged requests reach a python model one by one, each with its own shape
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
                total = x.sum(axis=1, keepdims=True).astype(np.float32)
                together = np.full((x.shape[0], 1), len(requests), np.int32)
                responses.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("SUM", total), pb_utils.Tensor("TOGETHER", together)]
                    )
                )
            return responses
    """
)

RAGGED_PY_CONFIG = """
backend: "python"
max_batch_size: 8
dynamic_batching { }
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "TOGETHER" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

OUTPUTS_ONNX_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { }
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""

# the model gets INPUT as the 1-D concatenation of the batch and INDEX, where each request's
# elements end; SUM has one value per request, DOUBLED is scattered back in each request's shape
RAGGED_ONNX_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { }
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } },
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] }
]
batch_output [
  { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" }
]
"""


def write_ragged_sum_onnx(path: Path) -> None:
    """SUM[i] = the sum of request i's elements of INPUT, found from INDEX (accumulated element
    counts): gather the running total of [0, INPUT...] at [0, INDEX...] and take differences."""
    import onnx
    from onnx import TensorProto, helper

    def constant(name: str, dtype: int, values: list[Any]) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=helper.make_tensor(name, dtype, [len(values)], values)
        )

    nodes = [
        constant("zero_f", TensorProto.FLOAT, [0.0]),
        constant("zero_i", TensorProto.INT32, [0]),
        constant("axis", TensorProto.INT64, [0]),
        constant("two", TensorProto.FLOAT, [2.0]),
        constant("one", TensorProto.INT64, [1]),
        constant("start", TensorProto.INT64, [0]),
        constant("last", TensorProto.INT64, [-1]),
        constant("end", TensorProto.INT64, [2**62]),
        helper.make_node("Concat", ["zero_f", "INPUT"], ["padded"], axis=0),
        helper.make_node("CumSum", ["padded", "axis"], ["running"]),
        helper.make_node("Concat", ["zero_i", "INDEX"], ["ends"], axis=0),
        helper.make_node("Gather", ["running", "ends"], ["totals"], axis=0),
        helper.make_node("Slice", ["totals", "one", "end"], ["upper"]),
        helper.make_node("Slice", ["totals", "start", "last"], ["lower"]),
        helper.make_node("Sub", ["upper", "lower"], ["SUM"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ragged_sum",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("INDEX", TensorProto.INT32, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["batch"]),
            helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["n"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def python_models(repo: Path) -> Path:
    """One copy of each python model per protocol: the delay knob holds only a model's first batch."""
    for protocol in PROTOCOLS:
        add_model(repo, f"outputs_py_{protocol}", OUTPUTS_PY_CONFIG, {"1/model.py": OUTPUTS_PY})
        add_model(repo, f"ragged_py_{protocol}", RAGGED_PY_CONFIG, {"1/model.py": RAGGED_PY})
    return repo


def onnx_models(repo: Path) -> Path:
    for protocol in PROTOCOLS:
        folder = add_model(repo, f"outputs_onnx_{protocol}", OUTPUTS_ONNX_CONFIG)
        write_onnx_add_sub(folder / "1" / "model.onnx")
        folder = add_model(repo, f"ragged_onnx_{protocol}", RAGGED_ONNX_CONFIG)
        write_ragged_sum_onnx(folder / "1" / "model.onnx")
    return repo


Client = Callable[[], Any]


class Target:
    """A running server's two addresses."""

    def __init__(self, http: str, grpc: str) -> None:
        self.http, self.grpc = http, grpc

    def client(self, protocol: str) -> Any:
        return (
            httpclient.InferenceServerClient(self.http)
            if protocol == "http"
            else grpcclient.InferenceServerClient(self.grpc)
        )


@pytest.fixture(scope="module")
def tcli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    repo = tmp_path_factory.mktemp("models")
    onnx_models(python_models(repo))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
        server = ServeProcess("--model-repository", str(repo))
    try:
        yield Target(server.http_url, server.grpc_url)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    binary = require_reference_triton()
    repo = python_models(tmp_path_factory.mktemp("triton_models"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
        server = RealTriton(binary, repo).start()
    try:
        yield Target(server.http_address, server.grpc_address)
    finally:
        server.stop()


def infer_together(
    target: Target, protocol: str, model: str, calls: list[tuple[list[Any], list[str]]]
) -> list[Any]:
    """Send every (inputs, requested output names) at once, each from a client of its own thread."""
    module = httpclient if protocol == "http" else grpcclient

    def one(call: tuple[list[Any], list[str]]) -> Any:
        inputs, outputs = call
        client = target.client(protocol)
        try:
            return client.infer(model, inputs, outputs=[module.InferRequestedOutput(n) for n in outputs])
        finally:
            client.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, calls, timeout=120))


def tensor(protocol: str, name: str, data: np.ndarray[Any, Any], datatype: str) -> Any:
    module = httpclient if protocol == "http" else grpcclient
    made = module.InferInput(name, list(data.shape), datatype)
    made.set_data_from_numpy(data)
    return made


def counts(target: Target, protocol: str, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of the model's only version."""
    client = target.client(protocol)
    try:
        stats = client.get_inference_statistics(model)
    finally:
        client.close()
    if protocol == "http":
        entry = stats["model_stats"][0]
        return int(entry["inference_count"]), int(entry["execution_count"])
    entry = stats.model_stats[0]
    return int(entry.inference_count), int(entry.execution_count)


def check_python_outputs(target: Target, protocol: str) -> None:
    model = f"outputs_py_{protocol}"
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    first, second = infer_together(
        target,
        protocol,
        model,
        [
            ([tensor(protocol, "INPUT0", a, "FP32")], ["OUTPUT0"]),
            ([tensor(protocol, "INPUT0", a, "FP32")], ["OUTPUT1"]),
        ],
    )
    assert counts(target, protocol, model) == (2, 1)  # one execution for both
    # each request saw only its own requested output name (a + 1, a - 1) and got only that output
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), a + 1)
    assert first.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(second.as_numpy("OUTPUT1"), a - 1)
    assert second.as_numpy("OUTPUT0") is None


def check_python_ragged(target: Target, protocol: str) -> None:
    model = f"ragged_py_{protocol}"
    short = np.array([[1, 2]], np.float32)
    long = np.array([[1, 2, 3, 4, 5]], np.float32)
    results = infer_together(
        target,
        protocol,
        model,
        [([tensor(protocol, "INPUT", x, "FP32")], ["SUM", "TOGETHER"]) for x in (short, long)],
    )
    assert counts(target, protocol, model) == (2, 1)
    for x, result in zip((short, long), results, strict=True):
        np.testing.assert_array_equal(result.as_numpy("SUM"), [[x.sum()]])
        # one execute() call with both requests, each with its own shape
        np.testing.assert_array_equal(result.as_numpy("TOGETHER"), [[2]])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_python_requests_asking_for_different_outputs_share_an_execution(tcli: Target, protocol: str) -> None:
    check_python_outputs(tcli, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_python_requests_of_different_shapes_on_a_ragged_input_share_an_execution(
    tcli: Target, protocol: str
) -> None:
    check_python_ragged(tcli, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_real_triton_batches_the_same_python_requests(triton: Target, protocol: str) -> None:
    check_python_outputs(triton, protocol)
    check_python_ragged(triton, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_onnx_requests_asking_for_different_outputs_share_an_execution(tcli: Target, protocol: str) -> None:
    model = f"outputs_onnx_{protocol}"
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, np.int32)

    def inputs() -> list[Any]:
        return [tensor(protocol, "INPUT0", a, "INT32"), tensor(protocol, "INPUT1", b, "INT32")]

    first, second = infer_together(tcli, protocol, model, [(inputs(), ["OUTPUT0"]), (inputs(), ["OUTPUT1"])])
    assert counts(tcli, protocol, model) == (2, 1)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), a + b)
    assert first.as_numpy("OUTPUT1") is None
    np.testing.assert_array_equal(second.as_numpy("OUTPUT1"), a - b)
    assert second.as_numpy("OUTPUT0") is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_onnx_ragged_requests_share_an_execution_with_batch_input_and_batch_output(
    tcli: Target, protocol: str
) -> None:
    model = f"ragged_onnx_{protocol}"
    short = np.array([[1, 2, 3]], np.float32)
    long = np.array([[10, 20, 30, 40, 50]], np.float32)
    results = infer_together(
        tcli,
        protocol,
        model,
        [([tensor(protocol, "INPUT", x, "FP32")], ["SUM", "DOUBLED"]) for x in (short, long)],
    )
    assert counts(tcli, protocol, model) == (2, 1)
    for x, result in zip((short, long), results, strict=True):
        # SUM needs INDEX to be right: without it the model cannot tell the requests apart
        np.testing.assert_array_equal(result.as_numpy("SUM"), [[x.sum()]])
        # DOUBLED comes back in the request's own shape (BATCH_SCATTER_WITH_INPUT_SHAPE)
        np.testing.assert_array_equal(result.as_numpy("DOUBLED"), x * 2)
