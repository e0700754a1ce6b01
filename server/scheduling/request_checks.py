"""Check an inference request against the model's config before it is queued, with Triton's messages.

Runs on the event loop for every request, so it works from precomputed tables (InputRules) and
touches only shapes and names, never tensor data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import TritonError, invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest

_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
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
        """Raise Triton's error for the first problem Triton would report, checking in Triton's order:
        requested outputs (in name order), the number of inputs, unknown inputs, the batch
        dimension, then each input's datatype and shape. Inputs are visited in reverse request order,
        which is the order Triton's hash map gives back. An output named twice is refused, as current
        Triton refuses it (2.51 answered it once)."""
        model = self.model
        if request.outputs:
            names = [o.name for o in request.outputs]
            unknown = [name for name in names if name not in self.outputs]
            if unknown:
                raise invalid_arg(f"unexpected inference output '{min(unknown)}' for model '{model}'")
            if len(set(names)) != len(names):
                twice = next(name for index, name in enumerate(names) if name in names[:index])
                raise invalid_arg(f"{_prefix(request)}output '{twice}' already exists in request")
        inputs = request.inputs[::-1]
        if len(inputs) > len(self.inputs) or len(inputs) < len(self.required):
            raise self._count_error(request)
        for tensor in inputs:
            if tensor.name not in self.inputs:
                raise invalid_arg(f"unexpected inference input '{tensor.name}' for model '{model}'")
        if len(inputs) < len(self.inputs):  # optional inputs left out: the required ones must be there
            given = {t.name for t in inputs}
            if any(name not in given for name in self.required):
                raise self._count_error(request)
        batched = self.max_batch_size > 0
        if batched:
            batch = 0
            for tensor in inputs:
                if not tensor.shape:
                    raise invalid_arg(
                        f"{_prefix(request)}input '{tensor.name}' has no shape but model requires batch "
                        f"dimension for '{model}'"
                    )
                if batch == 0:
                    batch = tensor.shape[0]
                elif tensor.shape[0] != batch:
                    raise invalid_arg(
                        f"{_prefix(request)}input '{tensor.name}' batch size does not match other inputs "
                        f"for '{model}'"
                    )
            if batch > self.max_batch_size:
                raise invalid_arg(
                    f"{_prefix(request)}inference request batch-size must be <= {self.max_batch_size} "
                    f"for '{model}'"
                )
        for tensor in inputs:
            rule = self.inputs[tensor.name]
            if tensor.datatype != rule.datatype:
                raise invalid_arg(
                    f"{_prefix(request)}inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                    f"but model '{model}' expects '{rule.datatype}'"
                )
            shape = tensor.shape[1:] if batched else tensor.shape
            if not _matches(shape, rule.dims):
                expected = (-1, *rule.dims) if batched else rule.dims
                raise invalid_arg(
                    f"{_prefix(request)}unexpected shape for input '{tensor.name}' for model '{model}'. "
                    f"Expected {_fmt(expected)}, got {_fmt(tensor.shape)}. {_BATCH_NOTE if batched else ''}"
                )

    def _count_error(self, request: InferenceRequest) -> TritonError:
        """Triton's message for a wrong number of inputs, with its list formatting: no space after
        the commas, and a bare ']' when no required input is missing."""
        given = _listed([t.name for t in request.inputs[::-1]]) if request.inputs else "[]"
        missing = _listed([n for n in self.required if n not in {t.name for t in request.inputs}])
        if len(self.required) == len(self.inputs):
            expected = f"expected {len(self.inputs)} inputs"
        else:
            expected = f"expected number of inputs between {len(self.required)} and {len(self.inputs)}"
        return invalid_arg(
            f"{_prefix(request)}{expected} but got {len(request.inputs)} inputs for model '{self.model}'. "
            f"Got input(s) {given}, but missing required input(s) {missing}. "
            "Please provide all required input(s)."
        )


def _prefix(request: InferenceRequest) -> str:
    return f"[request id: {request.id or '<id_unknown>'}] "


def _listed(names: list[str]) -> str:
    """Triton's list: "['a','b']"; with no names a bare "]" (it drops the last character, the '[')."""
    return ("[" + "".join(f"'{n}'," for n in names))[:-1] + "]"


def _matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or s == d for s, d in zip(shape, dims, strict=True))
