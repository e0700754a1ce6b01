"""What Triton knows about platforms and backends: names, default model files, and which tcli serves."""

from __future__ import annotations

from dataclasses import dataclass

ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class PlatformInfo:
    backend: str
    default_model_filename: str


# core:src/constants.h: platform -> backend and default model file
PLATFORMS: dict[str, PlatformInfo] = {
    "tensorrt_plan": PlatformInfo("tensorrt", "model.plan"),
    "onnxruntime_onnx": PlatformInfo("onnxruntime", "model.onnx"),
    "pytorch_libtorch": PlatformInfo("pytorch", "model.pt"),
    "libtorch": PlatformInfo("pytorch", "model.pt"),
    "torch_aoti": PlatformInfo("pytorch", "model.pt2"),
    "tensorflow_graphdef": PlatformInfo("tensorflow", "model.graphdef"),
    "tensorflow_savedmodel": PlatformInfo("tensorflow", "model.savedmodel"),
    ENSEMBLE: PlatformInfo("", ""),
}

# the platform Triton fills in when a config names only the backend
BACKEND_PLATFORMS: dict[str, str] = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}

_BACKEND_FILES: dict[str, str] = {
    "python": "model.py",
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "openvino": "model.xml",
    "dali": "model.dali",
    "tensorflow": "model.savedmodel",
}

# the backends tcli can serve; others are Triton's own and are reported as such
SERVED_BACKENDS = frozenset({"onnxruntime", "pytorch", "python", "tensorrt"})
KNOWN_BACKENDS = frozenset(_BACKEND_FILES) | {"fil", "vllm", "tensorrtllm", "identity", "repeat", "square"}

# file in a version folder -> the backend Triton infers from it when the config names none
_FILE_BACKENDS: tuple[tuple[str, str], ...] = (
    ("model.plan", "tensorrt"),
    ("model.onnx", "onnxruntime"),
    ("model.pt", "pytorch"),
    ("model.py", "python"),
)


def default_model_filename(platform: str, backend: str) -> str:
    if platform in PLATFORMS:
        return PLATFORMS[platform].default_model_filename
    # a backend tcli does not know (added by the user) finds its own files: none is required
    return _BACKEND_FILES.get(backend, "")


def backend_from_files(file_names: set[str]) -> str | None:
    for file_name, backend in _FILE_BACKENDS:
        if file_name in file_names:
            return backend
    return None
