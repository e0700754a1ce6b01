"""Triton's rules for `batch_input` and `batch_output` (core `ValidateBatchIO`), worded as Triton words
them with " for <model>" after, plus what tcli finds before Triton's backends would."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.config.validate import Findings, enum_name

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

_INPUT_KINDS = frozenset(
    {
        "BATCH_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
        "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
        "BATCH_ITEM_SHAPE",
        "BATCH_ITEM_SHAPE_FLATTEN",
    }
)


def check_batch_io(config: ModelConfig, found: Findings) -> None:
    m = config.name
    inputs = {i.name for i in config.input}
    outputs = {o.name for o in config.output}
    for batch_input in config.batch_input:
        kind = enum_name(batch_input, "kind")
        at = ("batch_input", kind)
        if kind in _INPUT_KINDS and len(batch_input.source_input) != 1:
            found.error(
                f"batch input kind '{kind}' expects 1 source input, got {len(batch_input.source_input)} for {m}",
                'name the one input it is computed from: source_input: [ "INPUT" ]',
                at,
            )
        data_type = enum_name(batch_input, "data_type")
        if data_type not in ("TYPE_INT32", "TYPE_FP32"):
            found.error(
                f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {m}",
                f"set data_type: TYPE_INT32 (or TYPE_FP32) in the batch_input of kind {kind}, not {data_type}",
                at,
            )
        _check_sources(m, "batch input", batch_input.source_input, inputs, found, at)
        if not batch_input.target_name:
            found.error(
                f"batch input kind '{kind}' has no target_name for {m}",
                'name the model input it feeds: target_name: [ "INDEX" ]',
                at,
            )
        for target in batch_input.target_name:
            if target in inputs:
                found.error(
                    f"batch input target name '{target}' is also an input of the configuration for {m}",
                    "a batch input is made by the server, not sent by clients: remove it from input, "
                    "or give the batch input another target_name",
                    at,
                )
    if config.batch_input and config.backend == "python":
        found.warning(
            f"model '{m}' has batch_input, which the python backend does not provide: its model gets "
            "each request's own tensors",
            "remove batch_input, or compute what it gives from the requests in execute()",
            ("batch_input",),
        )
    for batch_output in config.batch_output:
        kind = enum_name(batch_output, "kind")
        at = ("batch_output", kind)
        if len(batch_output.source_input) != 1:
            found.error(
                f"batch output kind '{kind}' expects 1 source input, got {len(batch_output.source_input)} for {m}",
                'name the input whose shape each response takes: source_input: [ "INPUT" ]',
                at,
            )
        _check_sources(m, "batch output", batch_output.source_input, inputs, found, at)
        seen: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                found.error(
                    f"unknown target output name '{target}' for {m}",
                    f"target_name must name an output of the configuration: {', '.join(sorted(outputs))}",
                    at,
                )
            if target in seen:
                found.error(
                    f"target output name '{target}' can only be specified once for {m}",
                    "list each output once in target_name",
                    at,
                )
            seen.add(target)


def _check_sources(
    m: str, what: str, sources: object, inputs: set[str], found: Findings, at: tuple[str, ...]
) -> None:
    for source in sources:  # type: ignore[attr-defined]
        if source not in inputs:
            found.error(
                f"unknown source input name '{source}' for {m}",
                f"the {what}'s source_input must name an input of the configuration: {', '.join(sorted(inputs))}",
                at,
            )
