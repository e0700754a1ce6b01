"""The contract between a backend and the layers above it: what a backend is given to load a model
(`ModelContext`, `InstanceSpec`), the shapes of a loaded instance the scheduling layer runs
(`ModelInstance`: `TensorModel`, `RequestModel`, `LoopRequestModel`), and how an instance tells a
failure of the model's own code (`ModelError`) from one of tcli's, and what a check of a model file
reports to (`FileFindings`). The built-in backends are listed in table.py; registry.py, above the
backends, loads the one a config names.

Two shapes of model: framework models (onnxruntime, pytorch, tensorrt) take merged tensors, so the
scheduler merges requests into one batch and splits the outputs; python models take the list of
requests as Triton hands it to `TritonPythonModel.execute`.

Every capability the runner may use is declared here, with the default a backend gets by not
overriding it: `RequestModel.inline_ok`, `RequestModel.execute_channels`, `RequestModel.serves_scope`,
and the event-loop hand-off of `LoopRequestModel`. A backend class inherits one of these, so mypy
rejects it (where it is created, in its backend module's `load`) when it misses an abstract method or
overrides one with another signature.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence

    import numpy as np
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest, InferenceResponse

DEFAULT_BACKEND_DIRECTORY = Path("/opt/tritonserver/backends")  # tritonserver's --backend-directory


@dataclass(frozen=True)
class InstanceSpec:
    """One model instance from instance_group: its name, kind and device."""

    name: str  # Triton's instance names: <group name>_<index>
    kind: str  # KIND_CPU | KIND_GPU | KIND_MODEL
    device_id: int = 0
    group: int = 0  # its instance_group's index in the config


def instance_specs(config: ModelConfig) -> list[InstanceSpec]:
    """instance_group count x kind (x gpus) -> the instances to create, named <group>_<index>."""
    specs = []
    for position, group in enumerate(config.instance_group):
        kind = group.Kind.Name(group.kind)
        # a GPU group without gpus (none visible) still yields instances, so their load fails clearly
        devices = (list(group.gpus) or [0]) if kind == "KIND_GPU" else [0]
        index = 0
        for device in devices:
            for _ in range(max(group.count, 1)):
                specs.append(InstanceSpec(f"{group.name}_{index}", kind, device, position))
                index += 1
    return specs


@dataclass(frozen=True)
class ModelContext:
    """What a backend needs to load one version of a model."""

    config: ModelConfig  # completed
    model_dir: Path
    version: int
    repository: Path
    # called with the reason when an instance gives up for good (a python instance process that
    # keeps dying): the repository marks the version UNAVAILABLE with it
    instance_failed: Callable[[str], None] | None = None
    # --backend-config settings for this model's backend (its own, over the ones given for every backend)
    backend_config: Mapping[str, str] = field(default_factory=dict)
    # --backend-directory: where Python-based backends live (locate.py)
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY
    # set by registry.py when a Python-based backend serves the model: the backend's model.py, which
    # stands in for a file of the model's own (Triton's runtime_modeldir)
    runtime_file: Path | None = None

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.version)

    @property
    def model_file(self) -> Path:
        """The file that serves this version: its default_model_filename, or a Python-based backend's file."""
        if self.runtime_file is not None:
            return self.runtime_file
        return self.version_dir / self.config.default_model_filename


class ModelError(TritonError):
    """A failure of the model's own code (a python model's execute(), an error onnxruntime or torch
    raises while running the graph), as the answer of the requests it failed. `trace` is its
    traceback as text (it may come from an instance's own process); the runner logs it once, with
    the model, the instance and the request ids. Only the failed batch fails: the instance goes on.
    Any other exception out of an instance is a bug of tcli's, answered as such."""

    def __init__(self, message: str, trace: str, code: ErrorCode = ErrorCode.INTERNAL) -> None:
        super().__init__(code, message)
        self.trace = trace
        self.logged = False  # set by whoever logs it (it may reach several requests one by one)


class DependencyMissing(TritonError):
    """A model's code imports a package this machine does not have (`module`, e.g. transformers): the
    model itself may be sound. Serving fails it as any import error; `tcli repo validate`, which often
    runs on a CI runner without the serving image's packages, makes it a warning unless asked not to."""

    def __init__(self, message: str, module: str) -> None:
        super().__init__(ErrorCode.INTERNAL, message)
        self.module = module


class FileFindings(Protocol):
    """Where a backend's check of a model file against its config reports (validation's findings,
    server/config/validate.py): a message worded as Triton's, a fix, and the config.pbtxt field."""

    def error(
        self, message: str, fix: str | None = None, at: tuple[str, ...] = (), blocks_load: bool = True
    ) -> None: ...

    def warning(self, message: str, fix: str | None = None, at: tuple[str, ...] = ()) -> None: ...


class NotStarted(TritonError):
    """The answer for a batch an instance was handed but never started, because the instance went
    away first (its process died running the batch ahead). The scheduler hands such a batch to an
    instance again instead of failing it; a client sees this only if nothing can run it."""

    def __init__(self, model: str, instance: str) -> None:
        super().__init__(
            ErrorCode.UNAVAILABLE,
            f"model '{model}' instance '{instance}' went away before it started the request; send it again",
        )


class Rescheduled(TritonError):
    """A request's result when the model released it with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    (python: `request.set_release_flags(...)`) and gave it no response: the scheduler queues it to be
    executed again (Triton's iterative sequences). A scheduler that cannot makes this the request's
    answer, in Triton's words (Triton logs them and never answers the request)."""

    def __init__(self) -> None:
        super().__init__(
            ErrorCode.INTERNAL,
            "Failed to release request: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, "
            "while the model is not configured to handle such a flag.",
        )


def tcli_bug(exc: BaseException) -> TritonError:
    """The answer for requests an exception of tcli's own failed (not the model's): whoever catches
    it logs its traceback, once, with the model, instance and requests."""
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return TritonError(
        ErrorCode.INTERNAL,
        f"internal error: a bug in tcli, not in the model ({detail}); the server log has the traceback",
    )


class ResponseChannel(Protocol):
    """The server's end of one request's response sender: `send(result, final)` delivers a converted
    response, an error, or None (a flags-only final); `is_cancelled()` tells whether the client went
    away. Called from whichever thread the model sends on."""

    def send(self, result: InferenceResponse | TritonError | None, final: bool, /) -> None: ...

    def is_cancelled(self) -> bool: ...


class ModelInstance(ABC):  # noqa: B024 - its abstract methods are its two shapes' own
    """One loaded instance of a model version; the runner gives it one batch at a time."""

    def unload(self) -> None:  # noqa: B027 - most backends free everything when dropped
        """Release what the instance holds (sessions, modules, device memory, a python model's
        finalize())."""


class TensorModel(ModelInstance):
    """A loaded instance of a framework model: merged input tensors in, output tensors out. A failure
    inside the framework raises ModelError."""

    @abstractmethod
    def execute(
        self, inputs: dict[str, np.ndarray[Any, Any]], output_names: list[str]
    ) -> dict[str, np.ndarray[Any, Any]]: ...


class RequestModel(ModelInstance):
    """A loaded instance that takes the requests themselves (python models). A failure of the
    model's code is a ModelError among the results, not an exception."""

    @property
    def inline_ok(self) -> bool:
        """Whether the runner may call execute_channels() straight from its event loop: the model is
        cheap and never waits on other threads or processes. No, unless a backend says so."""
        return False

    @abstractmethod
    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse | TritonError]:
        """Every request's one result."""

    def execute_channels(
        self, requests: list[InferenceRequest], channels: Sequence[ResponseChannel] | None
    ) -> list[InferenceResponse | TritonError | None]:
        """Run `requests`, each with a response channel (none when `channels` is None): per request
        its one result, or None when it answers (or answered, or will) through its channel. Without
        response senders, this is execute()."""
        return list(self.execute(requests))

    def ready(self) -> bool:
        """The instance's own readiness, asked when a client asks whether the model is ready (Triton's
        TRITONBACKEND_ModelInstanceReady: a python model's is_model_ready()). Ready, unless a backend
        says otherwise."""
        return True

    def serves_scope(self, scope: object) -> bool:
        """Whether `scope`, the model-call scope current while a python model's code runs, is this
        instance's (BLS tells apart the instances waiting on its requests by it)."""
        return False


class LoopRequestModel(RequestModel):
    """A request model the event loop hands batches to without a thread (an instance in a process of
    its own): the runner's dispatcher (server/scheduling/dispatch.py) starts a batch and is called
    back with its results on the loop."""

    @abstractmethod
    def start_batch(
        self,
        requests: list[InferenceRequest],
        channels: Sequence[ResponseChannel] | None,
        done: Callable[[list[InferenceResponse | TritonError | None]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> bool:
        """Start the batch and return; `done(results)` follows once, as execute_channels() would
        return them, on `loop`. False, having done nothing, when the instance cannot start it now
        (execute_channels() on a thread then runs it)."""

    def can_queue(self, requests: list[InferenceRequest]) -> bool:
        """Whether this batch may be started while another one runs (sent behind it)."""
        return False

    def revive(self) -> TritonError | None:
        """Make the instance able to start batches again after start_batch() returned False (start its
        process again); called on a helper thread. None once it can, else why it cannot (yet)."""
        return None
