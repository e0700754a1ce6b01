"""The one small interface every backend implements, and the dispatch from a config to a backend.

Two shapes of model: framework models (onnxruntime, pytorch, tensorrt) take merged tensors, so the
scheduler merges requests into one batch and splits the outputs; python models take the list of
requests as Triton hands it to `TritonPythonModel.execute`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    import numpy as np
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.errors import TritonError as Error
    from server.protocol.types import InferenceRequest, InferenceResponse


@dataclass(frozen=True)
class InstanceSpec:
    """One model instance from instance_group: its name, kind and device."""

    name: str  # Triton's instance names: <group name>_<index>
    kind: str  # KIND_CPU | KIND_GPU | KIND_MODEL
    device_id: int = 0


@dataclass(frozen=True)
class ModelContext:
    """What a backend needs to load one version of a model."""

    config: ModelConfig  # completed
    model_dir: Path
    version: int
    repository: Path

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.version)

    @property
    def model_file(self) -> Path:
        return self.version_dir / self.config.default_model_filename


class TensorModel(ABC):
    """A loaded instance of a framework model: merged input tensors in, output tensors out."""

    @abstractmethod
    def execute(
        self, inputs: dict[str, np.ndarray[Any, Any]], output_names: list[str]
    ) -> dict[str, np.ndarray[Any, Any]]: ...

    def unload(self) -> None:  # noqa: B027 - most backends free everything when dropped
        """Release what the instance holds (sessions, modules, device memory)."""


class RequestModel(ABC):
    """A loaded instance that takes the requests themselves (python models)."""

    @abstractmethod
    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse | Error]: ...

    def unload(self) -> None:  # noqa: B027
        """Call the model's finalize and release what it holds."""


def load_instance(context: ModelContext, instance: InstanceSpec) -> TensorModel | RequestModel:
    """Load one instance with the backend the config names (imports the framework only now)."""
    backend = context.config.backend
    if instance.kind == "KIND_GPU":
        from server.backends.devices import require_gpu

        require_gpu(context.config.name, backend)
    if backend == "onnxruntime":
        from server.backends.onnxruntime import OnnxModel

        return OnnxModel(context, instance)
    if backend == "pytorch":
        from server.backends.pytorch import TorchScriptModel

        return TorchScriptModel(context, instance)
    if backend == "python":
        from server.backends.python import placement

        return placement.load(context, instance)
    if backend == "tensorrt":
        from server.backends.tensorrt import TensorRTModel

        return TensorRTModel(context, instance)
    raise TritonError(
        ErrorCode.UNAVAILABLE,
        f"backend '{backend}' of model '{context.config.name}' is not served by tcli "
        "(it serves onnxruntime, pytorch, python, tensorrt and ensembles)",
    )
