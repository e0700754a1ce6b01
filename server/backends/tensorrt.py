"""TensorRT backend (`platform: "tensorrt_plan"`, model.plan). GPU only; TensorRT's libraries come from
NVIDIA's own package index, so without them a plan model is UNAVAILABLE with that reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from server.backends.base import InstanceSpec, ModelContext, ModelInstance, TensorModel
from server.backends.devices import visible_gpu_count
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import FileFindings


class TensorRTModel(TensorModel):
    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:
        if visible_gpu_count() == 0:
            raise TritonError(
                ErrorCode.UNAVAILABLE,
                f"model '{context.config.name}': TensorRT plans run only on a GPU, and no GPU is visible",
            )
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            raise TritonError(
                ErrorCode.UNAVAILABLE,
                f"model '{context.config.name}': TensorRT is not installed (pip install 'tcli[gpu]' with "
                "NVIDIA's package index configured)",
            ) from None
        raise TritonError(
            ErrorCode.UNSUPPORTED,
            f"model '{context.config.name}': executing TensorRT plans is not implemented yet",
        )

    def execute(
        self, inputs: dict[str, np.ndarray[Any, Any]], output_names: list[str]
    ) -> dict[str, np.ndarray[Any, Any]]:
        raise TritonError(ErrorCode.UNSUPPORTED, "TensorRT execution is not implemented")


def load(context: ModelContext, instance: InstanceSpec) -> TensorRTModel:
    return TensorRTModel(context, instance)


def instance_classes() -> tuple[type[ModelInstance], ...]:
    return (TensorRTModel,)


complete_config = None  # a plan's bindings are read only on a GPU, at load


def check_model_file(config: ModelConfig, model_file: Path, found: FileFindings) -> None:
    """A plan is read only by TensorRT on a GPU: say it was not checked."""
    found.warning(
        f"model '{config.name}': TensorRT plans are checked only when loaded on a GPU",
        "run tcli serve on a machine with a GPU and TensorRT to check this model",
    )
