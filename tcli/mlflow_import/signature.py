"""An MLflow model signature as Triton tensors.

Column-based signatures (a DataFrame's columns) become one input per column, a row per batch entry:
dims [1] with batching. Tensor-based signatures keep their shapes, the leading -1 being the batch.
Tensors are matched to the signature by position at serving time, so names are only made Triton-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from server.config.scaffold import DEFAULT_MAX_BATCH_SIZE, TensorArg
from server.protocol import datatypes
from tcli.errors import CliError
from tcli.mlflow_import.uri import triton_name


@dataclass(frozen=True)
class PyfuncTensors:
    max_batch_size: int
    inputs: tuple[TensorArg, ...]
    outputs: tuple[TensorArg, ...]


def triton_type(mlflow_type: Any, where: str) -> str:
    """An MLflow DataType or numpy dtype as a config type name (TYPE_FP64, TYPE_STRING, ...)."""
    import numpy as np

    # DataType members know their numpy type; Array, Object and Map (nested values) have none
    to_numpy = getattr(mlflow_type, "to_numpy", None)
    dtype = to_numpy() if callable(to_numpy) else mlflow_type
    try:
        return datatypes.wire_to_config(datatypes.numpy_to_wire(np.dtype(dtype)))
    except (KeyError, TypeError):
        label = mlflow_type.name if isinstance(mlflow_type, enum.Enum) else str(mlflow_type)
        raise CliError(
            f"{where} has MLflow type {label}, which no Triton tensor type holds: "
            "log the model with numeric, boolean, string or binary inputs and outputs"
        ) from None


def _batchable(specs: list[Any], tensor_based: bool) -> bool:
    """Rows of a DataFrame always batch; tensors batch when every one has a variable first dim."""
    return not tensor_based or all(spec.shape and spec.shape[0] == -1 for spec in specs)


def _tensors(specs: list[Any], prefix: str, tensor_based: bool, batched: bool) -> tuple[TensorArg, ...]:
    tensors: list[TensorArg] = []
    used: set[str] = set()
    for index, spec in enumerate(specs):
        name = triton_name(spec.name) if spec.name else f"{prefix.upper()}{index}"
        if name in used:  # two MLflow names that read the same once made Triton-safe
            name = f"{name}_{index}"
        used.add(name)
        where = f"{prefix} '{spec.name or index}' of the signature"
        if tensor_based:
            shape = tuple(int(d) for d in spec.shape or (-1,))
            dims = shape[1:] if batched else shape
        else:
            dims = (1,) if batched else (-1,)
        tensors.append(TensorArg(name, triton_type(spec.type, where), dims))
    return tuple(tensors)


def pyfunc_tensors(signature: Any, max_batch_size: int | None) -> PyfuncTensors:
    """Triton inputs and outputs for a pyfunc model's `ModelSignature`; `max_batch_size` None picks
    scaffold's default when the signature can batch, else 0."""
    inputs, outputs = signature.inputs, signature.outputs
    if outputs is None or not outputs.inputs:
        raise CliError(
            "the model's signature has no outputs: log it with one, "
            "e.g. signature=mlflow.models.infer_signature(X, model.predict(X))"
        )
    in_specs, out_specs = list(inputs.inputs), list(outputs.inputs)
    in_tensor, out_tensor = inputs.is_tensor_spec(), outputs.is_tensor_spec()
    batchable = _batchable(in_specs, in_tensor) and _batchable(out_specs, out_tensor)
    max_batch = max_batch_size if max_batch_size is not None else DEFAULT_MAX_BATCH_SIZE * batchable
    if max_batch > 0 and not batchable:
        raise CliError(
            "the model's signature has tensors with a fixed first dimension, so it cannot batch: "
            "use --max-batch-size 0"
        )
    batched = max_batch > 0
    return PyfuncTensors(
        max_batch,
        _tensors(in_specs, "input", in_tensor, batched),
        _tensors(out_specs, "output", out_tensor, batched),
    )
