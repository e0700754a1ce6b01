"""Triton's rules on an ensemble's own config, before any composing model is looked at: what an
ensemble may not set, that every step names a model and maps inputs and outputs, and that its
tensors flow from the ensemble inputs to every ensemble output with none left unused.

Triton stops at the first rule broken (core `ValidateEnsembleSchedulingConfig`), so this does too,
in the same order and words: the qa and users grep those words. The rules that need the composing
models' configs are ensemble_steps.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from server.config import backends

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


@dataclass(eq=False)
class _Tensor:
    name: str
    is_output: bool  # some step writes it
    ready: bool = False
    prev: list[_Tensor] = field(default_factory=list)  # the tensors its step reads
    next: list[_Tensor] = field(default_factory=list)  # the tensors made from it


def platform_error(config: ModelConfig, name: str) -> str | None:
    """Triton's refusal of the config's platform and backend, or None (core ValidateModelConfig)."""
    if config.platform == backends.ENSEMBLE and config.backend:
        return f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
    if not config.backend and config.platform not in backends.PLATFORMS:
        return f"unexpected platform type '{config.platform}' for {name}"
    return None


def scheduling_error(config: ModelConfig, name: str) -> str | None:
    """Triton's first refusal of the ensemble scheduling part of a config, or None."""
    if not config.HasField("ensemble_scheduling"):
        if config.platform == backends.ENSEMBLE:
            return f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
        return None
    if config.platform != backends.ENSEMBLE:
        return f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"
    if config.instance_group:
        return f"instance group should not be specified for ensemble '{name}'"
    if config.HasField("optimization"):
        return f"optimization should not be specified for ensemble '{name}'"
    if config.model_warmup:
        return f"model_warmup can not be specified for ensemble '{name}'"
    if not config.ensemble_scheduling.step:
        return f"must specify 'step' for ensemble '{name}'"
    tensors: dict[str, _Tensor] = {}
    error = _build_graph(config, name, tensors)
    return error or _flow_error(config, name, tensors)


def _build_graph(config: ModelConfig, name: str, tensors: dict[str, _Tensor]) -> str | None:
    for index, step in enumerate(config.ensemble_scheduling.step):
        for required in ("model_name", "input_map", "output_map"):
            if not getattr(step, required):
                return f"must specify '{required}' in step {index} of ensemble '{name}'"
        written = []
        for tensor_name in step.output_map.values():
            tensor = tensors.get(tensor_name)
            if tensor is None:
                tensor = tensors[tensor_name] = _Tensor(tensor_name, True)
            elif tensor.is_output:
                return (
                    f"ensemble tensor '{tensor_name}' can appear in an output map only once for ensemble "
                    f"'{name}' step {index}"
                )
            else:
                tensor.is_output = True
            written.append(tensor)
        for tensor_name in step.input_map.values():
            tensor = tensors.setdefault(tensor_name, _Tensor(tensor_name, False))
            for output in written:
                output.prev.append(tensor)
                tensor.next.append(output)
    return None


def _flow_error(config: ModelConfig, name: str, tensors: dict[str, _Tensor]) -> str | None:
    ready: deque[_Tensor] = deque()
    for tensor_input in config.input:
        tensor = tensors.get(tensor_input.name)
        if tensor is None:
            return f"ensemble input '{tensor_input.name}' for ensemble {name}' is not used"
        tensor.ready = True
        ready.append(tensor)
    while ready:
        for following in ready.popleft().next:
            if not following.ready and all(t.ready for t in following.prev):
                following.ready = True
                ready.append(following)
    outputs = set()
    for tensor_output in config.output:
        tensor = tensors.get(tensor_output.name)
        if tensor is None:
            return f"ensemble output '{tensor_output.name}' for ensemble {name}' is not used"
        if not tensor.ready:
            return _not_written(tensor, tensor_output.name, name)
        outputs.add(tensor.name)
    for tensor in tensors.values():
        if tensor.name not in outputs and (not tensor.ready or not tensor.next):
            return f"ensemble tensor '{tensor.name}' is unused in ensemble '{name}'"
    return None


def _not_written(tensor: _Tensor, output: str, name: str) -> str:
    """Names the first tensor upstream of an unwritten output that nothing connects."""
    message = f"output '{output}' for ensemble '{name}' is not written"
    last, seen = tensor, set()
    prev = tensor.prev
    while prev:
        source = next((t for t in prev if not t.ready and t.name not in seen), None)
        if source is None:
            break
        seen.add(source.name)
        last, prev = source, source.prev
    if last is not tensor:
        message += f": at least one of its depending tensors, '{last.name}', is not connected"
    return message
