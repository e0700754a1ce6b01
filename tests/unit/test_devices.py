"""GPU paths cannot run here (no GPU): the provider choice is tested as a pure function, and GPU
instances and TensorRT plans fail to load with a reason a person can act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.backends.devices import onnx_providers, visible_gpu_count
from server.protocol.errors import TritonError
from server.repository.manager import ControlMode, ModelManager
from tests.repo_builder import ONNX_CONFIG, add_model, add_onnx_simple


def test_cpu_instances_use_the_cpu_provider() -> None:
    assert onnx_providers("KIND_CPU", 0, ["CPUExecutionProvider"], []) == ["CPUExecutionProvider"]


def test_gpu_instances_prefer_tensorrt_when_asked_then_cuda_on_their_device() -> None:
    available = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert onnx_providers("KIND_GPU", 1, available, ["tensorrt"]) == [
        ("TensorrtExecutionProvider", {"device_id": 1}),
        ("CUDAExecutionProvider", {"device_id": 1}),
        "CPUExecutionProvider",
    ]
    assert onnx_providers("KIND_GPU", 0, available, []) == [
        ("CUDAExecutionProvider", {"device_id": 0}),
        "CPUExecutionProvider",
    ]


def test_gpu_instance_without_cuda_provider_is_refused() -> None:
    with pytest.raises(TritonError, match=r"CUDAExecutionProvider: pip install 'tcli\[gpu\]'"):
        onnx_providers("KIND_GPU", 0, ["CPUExecutionProvider"], [])


@pytest.mark.skipif(visible_gpu_count() > 0, reason="checks the no-GPU path")
def test_gpu_instance_group_is_unavailable_without_a_gpu(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config=ONNX_CONFIG + "instance_group [ { kind: KIND_GPU } ]\n")
    add_model(
        tmp_path,
        "plan",
        'platform: "tensorrt_plan"\nmax_batch_size: 0\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\noutput [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
        {"1/model.plan": b"not a real engine"},
    )
    manager = ModelManager([tmp_path], ControlMode.NONE)
    manager.load_startup()
    try:
        rows = {row["name"]: row for row in manager.index()}
        assert rows["simple"]["state"] == "UNAVAILABLE"
        assert (
            "instance group KIND_GPU requested for model simple but no GPU is visible"
            in rows["simple"]["reason"]
        )
        assert rows["plan"]["state"] == "UNAVAILABLE"
        assert "TensorRT plans run only on a GPU, and no GPU is visible" in rows["plan"]["reason"]
    finally:
        manager.shutdown()
