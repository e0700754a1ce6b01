"""Ragged inputs, `batch_input` and `batch_output` of a model config: what Triton's onnxruntime and
PyTorch backends add to a batch of requests, and how they hand a batch output back.

- An input with `allow_ragged_batch: true` lets requests of different shapes share a batch; the model
  gets it as one 1-D tensor of every request's elements, in request order (`batch.merge_inputs`).
- A `batch_input` is a tensor the server makes once the batch is formed, named by its `target_name`,
  from the shapes of its `source_input` in each request (element counts include the batch dimension):
  BATCH_ELEMENT_COUNT            [n]       each request's element count
  BATCH_ACCUMULATED_ELEMENT_COUNT          [n]       running total: where each request's elements end
  BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO [n + 1]  the same after a leading 0
  BATCH_MAX_ELEMENT_COUNT_AS_SHAPE         [max]     only its shape says something (the largest count)
  BATCH_ITEM_SHAPE               [rows, rank - 1]    each batch row's shape without the batch dimension
  BATCH_ITEM_SHAPE_FLATTEN       [rows * (rank - 1)] the same, flattened
  (n: requests in the batch; rows: their batch rows), as TYPE_INT32 or TYPE_FP32.
- A `batch_output` of kind BATCH_SCATTER_WITH_INPUT_SHAPE is not split by batch rows: each request gets
  the output's next elements shaped like the output's config dims, each -1 taken from the same
  dimension of the request's `source_input` (the batch dimension included).
The python backend has none of this: its model gets each request as it came.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from server.protocol import datatypes
from server.protocol.errors import internal, invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest

Array = np.ndarray[Any, Any]


def _dtype(config_type: str) -> np.dtype[Any]:
    """TYPE_FP32 or TYPE_INT32, the two the config checks allow a batch input (anything else: INT32)."""
    return datatypes.wire_to_numpy("FP32" if config_type == "TYPE_FP32" else "INT32")


@dataclass(frozen=True, slots=True)
class _BatchInput:
    kind: str
    targets: tuple[str, ...]
    dtype: np.dtype[Any]
    source: str


@dataclass(frozen=True, slots=True)
class _BatchOutput:
    source: str
    shape: tuple[int, ...]  # the output's full shape in the config, -1 where the input decides


class BatchIO:
    """What one model's config adds to batching its tensors; `of(config)` is None when nothing."""

    def __init__(self, config: ModelConfig) -> None:
        from server.config.validate import enum_name

        # without a batch dimension there is no batch to be ragged in: inputs reach the model as sent
        batched = config.max_batch_size > 0
        self.ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch and batched)
        self.inputs = [
            _BatchInput(
                enum_name(b, "kind"),
                tuple(b.target_name),
                _dtype(enum_name(b, "data_type")),
                b.source_input[0] if b.source_input else "",
            )
            for b in config.batch_input
        ]
        dims = {o.name: tuple(o.dims) for o in config.output}
        batch = (-1,) if batched else ()
        self.outputs = {
            target: _BatchOutput(b.source_input[0] if b.source_input else "", batch + dims.get(target, (-1,)))
            for b in config.batch_output
            for target in b.target_name
        }

    @classmethod
    def of(cls, config: ModelConfig) -> BatchIO | None:
        if (
            not config.batch_input
            and not config.batch_output
            and not any(i.allow_ragged_batch for i in config.input)
        ):
            return None
        return cls(config)

    def batch_inputs(self, requests: list[InferenceRequest]) -> dict[str, Array]:
        """Every batch input's tensor for this batch, by target name."""
        made: dict[str, Array] = {}
        for spec in self.inputs:
            shapes = [_source_shape(request, spec.source) for request in requests]
            tensor: Array = _make(spec.kind, shapes).astype(spec.dtype)
            for target in spec.targets:
                made[target] = tensor
        return made

    def scatter(self, outputs: dict[str, Array], requests: list[InferenceRequest]) -> list[dict[str, Array]]:
        """Take the batch outputs out of `outputs` and give each request its part of them."""
        parts: list[dict[str, Array]] = [{} for _ in requests]
        for name, spec in self.outputs.items():
            array = outputs.pop(name, None)
            if array is None:
                continue
            flat = array.reshape(-1)
            start = 0
            for part, request in zip(parts, requests, strict=True):
                source = _source_shape(request, spec.source)
                shape = tuple(
                    source[i] if d == -1 and i < len(source) else d for i, d in enumerate(spec.shape)
                )
                count = int(np.prod(shape, dtype=np.int64))
                if start + count > flat.size:
                    raise internal(
                        f"batch output '{name}' has {flat.size} elements, fewer than its requests' shapes "
                        f"need (BATCH_SCATTER_WITH_INPUT_SHAPE from input '{spec.source}')"
                    )
                part[name] = flat[start : start + count].reshape(shape)
                start += count
        return parts


def _source_shape(request: InferenceRequest, source: str) -> tuple[int, ...]:
    for tensor in request.inputs:
        if tensor.name == source:
            return tuple(tensor.shape)
    raise invalid_arg(
        f"[request id: {request.id or '<id_unknown>'}] input '{source}' is missing: the model's batch "
        "input or batch output is computed from it; send it with the request"
    )


def _count(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _make(kind: str, shapes: list[tuple[int, ...]]) -> Array:
    """One batch input's values from its source input's shape in each request."""
    counts = np.array([_count(s) for s in shapes], dtype=np.int64)
    if kind == "BATCH_ELEMENT_COUNT":
        return counts
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return np.cumsum(counts)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        # max() of a list: numpy 2.5's stubs (Python 3.12 and later) refuse ndarray.max(initial=0)
        return np.zeros(max(counts.tolist(), default=0), np.int64)
    if kind in ("BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN"):
        rank = max((len(s) for s in shapes), default=1) - 1
        rows = [list(s[1:]) for s in shapes for _ in range(s[0] if s else 0)]
        items = np.array(rows, dtype=np.int64).reshape(len(rows), rank)
        return items.reshape(-1) if kind == "BATCH_ITEM_SHAPE_FLATTEN" else items
    raise internal(f"unknown batch input kind '{kind}'")
