"""The built-in backends: one entry each, the only place that lists them.

An entry says what the layers above need to know of a backend by name: Triton's platforms for it and
their default model files, the file a config naming only the backend serves, and the backend's
module, imported only when a model asks for it (so reading the table imports no framework). The
module offers the interface `BackendModule` declares: loading an instance, the classes it loads,
and, when it has them, completing a config from the model file and checking the file against the
config without loading it. Loading (registry.py), finding a backend (locate.py), completing and
validating a config (server/config/) and `tcli repo validate` all read this table.

Adding a backend: one entry here and one module that offers `BackendModule`
(tests/unit/test_backend_contracts.py checks both). Backends users add (a Python-based backend in
--backend-directory, an entry point) are not listed: locate.py finds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import (
        FileFindings,
        InstanceSpec,
        ModelContext,
        ModelInstance,
        RequestModel,
        TensorModel,
    )

# fills inputs, outputs and batching of a config from the version's model file, as the backend's own
# auto-complete does: (config, model file, model folder, --backend-config by backend)
Completer = Callable[["ModelConfig", "Path", "Path", Mapping[str, Mapping[str, str]]], None]
# checks a model file against its completed config without loading it (`tcli repo validate`)
FileCheck = Callable[["ModelConfig", "Path", "FileFindings"], None]


class BackendModule(Protocol):
    """What a built-in backend's module offers (a module, checked by mypy where the table names it)."""

    def load(self, context: ModelContext, instance: InstanceSpec) -> TensorModel | RequestModel:
        """One instance of the model (imports the framework now)."""
        ...

    def instance_classes(self) -> tuple[type[ModelInstance], ...]:
        """Every class `load` may return (the contract test walks them)."""
        ...

    @property
    def complete_config(self) -> Completer | None: ...

    @property
    def check_model_file(self) -> FileCheck | None: ...


@dataclass(frozen=True)
class Platform:
    """One of Triton's platforms (core:src/constants.h) and its default model file."""

    name: str
    model_file: str


@dataclass(frozen=True)
class BuiltInBackend:
    name: str
    model_file: str  # default_model_filename of a config that names only the backend
    module: Callable[[], BackendModule]  # imports the backend's module (not its framework)
    # Triton's platforms it serves; the first is the one Triton fills in when a config names only the backend
    platforms: tuple[Platform, ...] = ()
    gpu: bool = False  # its framework runs on a GPU (`tcli analyze` tries KIND_GPU instances)
    cpu_instances: int = 1  # instances of a KIND_CPU group without a count (core SetDefaultInstanceCount)
    # its instances of one model load side by side (Triton's backend attribute
    # ParallelModelInstanceLoading, which its python and onnxruntime backends set)
    parallel_instances: bool = False


def _onnxruntime() -> BackendModule:
    from server.backends import onnxruntime

    return onnxruntime


def _pytorch() -> BackendModule:
    from server.backends import pytorch

    return pytorch


def _python() -> BackendModule:
    from server.backends.python import backend

    return backend


def _tensorrt() -> BackendModule:
    from server.backends import tensorrt

    return tensorrt


# in the order error messages list them
BUILT_IN: tuple[BuiltInBackend, ...] = (
    BuiltInBackend(
        "onnxruntime",
        "model.onnx",
        _onnxruntime,
        (Platform("onnxruntime_onnx", "model.onnx"),),
        gpu=True,
        cpu_instances=2,
        parallel_instances=True,
    ),
    BuiltInBackend(
        "pytorch",
        "model.pt",
        _pytorch,
        (
            Platform("pytorch_libtorch", "model.pt"),
            Platform("libtorch", "model.pt"),
            Platform("torch_aoti", "model.pt2"),
        ),
        gpu=True,
    ),
    BuiltInBackend("python", "model.py", _python, parallel_instances=True),
    BuiltInBackend("tensorrt", "model.plan", _tensorrt, (Platform("tensorrt_plan", "model.plan"),), gpu=True),
)
NAMES: tuple[str, ...] = tuple(entry.name for entry in BUILT_IN)
_BY_NAME = {entry.name: entry for entry in BUILT_IN}


def built_in(name: str) -> BuiltInBackend | None:
    """The built-in backend called `name`, or None."""
    return _BY_NAME.get(name)


def serving(platform: str) -> tuple[BuiltInBackend, Platform] | None:
    """The built-in backend that serves `platform`, with the platform's entry, or None."""
    for entry in BUILT_IN:
        for known in entry.platforms:
            if known.name == platform:
                return entry, known
    return None
