"""Pure helpers for dynamic batching: which requests may share a batch, merging their inputs into one
batch, and splitting the batch's outputs back per request.

Triton never splits a request across batches: a request brings all of its rows (the first dimension of
its inputs) to exactly one batch, and gets back exactly those rows of every output.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from server.protocol.errors import internal

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest

Array = np.ndarray[Any, Any]


def batch_key(request: InferenceRequest, batched: bool = True) -> tuple[Hashable, ...]:
    """A key equal for exactly the requests that can be concatenated into one batch.

    Two requests may share a batch when they carry the same inputs (names), each input with the same
    datatype and the same shape beyond the batch dimension (dim 0), and they ask for the same outputs
    (the runner executes a batch for one list of outputs). For a non-batching model (`batched=False`)
    there is no batch dimension, so the whole shape must agree.
    """
    skip = 1 if batched else 0
    inputs = request.inputs
    if len(inputs) == 1:  # the common case: no sort, one small tuple
        only = inputs[0]
        shapes: tuple[Hashable, ...] = ((only.name, only.datatype, tuple(only.shape[skip:])),)
    else:
        shapes = tuple(sorted((t.name, t.datatype, tuple(t.shape[skip:])) for t in inputs))
    outputs = request.outputs
    if not outputs:
        return (shapes, ())
    if len(outputs) == 1:
        return (shapes, (outputs[0].name,))
    return (shapes, tuple(sorted(o.name for o in outputs)))


def merge_inputs(requests: list[InferenceRequest]) -> dict[str, Array]:
    """Concatenate every input of `requests` along axis 0, in request order.

    All requests must share one `batch_key`. BYTES inputs stay object arrays (np.concatenate keeps
    dtype=object). A single request's arrays are returned as they are (no copy).
    """
    if not requests:
        return {}
    first = requests[0]
    if len(requests) == 1:
        return {t.name: t.data for t in first.inputs}
    # the first request's input order names the batch; the others may list inputs in any order
    by_name: dict[str, list[Array]] = {t.name: [t.data] for t in first.inputs}
    for request in requests[1:]:
        for tensor in request.inputs:
            parts = by_name.get(tensor.name)
            if parts is None:
                raise internal(
                    f"cannot batch requests with different inputs: '{tensor.name}' is not in the first request"
                )
            parts.append(tensor.data)
    count = len(requests)
    merged: dict[str, Array] = {}
    for name, parts in by_name.items():
        if len(parts) != count:
            raise internal(f"cannot batch requests with different inputs: '{name}' is missing from some")
        merged[name] = np.concatenate(parts, axis=0)
    return merged


def split_outputs(outputs: dict[str, Array], rows: list[int]) -> list[dict[str, Array]]:
    """Give each request its own rows of every output, as views into the batch arrays (no copies).

    `rows[i]` is the batch rows request i brought, in the order the inputs were merged. An output whose
    first dimension is not sum(rows) cannot be split back and raises TritonError(INTERNAL).
    """
    total = sum(rows)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            got = "a scalar" if array.ndim == 0 else f"shape {list(array.shape)}"
            raise internal(
                f"output '{name}' of a batch of {len(rows)} requests ({total} rows) has {got}: "
                f"its first dimension must be the batch size {total} to split it back per request"
            )
    result: list[dict[str, Array]] = []
    start = 0
    for count in rows:
        end = start + count
        result.append({name: array[start:end] for name, array in outputs.items()})
        start = end
    return result
