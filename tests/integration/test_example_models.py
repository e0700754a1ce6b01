"""The example repository's model files agree with their configs and compute what MODELS.md says.

Run with the real runtimes (onnxruntime, torch CPU), no server involved.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.torch_needed import import_torch

REPO = Path(__file__).resolve().parents[2] / "model_repository"
MODELS = [
    "simple",
    "add_sub",
    "simple_identity",
    "simple_sequence",
    "simple_dyna_sequence",
    "repeat_int32",
    "digits_onnx",
    "digits_torchscript",
    "digits_preprocess",
    "digits_ensemble",
    "densenet_onnx",
]
ONNX_MODELS = ["simple", "digits_onnx", "densenet_onnx"]
ORT_TYPES = {
    "tensor(float)": model_config_pb2.TYPE_FP32,
    "tensor(int32)": model_config_pb2.TYPE_INT32,
}


def load_config(model: str) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse((REPO / model / "config.pbtxt").read_text(), config)
    return config


def full_shape(config: model_config_pb2.ModelConfig, tensor: Any) -> list[int]:
    """The shape the model file must have: reshape (if any) else dims, after the batch dim."""
    shape = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    return [-1, *shape] if config.max_batch_size > 0 else shape


def ort_shape(shape: list[Any]) -> list[int]:
    return [dim if isinstance(dim, int) else -1 for dim in shape]


@pytest.fixture(scope="module")
def build_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_models", REPO / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_models"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits(build_models: ModuleType) -> tuple[np.ndarray, ...]:
    return build_models.digits_split()


def test_repository_holds_exactly_the_documented_models() -> None:
    folders = sorted(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert folders == sorted(MODELS)


@pytest.mark.parametrize("model", MODELS)
def test_config_parses_and_names_its_folder(model: str) -> None:
    config = load_config(model)
    assert config.name == model
    assert (REPO / model / "1").is_dir()


@pytest.mark.parametrize("model", ONNX_MODELS)
def test_onnx_file_matches_config(model: str) -> None:
    config = load_config(model)
    session = ort.InferenceSession(str(REPO / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    for declared, actual in ((config.input, session.get_inputs()), (config.output, session.get_outputs())):
        assert [t.name for t in declared] == [a.name for a in actual]
        for tensor, found in zip(declared, actual, strict=True):
            assert ORT_TYPES[found.type] == tensor.data_type, tensor.name
            assert ort_shape(found.shape) == full_shape(config, tensor), tensor.name


def test_simple_adds_and_subtracts() -> None:
    session = ort.InferenceSession(
        str(REPO / "simple" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    out0, out1 = session.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)
    assert out0.dtype == np.int32


def test_digits_onnx_accuracy(digits: tuple[np.ndarray, ...], build_models: ModuleType) -> None:
    _, x_test, _, y_test = digits
    session = ort.InferenceSession(
        str(REPO / "digits_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (probabilities,) = session.run(["probabilities"], {"input": x_test})
    assert probabilities.shape == (len(x_test), 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert (probabilities.argmax(axis=1) == y_test).mean() >= 0.90
    # what digits_ensemble computes: uint8 RAW_IMAGE, cast to FP32 with a channel dim
    raw = build_models.digits_raw_uint8(x_test)
    assert raw.dtype == np.uint8 and raw.shape == (len(x_test), 8, 8)
    (from_raw,) = session.run(["probabilities"], {"input": raw.astype(np.float32)[:, np.newaxis]})
    assert (from_raw.argmax(axis=1) == y_test).mean() >= 0.90


def test_digits_torchscript_accuracy_and_agreement(digits: tuple[np.ndarray, ...]) -> None:
    torch = import_torch()
    _, x_test, _, y_test = digits
    module = torch.jit.load(str(REPO / "digits_torchscript" / "1" / "model.pt"), map_location="cpu")
    with torch.no_grad():
        probabilities = module(torch.from_numpy(x_test)).numpy()
    assert probabilities.shape == (len(x_test), 10) and probabilities.dtype == np.float32
    assert (probabilities.argmax(axis=1) == y_test).mean() >= 0.90
    session = ort.InferenceSession(
        str(REPO / "digits_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (from_onnx,) = session.run(["probabilities"], {"input": x_test})
    np.testing.assert_allclose(probabilities, from_onnx, atol=1e-5)


def test_digits_torchscript_config_follows_pytorch_naming() -> None:
    config = load_config("digits_torchscript")
    assert config.platform == "pytorch_libtorch"
    assert [t.name for t in config.input] == ["INPUT__0"]
    assert [t.name for t in config.output] == ["OUTPUT__0"]
    assert full_shape(config, config.input[0]) == [-1, 1, 8, 8]
    assert full_shape(config, config.output[0]) == [-1, 10]


def test_densenet_has_triton_names_and_shapes() -> None:
    session = ort.InferenceSession(
        str(REPO / "densenet_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    image = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
    (scores,) = session.run(["fc6_1"], {"data_0": image})
    assert scores.shape == (1, 1000, 1, 1) and scores.dtype == np.float32
    # synthetic weights (MODELS.md): every class gets the same score
    assert np.ptp(scores) == 0.0


def test_label_files() -> None:
    labels = (REPO / "densenet_onnx" / "densenet_labels.txt").read_text().splitlines()
    assert len(labels) == 1000
    assert labels[0] == "TENCH" and labels[504] == "COFFEE MUG"
    assert all(label and label == label.upper() and label.strip() == label for label in labels)
    for model in ("digits_onnx", "digits_torchscript", "digits_ensemble"):
        config = load_config(model)
        assert config.output[0].label_filename == "digits_labels.txt"
        text = (REPO / model / "digits_labels.txt").read_text()
        assert text.splitlines() == [str(digit) for digit in range(10)]


def test_ensemble_maps_agree_in_type_and_shape() -> None:
    ensemble = load_config("digits_ensemble")
    tensors = {t.name: (t.data_type, list(t.dims)) for t in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        composing = load_config(step.model_name)
        assert composing.max_batch_size >= ensemble.max_batch_size
        inputs = {t.name: (t.data_type, list(t.dims)) for t in composing.input}
        outputs = {t.name: (t.data_type, list(t.dims)) for t in composing.output}
        assert set(step.input_map) == set(inputs)
        for model_input, ensemble_tensor in step.input_map.items():
            assert tensors[ensemble_tensor] == inputs[model_input], (step.model_name, model_input)
        for model_output, ensemble_tensor in step.output_map.items():
            tensors[ensemble_tensor] = outputs[model_output]
    for output in ensemble.output:
        assert tensors[output.name] == (output.data_type, list(output.dims))


def test_build_script_reports_committed_files_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "build_models.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stale" not in result.stdout
