"""Unloading a model returns its memory: a python model holding 300 MB, an onnxruntime model and a
TorchScript model of 120 MB each are loaded and unloaded, and the server's resident memory goes back
down."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import psutil

from server.repository.manager import ControlMode, ModelManager
from tests.integration.serve_process import ServeProcess
from tests.torch_needed import import_torch

BIG_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(300 * 2**20 // 8)  # 300 MB, touched, so it is resident

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""

# in the server process: there, unloading must give the memory back (an instance process just exits)
CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }
"""


def resident_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def test_unload_returns_the_models_memory(tmp_path: Path) -> None:
    (tmp_path / "big" / "1").mkdir(parents=True)
    (tmp_path / "big" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "big" / "1" / "model.py").write_text(BIG_MODEL)
    manager = ModelManager([tmp_path], ControlMode.EXPLICIT)
    try:
        before = resident_mb()
        manager.load("big")
        loaded = resident_mb()
        assert loaded - before > 250, (before, loaded)
        manager.unload("big")
        deadline = time.monotonic() + 30  # the old runners drain and unload on a background thread
        after = resident_mb()
        while after - before > 50 and time.monotonic() < deadline:
            time.sleep(0.1)
            after = resident_mb()
        assert after - before < 50, (before, loaded, after)
    finally:
        manager.shutdown()


# Framework models: weights as many tensors of a few hundred KB, as real models have them (glibc keeps
# freed allocations of that size for the process unless the server trims its heaps), served by
# `tcli serve` in its own process so that only the server's memory is measured.
TENSORS = 256
TENSOR_FLOATS = 120 * 2**20 // 4 // TENSORS  # 120 MB in all

ONNX_CONFIG = """
platform: "onnxruntime_onnx"
input [ { name: "IDX" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

TORCH_CONFIG = """
platform: "pytorch_libtorch"
input [ { name: "INPUT__0" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def write_onnx_model(repository: Path, name: str, tensors: int, floats: int) -> None:
    """Y = sum of W_i[IDX]: every weight is used by a node that depends on the input, so onnxruntime
    cannot fold any of them away."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.full(floats, i, np.float32), f"W{i}") for i in range(tensors)]
    nodes = [helper.make_node("Gather", [f"W{i}", "IDX"], [f"G{i}"]) for i in range(tensors)]
    nodes.append(helper.make_node("Sum", [f"G{i}" for i in range(tensors)], ["Y"]))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("IDX", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # one the installed onnxruntime reads
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(ONNX_CONFIG)
    onnx.save(model, repository / name / "1" / "model.onnx")


def write_torchscript_model(repository: Path, name: str, tensors: int, floats: int) -> None:
    """OUTPUT__0 = sum of w_i[INPUT__0] over `tensors` parameters."""
    import torch

    class Part(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(floats), requires_grad=False)

        def forward(self, index: torch.Tensor) -> torch.Tensor:
            return self.w[index]

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = torch.nn.ModuleList([Part() for _ in range(tensors)])

        def forward(self, index: torch.Tensor) -> torch.Tensor:
            total = torch.zeros(1)
            for part in self.parts:
                total = total + part(index)
            return total

    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(TORCH_CONFIG)
    torch.jit.save(torch.jit.script(Model()), str(repository / name / "1" / "model.pt"))


def check_unload_returns_memory(repository: Path, small: str, big: str, input_name: str) -> None:
    """Explicit mode: load and run `small` first (the framework's libraries and thread pools start then
    and stay), then load `big`, run it, unload it: at least 90% of what its load added goes back."""
    import numpy as np
    import tritonclient.http as httpclient

    served = ServeProcess(str(repository), "--model-control-mode", "explicit")
    try:
        client = httpclient.InferenceServerClient(served.http_url)
        index = httpclient.InferInput(input_name, [1], "INT64")
        index.set_data_from_numpy(np.array([3], np.int64))
        client.load_model(small)
        client.infer(small, [index])  # the framework's thread pools start now, not with `big`
        before = served.resident_mb()
        client.load_model(big)
        for _ in range(5):
            client.infer(big, [index])
        loaded = served.resident_mb()
        assert loaded - before > 100, (before, loaded)
        client.unload_model(big)
        deadline = time.monotonic() + 30  # the old runners drain and unload on a background thread
        after = served.resident_mb()
        while loaded - after < 0.9 * (loaded - before) and time.monotonic() < deadline:
            time.sleep(0.2)
            after = served.resident_mb()
        assert loaded - after >= 0.9 * (loaded - before), (before, loaded, after)
        client.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
    finally:
        assert served.stop() == 0


def test_unloading_an_onnx_model_returns_its_memory(tmp_path: Path) -> None:
    write_onnx_model(tmp_path, "small", 1, 16)
    write_onnx_model(tmp_path, "big", TENSORS, TENSOR_FLOATS)
    check_unload_returns_memory(tmp_path, "small", "big", "IDX")


def test_unloading_a_torchscript_model_returns_its_memory(tmp_path: Path) -> None:
    import_torch()
    write_torchscript_model(tmp_path, "small", 1, 16)
    write_torchscript_model(tmp_path, "big", TENSORS, TENSOR_FLOATS)
    check_unload_returns_memory(tmp_path, "small", "big", "INPUT__0")
