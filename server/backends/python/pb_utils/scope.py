"""Model scope: which model is running in this context (for get_model_dir, logs and the BLS hook)."""

from __future__ import annotations

import contextvars
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from server.backends.python.pb_utils.errors import TritonModelException


@dataclass
class Phase:
    """Where an instance is in its life: as in Triton, BLS is refused while it initializes or
    finalizes (`serving` False), whichever thread asks."""

    serving: bool = True


@dataclass(frozen=True)
class ModelScope:
    model_name: str
    model_version: str
    model_dir: str  # the version folder holding model.py, as Triton's get_model_dir() returns it
    phase: Phase = field(default_factory=Phase, compare=False)


def require_serving() -> None:
    """Raise Triton's error when the running model's instance is initializing or finalizing."""
    scope = current_model_scope()
    if scope is not None and not scope.phase.serving:
        raise TritonModelException("BLS is only supported during the 'execute' function.")


_MODEL_SCOPE: contextvars.ContextVar[ModelScope | None] = contextvars.ContextVar(
    "tcli_model_scope", default=None
)
_default_scope: ModelScope | None = None


def get_model_dir() -> str:
    """The folder of the running model file (`<repository>/<model>/<version>`)."""
    scope = current_model_scope()
    if scope is None:
        raise TritonModelException(
            "get_model_dir() is only available while the server runs the model "
            "(auto_complete_config, initialize, execute, finalize)"
        )
    return scope.model_dir


# host side: the tcli server calls this -------------------------------------------------------------
def current_model_scope() -> ModelScope | None:
    return _MODEL_SCOPE.get() or _default_scope


class _Scoped:
    """model_scope()'s context manager: a class, as it wraps every execute() (a generator-based
    one costs a generator and contextlib's bookkeeping per batch)."""

    __slots__ = ("_scope", "_token")

    def __init__(self, scope: ModelScope) -> None:
        self._scope = scope

    def __enter__(self) -> None:
        self._token = _MODEL_SCOPE.set(self._scope)

    def __exit__(self, *exc_info: object) -> None:
        _MODEL_SCOPE.reset(self._token)


def model_scope(scope: ModelScope) -> AbstractContextManager[None]:
    """Run model code (auto_complete_config, initialize, execute, finalize) as `scope`, in this context."""
    return _Scoped(scope)


def set_default_model_scope(scope: ModelScope | None) -> None:
    """The scope seen outside any model_scope() (e.g. threads the model starts itself). Meant for a
    process that hosts a single model; with several models in one process leave it None."""
    global _default_scope
    _default_scope = scope
