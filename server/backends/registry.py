"""The backend table: which backend loads a model, by the name its config gives.

It sits above the backends it names, so that each backend imports only the shared interface in
base.py and is imported here, when a model needs it (a framework is imported only then).
"""

from __future__ import annotations

from server.backends.base import InstanceSpec, ModelContext, RequestModel, TensorModel
from server.protocol.errors import ErrorCode, TritonError


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
