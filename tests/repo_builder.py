"""Build small model repositories on disk for tests: real files, real ONNX graphs, real model.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

PYTHON_ADD_SUB = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.config = json.loads(args["model_config"])

        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                responses.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
                    )
                )
            return responses
    """
)

# the smallest model.py that real Triton loads
MINIMAL_MODEL = textwrap.dedent(
    """
    class TritonPythonModel:
        def execute(self, requests):
            return []
    """
)

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

ONNX_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def write_onnx_add_sub(path: Path, *, batch: bool = True, size: int = 16, elem_type: str = "INT32") -> Path:
    """An ONNX graph OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, first dim dynamic if `batch`."""
    import onnx
    from onnx import TensorProto, helper

    dtype = getattr(TensorProto, elem_type)
    shape: list[int | str] = ["batch", size] if batch else [size]
    inputs = [helper.make_tensor_value_info(n, dtype, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, dtype, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    graph = helper.make_graph(nodes, "add_sub", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def add_model(repo: Path, name: str, config: str | None, files: dict[str, str | bytes] | None = None) -> Path:
    """Create <repo>/<name>/ with config.pbtxt (unless None) and files given as relative path -> content."""
    folder = repo / name
    folder.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    for rel, content in (files or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return folder


def add_python_add_sub(repo: Path, name: str = "add_sub", config: str = ADD_SUB_CONFIG) -> Path:
    return add_model(repo, name, config, {"1/model.py": PYTHON_ADD_SUB})


def add_onnx_simple(repo: Path, name: str = "simple", config: str = ONNX_CONFIG, **onnx_args: object) -> Path:
    folder = add_model(repo, name, config)
    write_onnx_add_sub(folder / "1" / "model.onnx", **onnx_args)  # type: ignore[arg-type]
    return folder
