"""The backend table: which backend loads a model, by the name its config gives.

It sits above the backends it names, so that each backend imports only the shared interface in
base.py and is imported here, when a model needs it (a framework is imported only then). Every class
named here implements a contract of base.py (TensorModel, RequestModel or LoopRequestModel): mypy
rejects creating one that misses a method, and tests/unit/test_backend_contracts.py checks each.
"""

from __future__ import annotations

from server.backends.base import InstanceSpec, ModelContext, ModelInstance, RequestModel, TensorModel
from server.protocol.errors import ErrorCode, TritonError

# the backends tcli serves (ensembles are no backend: the scheduling layer runs their steps)
BACKENDS = ("onnxruntime", "pytorch", "python", "tensorrt")


def instance_classes(backend: str) -> tuple[type[ModelInstance], ...]:
    """The classes whose instances `backend` loads (imports the backend's module, not its framework)."""
    if backend == "onnxruntime":
        from server.backends.onnxruntime import OnnxModel

        return (OnnxModel,)
    if backend == "pytorch":
        from server.backends.pytorch import TorchScriptModel

        return (TorchScriptModel,)
    if backend == "python":
        from server.backends.python.host import PythonModel
        from server.backends.python.process_host import ProcessModel

        return (PythonModel, ProcessModel)
    if backend == "tensorrt":
        from server.backends.tensorrt import TensorRTModel

        return (TensorRTModel,)
    raise KeyError(backend)


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
