"""The backend table: which backend loads a model, by the name its config gives.

It sits above the backends it names, so that each backend imports only the shared interface in
base.py and is imported here, when a model needs it (a framework is imported only then). Every class
named here implements a contract of base.py (TensorModel, RequestModel or LoopRequestModel): mypy
rejects creating one that misses a method, and tests/unit/test_backend_contracts.py checks each.
Backends users add (a Python-based backend in --backend-directory, an installed package's entry
point) are found by locate.py, which also words a backend found nowhere.
"""

from __future__ import annotations

from dataclasses import replace

from server.backends.base import InstanceSpec, ModelContext, ModelInstance, RequestModel, TensorModel
from server.backends.locate import BUILT_IN, locate_backend

# the backends tcli serves (ensembles are no backend: the scheduling layer runs their steps)
BACKENDS = BUILT_IN


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
    config = context.config
    backend = config.backend
    located = locate_backend(backend, config.runtime, context.backend_directory, config.name)
    if instance.kind == "KIND_GPU":
        from server.backends.devices import require_gpu

        require_gpu(config.name, backend)
    if located.python_file is not None:  # a Python-based backend: tcli's python backend runs its file
        from server.backends.python import placement

        return placement.load(replace(context, runtime_file=located.python_file), instance)
    if located.entry_point is not None:
        from server.backends.entry_point import load_from_entry_point

        return load_from_entry_point(located.entry_point, context, instance)
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
    raise AssertionError(f"built-in backend '{backend}' has no loader")  # BUILT_IN names one more than here
