"""The generate extension's JSON (POST /v2/models/<m>/generate and generate_stream): a flat JSON object
of inputs and parameters in, one flat JSON object of outputs out, as Triton 2.51 reads and writes them."""

from __future__ import annotations

import math
from typing import Any

import orjson

from server.protocol.errors import TritonError, invalid_arg
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor

GENERATE_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates "
    "various number of responses"
)
_PARAMETER_TYPE = "has invalid type. It should be either 'int', 'bool', or 'string'."
_ELEMENT_ERRORS = {
    "BOOL": "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    "BYTES": "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    "FLOAT": "Unable to parse 'data': attempt to access JSON non-number as double",
    "INT": "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    "UINT": "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
}


class _Members(list[tuple[str, Any]]):
    """A JSON object's members, in document order (duplicates kept)."""


def _malformed(message: str) -> TritonError:
    # Triton answers these with 500; a client's mistake is a 400 here, as for /infer
    return invalid_arg(message)


def _parameter(key: str, value: Any, prefix: str = "") -> Any:
    if type(value) in (bool, int, float, str):
        return value
    raise invalid_arg(f"{prefix}parameter '{key}' {_PARAMETER_TYPE}")


def decode_generate(
    body: bytes | bytearray,
    model: str,
    version: str,
    batching: bool,
    schema: dict[str, tuple[str, tuple[int, ...]]],
) -> InferenceRequest:
    """A generate request body as Triton 2.51 reads it: a JSON object whose keys naming model inputs
    become tensors (a JSON scalar or a flat array, its shape the input's dims with the one variable
    dimension, or the batch dimension, worked out from the element count), `id` the request id, the
    `parameters` object and every other key request parameters (bool, number or string). Errors carry
    Triton's messages, all INVALID_ARG (Triton answers a malformed body with 500)."""
    import json

    try:
        pairs = json.loads(bytes(body), object_pairs_hook=_Members)
    except ValueError as exc:
        message = "The document is empty." if not body.strip() else str(exc)
        raise _malformed(f"failed to parse the request JSON buffer: {message}") from None
    if not isinstance(pairs, _Members):
        raise _malformed("attempt to get members for non-object")
    request_id = ""
    parameters: dict[str, Any] = {}
    inputs: list[Tensor] = []
    seen: set[str] = set()
    for key, value in pairs:
        if key == "id":
            if type(value) is not str:
                raise _malformed("Unable to parse 'id': attempt to access JSON non-string as string")
            request_id = value
            parameters[key] = value
        elif key == "parameters":
            if not isinstance(value, _Members):
                raise _malformed(
                    "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
                )
            for name, item in value:
                parameters[name] = _parameter(name, item, "Converting keyword: 'parameters': ")
        elif key in schema:
            if key in seen:
                raise invalid_arg(f"[request id: <id_unknown>] input '{key}' already exists in request")
            seen.add(key)
            datatype, dims = schema[key]
            inputs.append(_generate_tensor(key, value, datatype, dims, batching))
        else:
            parameters[key] = _parameter(key, value)
    return InferenceRequest(model, version, request_id, inputs, [], parameters)


def _generate_tensor(name: str, value: Any, datatype: str, dims: tuple[int, ...], batching: bool) -> Tensor:
    import numpy as np

    from server.protocol import datatypes

    elements = value if type(value) is list else [value]
    shape = _generate_shape(len(elements), dims, batching)
    if shape is None:
        raise invalid_arg(f"The schema can not convert input '{name}' to tensor with proper shape")
    if any(type(element) is list for element in elements):
        flat: list[Any] = []
        pending = list(reversed(elements))
        while pending:
            element = pending.pop()
            if type(element) is list:
                pending.extend(reversed(element))
            else:
                flat.append(element)
        elements = flat
    kind = (
        datatype
        if datatype in ("BOOL", "BYTES")
        else "FLOAT"
        if datatype in ("FP16", "FP32", "FP64", "BF16")
        else "UINT"
        if datatype.startswith("UINT")
        else "INT"
    )
    for element in elements:
        ok = (
            type(element) is str
            if kind == "BYTES"
            else type(element) is bool
            if kind == "BOOL"
            else type(element) in (int, float)
            if kind == "FLOAT"
            else type(element) is int and (element >= 0 or kind == "INT")
        )
        if not ok:
            raise _malformed(_ELEMENT_ERRORS[kind])
    if len(elements) != math.prod(shape):
        raise _malformed("Unable to parse 'data': Shape does not match true shape of 'data' field")
    if datatype == "BYTES":
        data = np.empty(len(elements), dtype=object)
        data[:] = [element.encode() for element in elements]
    elif datatype == "BF16":
        floats = np.array(elements, dtype=np.float32)
        data = (floats.view(np.uint32) >> 16).astype(np.uint16)
    else:
        dtype = datatypes.wire_to_numpy(datatype)
        data = np.array(elements, dtype=np.float64 if kind == "FLOAT" else None).astype(dtype)
    return Tensor(name, datatype, shape, data.reshape(shape))


def _generate_shape(count: int, dims: tuple[int, ...], batching: bool) -> tuple[int, ...] | None:
    """The input shape for `count` elements: the dims (after the batch dimension when the model
    batches), the one variable dimension taking what is left; with a variable dimension in the dims
    the batch is 1. None when the elements do not fit."""
    shape = [-1, *dims] if batching else list(dims)
    if batching and -1 in dims:
        shape[0] = 1
    free = [index for index, dim in enumerate(shape) if dim < 0]
    fixed = 1
    for dim in shape:
        if dim >= 0:
            fixed *= dim
    if not free:
        return tuple(shape) if fixed == count else None
    if len(free) > 1 or fixed == 0 or count % fixed:
        return None
    shape[free[0]] = count // fixed
    return tuple(shape)


def encode_generate(response: InferenceResponse) -> bytes:
    """A generate response: `id` (when the request had one), `model_name`, `model_version` and every
    output by name, its elements as a flat JSON array (a single element unwrapped), keys sorted as
    Triton writes them."""
    import numpy as np

    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    for tensor in response.outputs:
        data = np.asarray(tensor.data).reshape(-1)
        if tensor.datatype == "BYTES":
            values: list[Any] = [
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in data.tolist()
            ]
        elif tensor.datatype == "BF16":
            values = (data.astype(np.uint32) << 16).view(np.float32).tolist()
        else:
            values = data.tolist()
        document[tensor.name] = values[0] if len(values) == 1 else values
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
