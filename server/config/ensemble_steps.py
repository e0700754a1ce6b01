"""Triton's rules on an ensemble that need its composing models' completed configs: batch sizes
fit, every step maps existing inputs and outputs (each required input once), tensors agree in data
type and shape across maps, and no step reads tensors that come from different decoupled models.

Triton checks these once the composing models are loaded and stops at the first rule broken (core
`ValidateEnsembleConfig`); so does `ensemble_error`, in the same order and words. The rules on the
ensemble's own config are ensemble_graph.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tritonclient.grpc.model_config_pb2 import ModelConfig


class _Refused(Exception):
    """The first rule the ensemble breaks, in Triton's words."""


@dataclass(eq=False)
class _Node:
    model: str
    data_type: int = 0
    dims: tuple[int, ...] = ()
    full_dims: tuple[int, ...] = ()  # with the batch dimension (-1) when the model batches
    decoupled: bool = False
    label: int = 0  # which decoupled model the tensor comes from (0: none)
    visited: bool = False
    prev: list[_Node] = field(default_factory=list)
    next: list[_Node] = field(default_factory=list)
    sibling: _Node | None = None  # shared by the outputs of one step


def _node(model: str, batching: bool, data_type: int, dims: Iterable[int]) -> _Node:
    shape = tuple(dims)
    return _Node(model, data_type, shape, ((-1,) if batching else ()) + shape)


def _same_dims(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _type_name(data_type: int) -> str:
    from server.config.parse import model_config_pb2

    return str(model_config_pb2().DataType.Name(data_type))


def _consistent(lhs: _Node, rhs: _Node, prefix: str) -> None:
    if lhs.data_type != rhs.data_type:
        raise _Refused(
            f"{prefix}inconsistent data type: {_type_name(lhs.data_type)} is inferred from model {lhs.model} "
            f"while {_type_name(rhs.data_type)} is inferred from model {rhs.model}"
        )
    if not _same_dims(lhs.dims, rhs.dims) and not _same_dims(lhs.full_dims, rhs.full_dims):
        raise _Refused(
            f"{prefix}inconsistent shape: {_dims_text(lhs.full_dims)} is inferred from model {lhs.model} "
            f"while {_dims_text(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def ensemble_error(ensemble: ModelConfig, composing: Mapping[str, ModelConfig]) -> str | None:
    """The first rule `ensemble` breaks with its steps' completed configs (`composing`, by model
    name), or None; a step whose config is missing counts as a model with no inputs or outputs."""
    try:
        _validate(ensemble, composing)
    except _Refused as refusal:
        return str(refusal)
    return None


def _validate(ensemble: ModelConfig, composing: Mapping[str, ModelConfig]) -> None:
    e = ensemble.name
    batching = ensemble.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for tensor in ensemble.input:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        tensors.setdefault(tensor.name, _node(e, batching, tensor.data_type, dims))
    sink = _Node(e)
    for tensor in ensemble.output:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        node = tensors.setdefault(tensor.name, _node(e, batching, tensor.data_type, dims))
        sink.prev.append(node)
        node.next.append(sink)
    for step in ensemble.ensemble_scheduling.step:
        config = composing.get(step.model_name)
        max_batch = config.max_batch_size if config is not None else 0
        if max_batch != 0 and max_batch < ensemble.max_batch_size:
            raise _Refused(
                f"ensemble {e} allows maximum batch size {ensemble.max_batch_size}, but it contains model "
                f"{step.model_name} which only allows maximum batch size to be {max_batch}"
            )
        _map_step(e, step, config, tensors)
    _check_decoupled(e, ensemble, tensors)


def _map_step(e: str, step: object, config: ModelConfig | None, tensors: dict[str, _Node]) -> None:
    name: str = step.model_name  # type: ignore[attr-defined]
    input_map: Mapping[str, str] = step.input_map  # type: ignore[attr-defined]
    output_map: Mapping[str, str] = step.output_map  # type: ignore[attr-defined]
    inputs = list(config.input) if config is not None else []
    outputs = list(config.output) if config is not None else []
    batching = config is not None and config.max_batch_size > 0
    input_names = {t.name for t in inputs}
    for model_input, tensor in input_map.items():
        if model_input not in input_names:
            raise _Refused(
                f"in ensemble {e}, ensemble tensor {tensor} is mapping to non-existing input {model_input} "
                f"in model {name}"
            )
    for model_input in inputs:
        mapped = input_map.get(model_input.name)
        if mapped is None:
            if model_input.optional:
                continue
            raise _Refused(
                f"in ensemble {e}, input {model_input.name} in model {name} is not mapped to any ensemble tensors"
            )
        node = _node(name, batching, model_input.data_type, model_input.dims)
        if mapped in tensors:
            _consistent(tensors[mapped], node, f"in ensemble {e}, ensemble tensor {mapped}: ")
        else:
            tensors[mapped] = node
    output_names = {t.name for t in outputs}
    for model_output, tensor in output_map.items():
        if model_output not in output_names:
            raise _Refused(
                f"in ensemble {e}, ensemble tensor {tensor} is mapped from non-existing output {model_output} "
                f"in model {name}"
            )
    sibling = _Node(name)
    by_name = {t.name: t for t in outputs}
    for model_output, tensor in output_map.items():
        source = by_name[model_output]
        node = _node(name, batching, source.data_type, source.dims)
        if tensor in tensors:
            _consistent(tensors[tensor], node, f"in ensemble {e}, ensemble tensor {tensor}: ")
        else:
            tensors[tensor] = node
        tensors[tensor].sibling = sibling
    decoupled = config is not None and config.model_transaction_policy.decoupled
    for tensor in output_map.values():
        node = tensors[tensor]
        node.decoupled = decoupled
        for source_tensor in input_map.values():
            source = tensors[source_tensor]
            node.prev.append(source)
            source.next.append(node)


def _check_decoupled(e: str, ensemble: ModelConfig, tensors: dict[str, _Node]) -> None:
    """Walks the tensors from the ensemble inputs, labelling each with the decoupled model it comes
    from; a step reading tensors of two labels is refused (their responses cannot be paired)."""
    label = 0
    queue: deque[_Node] = deque()
    for tensor in ensemble.input:
        node = tensors[tensor.name]
        node.visited = True
        queue.append(node)
    while queue:
        for following in queue.popleft().next:
            if following.visited or not all(p.visited for p in following.prev):
                continue
            first = following.prev[0].label
            if any(p.label != first for p in following.prev):
                raise _Refused(
                    f"in ensemble {e}, step of model '{following.model}' receives inputs originated from "
                    "different decoupled models"
                )
            if following.sibling is not None and following.sibling.visited:
                following.label = following.sibling.label
            else:
                if following.decoupled:
                    label += 1
                following.label = label if following.decoupled else first
                if following.sibling is not None:
                    following.sibling.label = following.label
                    following.sibling.visited = True
            following.visited = True
            queue.append(following)
