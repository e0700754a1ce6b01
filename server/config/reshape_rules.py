"""Triton's rules for an input's or output's `reshape` (core `ValidateIOShape`), in its order and
words: no zero dimension, the same number of elements as dims (an empty reshape holds one), and with
variable-size dimensions the same number between each pair of them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def _element_count(dims: list[int]) -> int:
    """Triton's element count of a shape: -1 when any dimension varies, 0 for no dimensions."""
    if -1 in dims:
        return -1
    return math.prod(dims) if dims else 0


def _chunks(dims: list[int]) -> list[int]:
    """The element counts between variable-size dimensions: [2, 4, -1, 6] -> [8, 6]."""
    counts, current = [], 1
    for d in dims:
        if d == -1:
            counts.append(current)
            current = 1
        else:
            current *= d
    return [*counts, current]


def reshape_error(config: ModelConfig, tensor: object, label: str) -> tuple[str, str | None] | None:
    """Triton's first refusal of the tensor's reshape with a fix, or None."""
    m = config.name
    dims = list(tensor.dims)  # type: ignore[attr-defined]
    shape = list(tensor.reshape.shape)  # type: ignore[attr-defined]
    name = tensor.name  # type: ignore[attr-defined]
    if not shape and config.max_batch_size == 0:
        return (
            f"{label} '{name}' cannot have empty reshape for non-batching model as scalar tensors "
            f"are not supported for {m}",
            "give reshape a shape, or set max_batch_size > 0",
        )
    if any(d < -1 or d == 0 for d in shape):
        return (
            f"{label} '{name}' reshape dimensions must be integer >= 1, or -1 to indicate a "
            f"variable-size dimension for {m}",
            None,
        )
    dims_size, reshape_size = _element_count(dims), _element_count(shape)
    different_size = f"{label} '{name}' has different size for dims and reshape for {m}"
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        return different_size, f"dims {dims} and reshape {shape} must hold the same number of elements"
    if dims_size == -1:
        dims_chunks, shape_chunks = _chunks(dims), _chunks(shape)
        if len(dims_chunks) != len(shape_chunks):
            return (
                f"{label} '{name}' has different number of variable-size dimensions for dims and reshape for {m}",
                "use -1 the same number of times in dims and reshape",
            )
        if dims_chunks != shape_chunks:
            return (
                different_size,
                "the dimensions between the -1s of dims and of reshape must hold the same number of elements",
            )
    return None
