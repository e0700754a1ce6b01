"""The ONNX signature read from the file's protobuf is what onnxruntime itself reports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from server.backends.onnx_signature import _read_protobuf, _read_with_session, read_onnx_signature
from server.protocol.errors import TritonError

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"


def _old_style_model(path: Path) -> Path:
    """An initializer also listed as a graph input (as exporters before IR 4 wrote them), a symbolic
    batch dimension, an unknown dimension, strings, and an output of a sequence type."""
    weight = numpy_helper.from_array(np.ones((4,), np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["X", "W"], ["Y"]),
            helper.make_node("Identity", ["S"], ["T"]),
            helper.make_node("SequenceConstruct", ["X"], ["Q"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("S", TensorProto.STRING, [None]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("T", TensorProto.STRING, [None]),
            helper.make_tensor_sequence_value_info("Q", TensorProto.FLOAT, None),
        ],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("name", ["simple", "digits_onnx", "densenet_onnx"])
def test_example_models_read_as_onnxruntime_reports_them(name: str) -> None:
    model_file = REPOSITORY / name / "1" / "model.onnx"
    assert _read_protobuf(model_file) == _read_with_session(model_file)


def test_initializer_inputs_symbolic_dims_and_non_tensor_types(tmp_path: Path) -> None:
    model_file = _old_style_model(tmp_path / "model.onnx")
    signature = _read_protobuf(model_file)
    assert signature == _read_with_session(model_file)
    assert signature is not None
    assert [t.name for t in signature.inputs] == ["X", "S"]  # W is an initializer, not an input
    assert signature.inputs[0].shape == (-1, 4)
    assert signature.outputs[2].data_type == "TYPE_INVALID"


def test_a_file_that_is_not_onnx_gets_onnxruntimes_reason(tmp_path: Path) -> None:
    model_file = tmp_path / "model.onnx"
    model_file.write_bytes(b"not an onnx file")
    with pytest.raises(TritonError, match=r"cannot read ONNX model .*Protobuf parsing failed"):
        read_onnx_signature(model_file)
