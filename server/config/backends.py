"""What Triton knows about platforms and backends: names, default model files, default instance counts.

The backends tcli serves come from the backend table (server/backends/table.py); this module adds
only what Triton knows of backends tcli does not serve, so that their configs are recognised and
reported as Triton's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.backends import table

ENSEMBLE = "ensemble"


@dataclass(frozen=True)
class PlatformInfo:
    backend: str
    default_model_filename: str


# core:src/constants.h: platform -> backend and default model file
PLATFORMS: dict[str, PlatformInfo] = {
    **{
        platform.name: PlatformInfo(entry.name, platform.model_file)
        for entry in table.BUILT_IN
        for platform in entry.platforms
    },
    "tensorflow_graphdef": PlatformInfo("tensorflow", "model.graphdef"),
    "tensorflow_savedmodel": PlatformInfo("tensorflow", "model.savedmodel"),
    ENSEMBLE: PlatformInfo("", ""),
}

# the platform Triton fills in when a config names only the backend
BACKEND_PLATFORMS: dict[str, str] = {
    entry.name: entry.platforms[0].name for entry in table.BUILT_IN if entry.platforms
}

_BACKEND_FILES: dict[str, str] = {
    **{entry.name: entry.model_file for entry in table.BUILT_IN},
    "openvino": "model.xml",
    "dali": "model.dali",
    "tensorflow": "model.savedmodel",
}

# backends tcli does not serve are Triton's own, and are reported as such
KNOWN_BACKENDS = frozenset(_BACKEND_FILES) | {"fil", "vllm", "tensorrtllm", "identity", "repeat", "square"}

# the files Triton looks for, in this order, to infer the backend of a config that names none
_INFERRED_FROM: tuple[str, ...] = ("model.plan", "model.onnx", "model.pt", "model.py")

# Triton's backends tcli does not serve whose CPU instance groups default to two instances
# (core SetDefaultInstanceCount; the table says it for the ones tcli serves)
_TWO_CPU_INSTANCES = frozenset({"tensorflow", "openvino"})


def default_model_filename(platform: str, backend: str) -> str:
    if platform in PLATFORMS:
        return PLATFORMS[platform].default_model_filename
    # a backend tcli does not know (added by the user) finds its own files: none is required
    return _BACKEND_FILES.get(backend, "")


def backend_from_files(file_names: set[str]) -> str | None:
    for file_name in _INFERRED_FROM:
        if file_name in file_names:
            return next((entry.name for entry in table.BUILT_IN if entry.model_file == file_name), None)
    return None


def default_cpu_instances(backend: str) -> int:
    """Instances of a KIND_CPU instance group that sets no count."""
    entry = table.built_in(backend)
    if entry is not None:
        return entry.cpu_instances
    return 2 if backend in _TWO_CPU_INSTANCES else 1
