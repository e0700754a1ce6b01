"""Check an inference request against the model's config before it is queued, with Triton's messages.

Runs on the event loop for every request, so it works from precomputed tables (InputRules) and
touches only shapes and names, never tensor data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


def _fmt(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


@dataclass(frozen=True)
class TensorRule:
    datatype: str  # wire name
    dims: tuple[int, ...]  # config dims (what the client sends, after the batch dimension)
    optional: bool = False


class RequestRules:
    """What a model accepts, precomputed from its completed config."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = config.name
        self.max_batch_size = config.max_batch_size
        self.inputs = {
            i.name: TensorRule(datatypes.config_to_wire(enum_name(i, "data_type")), tuple(i.dims), i.optional)
            for i in config.input
        }
        self.outputs = {o.name for o in config.output}
        self.required = [name for name, rule in self.inputs.items() if not rule.optional]

    def check(self, request: InferenceRequest) -> None:
        prefix = f"[request id: {request.id or '<id_unknown>'}] "
        model = self.model
        given = [t.name for t in request.inputs]
        for name in given:
            if name not in self.inputs:
                raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")
        missing = [n for n in self.required if n not in given]
        if missing:
            raise invalid_arg(
                f"{prefix}expected {len(self.required)} inputs but got {len(given)} inputs for model "
                f"'{model}'. Got input(s) {_quoted(given)}, but missing required input(s) {_quoted(missing)}. "
                "Please provide all required input(s)."
            )
        batch = None
        for tensor in request.inputs:
            rule = self.inputs[tensor.name]
            if tensor.datatype != rule.datatype:
                raise invalid_arg(
                    f"{prefix}inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                    f"'{model}' expects '{rule.datatype}'"
                )
            shape = tensor.shape
            if self.max_batch_size > 0:
                expected = (-1, *rule.dims)
                if not shape or not _matches(shape[1:], rule.dims):
                    raise invalid_arg(
                        f"{prefix}unexpected shape for input '{tensor.name}' for model '{model}'. Expected "
                        f"{_fmt(expected)}, got {_fmt(shape)}.{_BATCH_NOTE}"
                    )
                if batch is None:
                    batch = shape[0]
                    if batch > self.max_batch_size:
                        raise invalid_arg(
                            f"{prefix}inference request batch-size must be <= {self.max_batch_size} for '{model}'"
                        )
                elif shape[0] != batch:
                    raise invalid_arg(
                        f"{prefix}input '{tensor.name}' batch size does not match other inputs for '{model}'"
                    )
            elif not _matches(shape, rule.dims):
                raise invalid_arg(
                    f"{prefix}unexpected shape for input '{tensor.name}' for model '{model}'. Expected "
                    f"{_fmt(rule.dims)}, got {_fmt(shape)}"
                )
        seen: set[str] = set()
        for output in request.outputs:
            if output.name not in self.outputs:
                raise invalid_arg(f"unexpected inference output '{output.name}' for model '{model}'")
            if output.name in seen:
                raise invalid_arg(
                    f"{prefix}output '{output.name}' is requested more than once for model '{model}'"
                )
            seen.add(output.name)


def _matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or s == d for s, d in zip(shape, dims, strict=True))


def _quoted(names: list[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"
