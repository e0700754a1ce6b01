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


def batch_key(
    request: InferenceRequest, batched: bool = True, ragged: frozenset[str] = frozenset()
) -> tuple[Hashable, ...]:
    """A key equal for exactly the requests that can share one batch.

    Two requests may share a batch when they carry the same inputs (names), each input with the same
    datatype and the same shape beyond the batch dimension (dim 0). For a non-batching model
    (`batched=False`) there is no batch dimension, so the whole shape must agree. An input named in
    `ragged` (allow_ragged_batch) may differ in shape. Which outputs the requests ask for does not
    matter, as in Triton: the batch computes the union and each response keeps its own.
    """
    skip = 1 if batched else 0
    inputs = request.inputs
    if len(inputs) == 1 and not ragged:  # the common case: no sort, one small tuple
        only = inputs[0]
        return ((only.name, only.datatype, tuple(only.shape[skip:])),)
    return tuple(
        sorted((t.name, t.datatype, None if t.name in ragged else tuple(t.shape[skip:])) for t in inputs)
    )


def requested_outputs(requests: list[InferenceRequest], every: list[str]) -> list[str]:
    """The outputs a batch must compute: the union of what its requests ask for, in `every`'s order
    (the config's); a request that names none asks for every output. Names outside `every` (a
    sequence's implicit state outputs) follow, in the order first asked."""
    wanted: set[str] = set()
    extra: list[str] = []
    everything = False
    for request in requests:
        if not request.outputs:
            everything = True
        for output in request.outputs:
            if output.name not in wanted:
                wanted.add(output.name)
                if output.name not in every:
                    extra.append(output.name)
    chosen = every if everything else [name for name in every if name in wanted]
    return chosen + extra if extra else chosen


def merge_inputs(requests: list[InferenceRequest], ragged: frozenset[str] = frozenset()) -> dict[str, Array]:
    """Concatenate every input of `requests` along axis 0, in request order.

    All requests must share one `batch_key`. BYTES inputs stay object arrays (np.concatenate keeps
    dtype=object). A single request's arrays are returned as they are (no copy). An input named in
    `ragged` becomes one 1-D tensor of every request's elements, as Triton's onnxruntime and PyTorch
    backends hand ragged inputs to the model.
    """
    if not requests:
        return {}
    first = requests[0]
    if len(requests) == 1 and not ragged:
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
        if name in ragged:
            parts = [part.reshape(-1) for part in parts]
        merged[name] = parts[0] if count == 1 else np.concatenate(parts, axis=0)
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
