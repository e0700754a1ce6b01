"""GPU discovery and execution-provider selection. Machines here have no GPU, so these paths are
unit-tested as pure functions and fail with a clear message at load time."""

from __future__ import annotations

import functools
import os
import shutil

from server.protocol.errors import ErrorCode, TritonError


@functools.cache
def visible_gpu_count() -> int:
    """GPUs visible to this process: CUDA_VISIBLE_DEVICES when set, else the NVIDIA device nodes."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return len(ids) if _driver_present() else 0
    if not _driver_present():
        return 0
    return len([name for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit()])


def _driver_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None


def require_gpu(model: str, backend: str) -> None:
    if visible_gpu_count() == 0:
        raise TritonError(
            ErrorCode.UNAVAILABLE,
            f"instance group KIND_GPU requested for model {model} but no GPU is visible",
        )


def onnx_providers(kind: str, device_id: int, available: list[str], accelerators: list[str]) -> list[object]:
    """onnxruntime execution providers for an instance, most preferred first.

    KIND_GPU: TensorRT when the config asks for it (optimization.execution_accelerators) and the build
    has it, then CUDA on the instance's device, then CPU; a GPU instance without the CUDA provider fails.
    """
    if kind != "KIND_GPU":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise TritonError(
            ErrorCode.UNAVAILABLE,
            "KIND_GPU instance needs onnxruntime's CUDAExecutionProvider: pip install 'tcli[gpu]'",
        )
    providers: list[object] = []
    if "tensorrt" in accelerators and "TensorrtExecutionProvider" in available:
        providers.append(("TensorrtExecutionProvider", {"device_id": device_id}))
    providers.append(("CUDAExecutionProvider", {"device_id": device_id}))
    providers.append("CPUExecutionProvider")
    return providers
