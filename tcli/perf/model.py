"""What `tcli perf` needs to know about a model, read from the server's metadata and config, as
perf_analyzer's ModelParser reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tcli.errors import CliError


@dataclass
class InputSpec:
    name: str
    datatype: str  # wire name: FP32, INT32, BYTES, ...
    dims: list[int]  # without the batch dimension; -1 = variable


@dataclass
class ModelInfo:
    name: str
    version: str  # as asked (-x); "" = latest
    max_batch_size: int
    inputs: list[InputSpec]
    outputs: list[str]
    sequence: bool = False  # sequence batcher (directly, or in an ensemble step)
    decoupled: bool = False
    ensemble: bool = False
    # ensemble name -> its steps (name, version; "" = latest), for every ensemble reachable from this model
    composing: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    response_cache: bool = False


def parse_shape_option(text: str) -> tuple[str, list[int]]:
    """--shape NAME:d1,d2,... (perf_analyzer's syntax; the name may itself contain ':')."""
    name, sep, dims = text.rpartition(":")
    if not sep or not name:
        raise CliError(f"--shape '{text}' is not NAME:d1,d2,... (for example --shape INPUT0:1,16)")
    try:
        shape = [int(d) for d in dims.split(",")]
    except ValueError:
        raise CliError(
            f"--shape '{text}': the dimensions must be whole numbers separated by commas (NAME:d1,d2,...)"
        ) from None
    if any(d < 0 for d in shape):
        raise CliError(f"--shape '{text}': dimensions must be 0 or more")
    return name, shape


def _steps(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    steps = []
    for step in (config.get("ensemble_scheduling") or {}).get("step", []) or []:
        version = int(step.get("model_version", -1))
        steps.append((str(step["model_name"]), "" if version < 0 else str(version)))
    return steps


def model_info(
    name: str,
    version: str,
    metadata: Mapping[str, Any],
    config: Mapping[str, Any],
    fetch_config: Callable[[str, str], Mapping[str, Any]] | None = None,
) -> ModelInfo:
    """Inputs, batching, scheduler kind and ensemble steps from the model's metadata and config.
    `fetch_config(name, version)` reads composing models' configs (for nested ensembles and
    sequence models inside ensembles)."""
    max_batch = int(config.get("max_batch_size", 0) or 0)
    inputs = []
    for tensor in metadata.get("inputs", []):
        shape = [int(d) for d in tensor.get("shape", [])]
        if max_batch > 0 and shape:
            shape = shape[1:]  # the metadata shape starts with the batch dimension (-1)
        inputs.append(InputSpec(str(tensor["name"]), str(tensor["datatype"]), shape))
    info = ModelInfo(
        name=name,
        version=version,
        max_batch_size=max_batch,
        inputs=inputs,
        outputs=[str(t["name"]) for t in metadata.get("outputs", [])],
        sequence=config.get("sequence_batching") is not None,
        decoupled=bool((config.get("model_transaction_policy") or {}).get("decoupled", False)),
        ensemble=config.get("platform") == "ensemble" or bool(config.get("ensemble_scheduling")),
        response_cache=bool((config.get("response_cache") or {}).get("enable", False)),
    )
    if info.ensemble:
        pending = [(name, config)]
        while pending:
            ensemble_name, ensemble_config = pending.pop()
            steps = _steps(ensemble_config)
            info.composing[ensemble_name] = steps
            for step_name, step_version in steps:
                if fetch_config is None or step_name in info.composing:
                    continue
                step_config = fetch_config(step_name, step_version)
                if step_config.get("sequence_batching") is not None:
                    info.sequence = True
                if step_config.get("platform") == "ensemble" or step_config.get("ensemble_scheduling"):
                    pending.append((step_name, step_config))
    return info


def resolve_shapes(
    info: ModelInfo, shapes: Sequence[str], allow_variable: bool = False
) -> dict[str, list[int]]:
    """Each input's shape without the batch dimension: the model's, with --shape filling in the
    variable (-1) dimensions. A --shape that names no input or contradicts a fixed dimension is an
    error, and so is a variable dimension left open (unless `allow_variable`: data files may give
    each tensor's shape)."""
    given: dict[str, list[int]] = {}
    names = [spec.name for spec in info.inputs]
    for text in shapes:
        input_name, dims = parse_shape_option(text)
        if input_name not in names:
            raise CliError(
                f"--shape names input '{input_name}', but model '{info.name}' has inputs "
                f"{', '.join(names) or '(none)'}"
            )
        given[input_name] = dims
    resolved: dict[str, list[int]] = {}
    for spec in info.inputs:
        if spec.name in given:
            dims = given[spec.name]
            fits = len(dims) == len(spec.dims) and all(
                m in (-1, d) for m, d in zip(spec.dims, dims, strict=True)
            )
            if not fits:
                raise CliError(
                    f"--shape {spec.name}:{','.join(map(str, dims))} does not fit the model's shape "
                    f"{_shape_text(spec.dims)} for '{spec.name}' (give the shape without the batch dimension)"
                )
            resolved[spec.name] = dims
        elif any(d < 0 for d in spec.dims) and not allow_variable:
            example = ",".join("1" if d < 0 else str(d) for d in spec.dims)
            raise CliError(
                f"input '{spec.name}' has a variable shape {_shape_text(spec.dims)}: give the shape to "
                f"send with --shape {spec.name}:{example}"
            )
        else:
            resolved[spec.name] = list(spec.dims)
    return resolved


def _shape_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"
