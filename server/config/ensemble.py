"""Ensemble rules that need the composing models: steps exist, tensors flow as a DAG, types and shapes
agree across every map, and batch sizes fit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.config.validate import Findings, enum_name, response_cache_refusal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tritonclient.grpc.model_config_pb2 import ModelConfig


@dataclass(frozen=True)
class TensorEnd:
    """One end of an ensemble tensor: who produces or consumes it, with the type and full shape."""

    who: str
    data_type: str
    shape: tuple[int, ...]  # including the batch dimension (-1) when the owner batches


def _end(who: str, config: ModelConfig, tensor: object) -> TensorEnd:
    batch: tuple[int, ...] = (-1,) if config.max_batch_size > 0 else ()
    dims: tuple[int, ...] = tuple(tensor.dims)  # type: ignore[attr-defined]
    return TensorEnd(who, enum_name(tensor, "data_type"), batch + dims)


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def check_ensemble(
    ensemble: ModelConfig, known_models: set[str], configs: Mapping[str, ModelConfig | None], found: Findings
) -> None:
    """`known_models`: every model folder in the repositories; `configs`: completed configs of the
    models that completed (None for a model whose own config is broken)."""
    e = ensemble.name
    steps = list(ensemble.ensemble_scheduling.step)
    producers: dict[str, tuple[int, TensorEnd]] = {}  # tensor -> (step index or -1 for input, producer)
    for tensor in ensemble.input:
        producers[tensor.name] = (-1, _end(f"ensemble input '{tensor.name}'", ensemble, tensor))
    consumers: dict[str, list[tuple[int, TensorEnd | None]]] = {}

    for index, step in enumerate(steps):
        at = ("step", f'"{step.model_name}"')
        if not step.model_name:
            found.error(f"must specify 'model_name' in step {index} of ensemble '{e}'", None, ("step",))
            continue
        if step.model_name not in known_models:
            found.error(
                f"ensemble '{e}' step {index} uses model '{step.model_name}', which is not in the repository",
                f"add the model folder {step.model_name}/ or fix model_name",
                at,
            )
        if not step.input_map:
            found.error(f"must specify 'input_map' in step {index} of ensemble '{e}'", None, at)
        if not step.output_map:
            found.error(f"must specify 'output_map' in step {index} of ensemble '{e}'", None, at)
        composing = configs.get(step.model_name)
        if composing is None and step.model_name in known_models:
            found.warning(
                f"ensemble '{e}' step {index}: model '{step.model_name}' has errors of its own, so its "
                "tensors were not checked",
                f"fix model '{step.model_name}' first",
                at,
            )
        if composing is not None:
            _check_batch_size(ensemble, composing, found, at)
            if ensemble.response_cache.enable and composing.model_transaction_policy.decoupled:
                # an ensemble with a decoupled step is decoupled itself: Triton refuses its cache
                fix = "remove response_cache { enable: true }"
                found.error(response_cache_refusal(e, True, False) or "", fix, ("response_cache",))
        inputs = {t.name: t for t in composing.input} if composing else {}
        outputs = {t.name: t for t in composing.output} if composing else {}
        for model_input, tensor_name in step.input_map.items():
            end = None
            if composing is not None:
                if model_input not in inputs:
                    found.error(
                        f"ensemble '{e}' step {index} maps '{model_input}', which is not an input of model "
                        f"'{step.model_name}' (inputs: {', '.join(inputs) or 'none'})",
                        "the input_map key is the composing model's input name; the value is the ensemble tensor",
                        (*at, model_input),
                    )
                    continue
                end = _end(
                    f"input '{model_input}' of model '{step.model_name}'", composing, inputs[model_input]
                )
            consumers.setdefault(tensor_name, []).append((index, end))
        if composing is not None:
            missing = [name for name, t in inputs.items() if name not in step.input_map and not t.optional]
            for name in missing:
                found.error(
                    f"ensemble '{e}' step {index} does not map input '{name}' of model '{step.model_name}'",
                    f'add it to input_map: {{ key: "{name}" value: "<ensemble tensor>" }}',
                    at,
                )
        for model_output, tensor_name in step.output_map.items():
            if composing is not None and model_output not in outputs:
                found.error(
                    f"ensemble '{e}' step {index} maps '{model_output}', which is not an output of model "
                    f"'{step.model_name}' (outputs: {', '.join(outputs) or 'none'})",
                    "the output_map key is the composing model's output name; the value is the ensemble tensor",
                    (*at, model_output),
                )
                continue
            if tensor_name in producers:
                found.error(
                    f"ensemble tensor '{tensor_name}' can appear in an output map only once for ensemble '{e}' "
                    f"step {index}",
                    "give each produced tensor its own name",
                    (*at, tensor_name),
                )
                continue
            end = (
                _end(
                    f"output '{model_output}' of model '{step.model_name}'", composing, outputs[model_output]
                )
                if composing is not None
                else TensorEnd(f"step {index}", "", ())
            )
            producers[tensor_name] = (index, end)

    for output in ensemble.output:
        consumers.setdefault(output.name, []).append(
            (len(steps), _end(f"ensemble output '{output.name}'", ensemble, output))
        )

    _check_flow(e, producers, consumers, found)
    _check_cycles(e, steps, producers, found)


def _check_batch_size(
    ensemble: ModelConfig, composing: ModelConfig, found: Findings, at: tuple[str, ...]
) -> None:
    if ensemble.max_batch_size > composing.max_batch_size:
        found.error(
            f"ensemble '{ensemble.name}' allows maximum batch size {ensemble.max_batch_size}, but it contains "
            f"model '{composing.name}' which only allows maximum batch size to be {composing.max_batch_size}",
            f"lower the ensemble's max_batch_size to {composing.max_batch_size} or raise the model's",
            at,
        )


def _check_flow(
    e: str,
    producers: dict[str, tuple[int, TensorEnd]],
    consumers: dict[str, list[tuple[int, TensorEnd | None]]],
    found: Findings,
) -> None:
    for tensor, uses in consumers.items():
        if tensor not in producers:
            where = (
                "an ensemble output"
                if any(end is not None and end.who.startswith("ensemble output") for _, end in uses)
                else "a step input"
            )
            found.error(
                f"ensemble tensor '{tensor}' ({where}) of ensemble '{e}' is not produced by the ensemble "
                "inputs or by any step",
                "map it from an ensemble input or from a step's output_map",
                (f'"{tensor}"',),
            )
            continue
        _, producer = producers[tensor]
        for _, consumer in uses:
            if consumer is None or not producer.data_type:
                continue
            if producer.data_type != consumer.data_type:
                found.error(
                    f"in ensemble {e}, ensemble tensor {tensor}: inconsistent data type: {producer.data_type} "
                    f"is inferred from {producer.who} while {consumer.data_type} is inferred from {consumer.who}",
                    "make the data types agree on both sides of the map",
                    (f'"{tensor}"',),
                )
            elif not _compatible(producer.shape, consumer.shape):
                found.error(
                    f"in ensemble {e}, ensemble tensor {tensor}: inconsistent shape: {_fmt(producer.shape)} "
                    f"is inferred from {producer.who} while {_fmt(consumer.shape)} is inferred from {consumer.who}",
                    "make the dims agree on both sides of the map (the batch dimension comes from "
                    "max_batch_size, not from dims)",
                    (f'"{tensor}"',),
                )
    for tensor, (index, _producer) in producers.items():
        if tensor in consumers:
            continue
        if index < 0:
            found.error(
                f"ensemble input '{tensor}' for ensemble '{e}' is not used",
                "map the ensemble input into a step's input_map, or remove it",
                (f'"{tensor}"',),
            )
        else:
            found.error(
                f"ensemble tensor '{tensor}' is unused in ensemble '{e}'",
                f"step {index} produces it but nothing reads it: remove it from output_map, or use it",
                (f'"{tensor}"',),
            )


def _check_cycles(
    e: str, steps: list[object], producers: dict[str, tuple[int, TensorEnd]], found: Findings
) -> None:
    # step -> steps it needs (through the tensors it reads)
    needs = {
        index: {producers[t][0] for t in step.input_map.values() if t in producers and producers[t][0] >= 0}  # type: ignore[attr-defined]
        for index, step in enumerate(steps)
    }
    state: dict[int, int] = {}  # 1 = visiting, 2 = done

    def visit(node: int, path: list[int]) -> list[int] | None:
        state[node] = 1
        for dependency in needs.get(node, ()):
            if state.get(dependency) == 1:
                return [*path, node, dependency]
            if dependency not in state:
                cycle = visit(dependency, [*path, node])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for node in needs:
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                start = cycle.index(cycle[-1])
                loop = " -> ".join(f"step {i} ({steps[i].model_name})" for i in cycle[start:])  # type: ignore[attr-defined]
                found.error(
                    f"ensemble '{e}' has a cycle: {loop}",
                    "a step may only read tensors made by the ensemble inputs or by steps that do not read its own outputs",
                    ("ensemble_scheduling",),
                )
                return
