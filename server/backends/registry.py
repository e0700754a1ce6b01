"""Loading: which backend loads a model's instances, by the name its config gives.

A built-in backend is loaded through its entry in table.py, whose module is imported when a model
needs it (a framework is imported only then). Every class a backend loads implements a contract of
base.py (TensorModel, RequestModel or LoopRequestModel): mypy rejects creating one that misses a
method, and tests/unit/test_backend_contracts.py checks each. Backends users add (a Python-based
backend in --backend-directory, an installed package's entry point) are found by locate.py, which
also words a backend found nowhere.
"""

from __future__ import annotations

import os
from dataclasses import replace

from server.backends import table
from server.backends.base import InstanceSpec, ModelContext, ModelInstance, RequestModel, TensorModel
from server.backends.locate import locate_backend


def instance_classes(backend: str) -> tuple[type[ModelInstance], ...]:
    """The classes whose instances `backend` loads (imports the backend's module, not its framework)."""
    entry = table.built_in(backend)
    if entry is None:
        raise KeyError(backend)
    return entry.module().instance_classes()


# Triton's switch for tests and debugging: "1" loads a model's instances side by side, anything else
# one after the other, whatever the backend supports
PARALLEL_OVERRIDE = "TRITON_PARALLEL_INSTANCE_LOADING"


def parallel_instances(context: ModelContext) -> bool:
    """Whether the model's instances may load side by side (their initialize runs together), as
    Triton's backends declare it: python (its instances are processes) and onnxruntime."""
    override = os.environ.get(PARALLEL_OVERRIDE, "")
    if override:
        return override == "1"
    config = context.config
    located = locate_backend(config.backend, config.runtime, context.backend_directory, config.name)
    if located.entry_point is not None:
        return False
    if located.python_file is not None or config.backend == "python":
        from server.backends.python import placement

        # instances in the server process import and initialize on its threads: one at a time
        return placement.own_process(context)
    entry = table.built_in(config.backend)
    return entry is not None and entry.parallel_instances


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
    entry = table.built_in(backend)
    if entry is None:  # locate_backend found it built in, so the table has it
        raise AssertionError(f"built-in backend '{backend}' has no entry in the backend table")
    return entry.module().load(context, instance)
