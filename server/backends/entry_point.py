"""A backend from an installed package: an entry point in the group `tcli.backends`.

The entry point's name is the backend's (what configs write in `backend:`); its object is called as
the built-in backends' classes are, `object(context, instance)`, once per model instance, and returns
the loaded instance: a `TensorModel` (merged tensors in, tensors out) or a `RequestModel` (the
requests themselves), from base.py. So the interface is the built-in backends' own: loading is the
call, then `execute()` per batch and `unload()` once. A package declares it in pyproject.toml:

    [project.entry-points."tcli.backends"]
    scale = "acme_backends:ScaleModel"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.backends.base import InstanceSpec, ModelContext, RequestModel, TensorModel
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def load_from_entry_point(
    entry: EntryPoint, context: ModelContext, instance: InstanceSpec
) -> TensorModel | RequestModel:
    """One instance of `context`'s model, loaded by the backend `entry` names."""
    where = f"backend '{entry.name}' (entry point '{entry.value}')"
    model = f"model '{context.config.name}' instance '{instance.name}'"
    try:
        factory = entry.load()
    except Exception as exc:  # the package's import failing is the package's problem: say which
        raise TritonError(ErrorCode.INVALID_ARG, f"{where} failed to import: {_one_line(exc)}") from None
    try:
        loaded = factory(context, instance)
    except TritonError:
        raise
    except Exception as exc:
        raise TritonError(ErrorCode.INTERNAL, f"{where} failed to load {model}: {_one_line(exc)}") from None
    if not isinstance(loaded, TensorModel | RequestModel):
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"{where} returned a {type(loaded).__name__} for {model}, not a TensorModel or RequestModel "
            "(server/backends/base.py)",
        )
    return loaded


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
