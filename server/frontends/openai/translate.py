"""OpenAI requests to inference requests of a model in Triton's LLM conventions, and its responses
back, as Triton's OpenAI front end reads such models:

- in: `text_input` (BYTES, the prompt), `stream` (BOOL), `exclude_input_in_output` (BOOL, not `echo`);
  the sampling parameters as one JSON string in `sampling_parameters` (vLLM's convention) and/or as
  separate inputs (`max_tokens`, `temperature`, `top_p`, `seed`, `stop_words` or `stop`,
  `presence_penalty`, `frequency_penalty`: TensorRT-LLM's), and `return_num_input_tokens`,
  `return_num_output_tokens`, `return_logprobs`: each only when the model's config declares it. A
  model that declares none of these takes the sampling parameters as request parameters (the
  generate extension's way), so that a python model reads them with `request.parameters()`;
- out: `text_output` (the text, or with `stream` the text of this response), `num_input_tokens` and
  `num_output_tokens` (usage), `logprobs` (vLLM's JSON: one {token_id: {logprob, rank,
  decoded_token}} per token).

Embedding models take `embedding_request` (vLLM's JSON: {"input", "pooling_params"}) or `text_input`;
they answer a float tensor, or `text_output` holding a JSON list of floats."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.frontends.openai.errors import OpenAIError, invalid
from server.frontends.openai.params import Sampling
from server.protocol import datatypes
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
SAMPLING_PARAMETERS = "sampling_parameters"
ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")
EMBEDDING_REQUEST = "embedding_request"


@dataclass(frozen=True)
class ModelInputs:
    """A model's inputs (name -> wire datatype, dims) and whether it batches."""

    name: str
    batching: bool
    inputs: dict[str, tuple[str, tuple[int, ...]]]
    outputs: frozenset[str]

    def require_text(self) -> None:
        for found, tensor, kind in (
            (self.inputs, TEXT_INPUT, "input"),
            (self.outputs, TEXT_OUTPUT, "output"),
        ):
            if tensor not in found:
                raise OpenAIError(
                    400,
                    f"model '{self.name}' does not follow Triton's LLM conventions: it has no '{tensor}' {kind}",
                    "model",
                    "model_not_supported",
                )

    def takes_logprobs(self) -> bool:
        return "return_logprobs" in self.inputs or SAMPLING_PARAMETERS in self.inputs

    def echoes(self) -> bool:
        return any(name in self.inputs for name in ECHO_INPUTS)


def _tensor(model: ModelInputs, name: str, values: list[Any]) -> Tensor:
    datatype, dims = model.inputs[name]
    shape = list(dims)
    free = [i for i, dim in enumerate(shape) if dim < 0]
    for position, i in enumerate(free):  # the first variable dimension takes the values, the rest 1
        shape[i] = len(values) if position == 0 else 1
    if int(np.prod(shape)) != len(values):
        raise invalid(
            _PARAMETER_OF.get(name, name),
            f"model '{model.name}' takes {int(np.prod(shape))} value(s) in its input '{name}', got {len(values)}",
        )
    if model.batching:
        shape.insert(0, 1)
    if datatype == "BYTES":
        data = np.empty(len(values), dtype=object)
        data[:] = [v.encode() if isinstance(v, str) else v for v in values]
    else:
        data = np.array(values).astype(datatypes.wire_to_numpy(datatype))
    return Tensor(name, datatype, tuple(shape), data.reshape(shape))


# the separate inputs of TensorRT-LLM's convention, from the parameter carrying each
_SEPARATE = {
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
_PARAMETER_OF = {"stop_words": "stop", "stop": "stop", **{v: k for k, v in _SEPARATE.items()}}


def generation_request(
    model: ModelInputs, prompt: str, sampling: Sampling, request_id: str, seed: int | None
) -> InferenceRequest:
    """The inference request asking `model` to continue `prompt` (one choice: `seed` is its own)."""
    inputs = model.inputs
    values: dict[str, Any] = {
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "seed": seed,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "min_tokens": sampling.min_tokens,
        "ignore_eos": sampling.ignore_eos,
    }
    tensors = [_tensor(model, TEXT_INPUT, [prompt])]
    if "stream" in inputs:
        tensors.append(_tensor(model, "stream", [sampling.stream]))
    for name in ECHO_INPUTS:
        if name in inputs:
            tensors.append(_tensor(model, name, [not sampling.echo]))
            break
    separate = False
    for parameter, name in _SEPARATE.items():
        if name in inputs:
            separate = True
            if values[parameter] is not None:
                tensors.append(_tensor(model, name, [values[parameter]]))
    for name in ("stop_words", "stop"):
        if name in inputs:
            separate = True
            if sampling.stop:
                tensors.append(_tensor(model, name, list(sampling.stop)))
            break
    wanted = {k: v for k, v in values.items() if v is not None}
    if sampling.stop:
        wanted["stop"] = sampling.stop
    if sampling.logprobs is not None:
        wanted["logprobs"] = max(sampling.logprobs, 1)
    parameters: dict[str, Any] = {}
    if SAMPLING_PARAMETERS in inputs:
        tensors.append(_tensor(model, SAMPLING_PARAMETERS, [json.dumps(wanted)]))
    elif not separate:  # nowhere else to go: request parameters, as the generate extension passes them
        parameters = {k: json.dumps(v) if isinstance(v, list) else v for k, v in wanted.items()}
    for name, on in (
        ("return_num_input_tokens", True),
        ("return_num_output_tokens", True),
        ("return_logprobs", sampling.logprobs is not None),
    ):
        if name in inputs:
            tensors.append(_tensor(model, name, [on]))
    return InferenceRequest(model.name, "", request_id, tensors, [], parameters)


@dataclass
class Generated:
    """What one response of the model carries."""

    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    logprobs: list[dict[str, Any]] | None


def generated(response: InferenceResponse) -> Generated:
    text, prompt_tokens, completion_tokens, logprobs = "", None, None, None
    for tensor in response.outputs:
        if tensor.name == TEXT_OUTPUT:
            text = "".join(_strings(tensor))
        elif tensor.name == "num_input_tokens":
            prompt_tokens = int(np.asarray(tensor.data).reshape(-1)[0])
        elif tensor.name == "num_output_tokens":
            completion_tokens = int(np.asarray(tensor.data).reshape(-1)[0])
        elif tensor.name == "logprobs":
            found = json.loads("".join(_strings(tensor)) or "null")
            logprobs = found if isinstance(found, list) else None
    return Generated(text, prompt_tokens, completion_tokens, logprobs)


def _strings(tensor: Tensor) -> list[str]:
    return [
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        for v in np.asarray(tensor.data).reshape(-1).tolist()
    ]


def embedding_request(
    model: ModelInputs, text: str, dimensions: int | None, request_id: str
) -> InferenceRequest:
    """The request embedding `text` with `model` (vLLM's `embedding_request`, or `text_input`)."""
    tensors: list[Tensor] = []
    if EMBEDDING_REQUEST in model.inputs:
        pooling = {} if dimensions is None else {"dimensions": [dimensions]}
        document = json.dumps({"input": text, "pooling_params": pooling})
        tensors.append(_tensor(model, EMBEDDING_REQUEST, [document]))
    elif TEXT_INPUT in model.inputs:
        tensors.append(_tensor(model, TEXT_INPUT, [text]))
        if dimensions is not None:
            if "dimensions" not in model.inputs:
                raise invalid("dimensions", f"model '{model.name}' takes no 'dimensions' input")
            tensors.append(_tensor(model, "dimensions", [dimensions]))
    else:
        raise OpenAIError(
            400,
            f"model '{model.name}' is not an embedding model: it has no '{EMBEDDING_REQUEST}' or "
            f"'{TEXT_INPUT}' input",
            "model",
            "model_not_supported",
        )
    for name in ("return_num_input_tokens", "return_num_output_tokens"):
        if name in model.inputs:
            tensors.append(_tensor(model, name, [True]))
    return InferenceRequest(model.name, "", request_id, tensors, [], {})


def embedding(model: str, response: InferenceResponse) -> tuple[list[float], int | None]:
    """The embedding vector a response carries, and the prompt's token count when it says."""
    vector: list[float] | None = None
    tokens = None
    for tensor in response.outputs:
        if tensor.name == "num_input_tokens":
            tokens = int(np.asarray(tensor.data).reshape(-1)[0])
        elif tensor.datatype == "BYTES" and tensor.name == TEXT_OUTPUT and vector is None:
            vector = _json_vector(model, "".join(_strings(tensor)))
        elif tensor.datatype.startswith(("FP", "BF")) and vector is None:
            vector = np.asarray(tensor.data, dtype=np.float64).reshape(-1).tolist()
    if vector is None:
        raise OpenAIError(500, f"model '{model}' answered no embedding (a float output, or '{TEXT_OUTPUT}')")
    return vector, tokens


def _json_vector(model: str, text: str) -> list[float]:
    """vLLM's embedding answer: `text_output` holding a JSON list of numbers (or a list of one)."""
    try:
        found = json.loads(text)
        if isinstance(found, list) and found and isinstance(found[0], list):
            found = found[0]
        return [float(v) for v in found]
    except (ValueError, TypeError):
        raise OpenAIError(
            400,
            f"model '{model}' is not an embedding model: its '{TEXT_OUTPUT}' is not a JSON list of numbers",
            "model",
            "model_not_supported",
        ) from None
