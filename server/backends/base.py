"""The one small interface every backend implements: what a backend is given to load a model
(`ModelContext`, `InstanceSpec`) and the two shapes of loaded instance. The table that picks a backend
for a config lives above the backends, in registry.py.

Two shapes of model: framework models (onnxruntime, pytorch, tensorrt) take merged tensors, so the
scheduler merges requests into one batch and splits the outputs; python models take the list of
requests as Triton hands it to `TritonPythonModel.execute`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def instance_specs(config: ModelConfig) -> list[InstanceSpec]:
    """instance_group count x kind (x gpus) -> the instances to create, named <group>_<index>."""
    specs = []
    for group in config.instance_group:
        kind = group.Kind.Name(group.kind)
        # a GPU group without gpus (none visible) still yields instances, so their load fails clearly
        devices = (list(group.gpus) or [0]) if kind == "KIND_GPU" else [0]
        index = 0
        for device in devices:
            for _ in range(max(group.count, 1)):
                specs.append(InstanceSpec(f"{group.name}_{index}", kind, device))
                index += 1
    return specs


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
