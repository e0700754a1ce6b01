"""KServe v2 JSON inference requests with Triton's binary tensor extension: wire bytes to the core
InferenceRequest, pure functions (the answer is encoded by `server/protocol/json_response.py`).

Request body: a JSON header, then (binary extension) the raw tensors of the inputs that set
`parameters.binary_data_size`, in input order. `header_length` is the value of the
Inference-Header-Content-Length HTTP header (None when absent: the whole body is JSON; 0 means a raw
request, decoded by `decode_raw_request` in `server/protocol/json_binary.py`, which also reads the
binary tensors). The JSON values are read by `server/protocol/json_values.py`.

Shared memory: inputs and outputs may name a registered region (`shared_memory_region`, `_offset`,
`_byte_size`). The caller passes `shm`, a function returning a writable memoryview of exactly the bytes
asked for (or raising TritonError); without it such requests fail as client shared memory disabled.

Error messages follow Triton's HTTP front end (server/src/http_server.cc) and core request checks. Where
Triton answers malformed input with an INTERNAL error (HTTP 500), these functions raise INVALID_ARG: bad
input is the client's error.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from server.protocol import datatypes
from server.protocol.deep_json import loads_deep
from server.protocol.errors import invalid_arg, unavailable
from server.protocol.json_binary import shm_parameters
from server.protocol.json_values import (
    INT64_MAX,
    NOT_ARRAY,
    NOT_BOOL,
    NOT_STRING,
    NOT_UINT,
    is_uint,
    missing_member,
)
from server.protocol.tensors import SHM_DISABLED, ShmView, from_buffer, from_json, from_shm, request_prefix
from server.protocol.types import InferenceRequest, RequestedOutput, Tensor

DEFAULT_MAX_INPUT_SIZE = 64 * 2**20  # tritonserver --http-max-input-size

_DTYPES = datatypes.raw_dtypes()

_MISSING = object()
_EMPTY: dict[str, Any] = {}


# ------------------------------------------------------------------------------------------ headers
def parse_header_length(value: str | bytes, content_length: int) -> int:
    """The Inference-Header-Content-Length value, checked against the body length."""
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    try:
        length = int(text)
    except ValueError:
        raise invalid_arg(f"Unable to parse Inference-Header-Content-Length, got: {text}") from None
    if length < 0 or length > content_length:
        raise invalid_arg(f"inference header size should be in range (0, {content_length}), got: {text}")
    return length


def parse_json(data: bytes | bytearray | memoryview, any_depth: bool = False) -> Any:
    """A JSON document; errors are Triton's 'failed to parse the request JSON buffer'. Like Triton's
    parser (RapidJSON), NaN and Infinity are accepted. `any_depth`: nesting beyond the parsers' limits
    is read too (by a slower parser), for the repository requests, whose few fields are then checked
    as Triton checks them."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not len(data):
            raise invalid_arg("failed to parse the request JSON buffer: The document is empty.") from None
        try:  # the standard parser accepts NaN/Infinity, which orjson refuses
            return json.loads(bytes(data), parse_float=_finite_float)
        except RecursionError:
            if any_depth:
                try:
                    return loads_deep(bytes(data))
                except ValueError:
                    pass
            raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
        except ValueError:
            raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # a literal too large for a double (the words NaN/Infinity are fine)
        raise ValueError(f"Number too big to be stored in double: {text}")
    return value


# ------------------------------------------------------------------------------------------ decoding
def decode_request(
    body: bytes | bytearray | memoryview,
    model_name: str,
    model_version: str = "",
    *,
    header_length: int | None = None,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    shm: ShmView | None = None,
) -> tuple[InferenceRequest, bool]:
    """Decode an inference request body. Returns the request and the default output kind for outputs
    not listed in the request (True: binary, from `parameters.binary_data_output`)."""
    size = len(body)
    if header_length is None or header_length >= size:
        document = parse_json(body)
        position = size
    else:
        document = parse_json(memoryview(body)[:header_length])
        position = header_length
    if not isinstance(document, dict):
        document = _EMPTY

    request_id = document.get("id", "")
    if type(request_id) is not str:
        raise invalid_arg(f"Unable to parse 'id': {NOT_STRING}")
    parameters, binary_default = _request_parameters(document)

    inputs_json = document.get("inputs", _MISSING)
    if inputs_json is _MISSING:
        raise invalid_arg(f"Unable to parse 'inputs': {missing_member('inputs')}")
    if type(inputs_json) is not list:
        raise invalid_arg(f"Unable to parse 'inputs': {NOT_ARRAY}")
    inputs: list[Tensor] = []
    seen: set[str] = set()
    for entry in inputs_json:
        tensor, position = _decode_input(
            entry, body, position, request_id, model_name, max_input_size, shm, seen
        )
        inputs.append(tensor)
    if position != size:
        raise invalid_arg(f"unexpected additional input data for model '{model_name}'")

    outputs: list[RequestedOutput] = []
    outputs_json = document.get("outputs", _MISSING)
    if outputs_json is not _MISSING:
        if type(outputs_json) is not list:
            raise invalid_arg(f"Unable to parse 'outputs': {NOT_ARRAY}")
        for entry in outputs_json:
            outputs.append(_decode_output(entry, shm))
    request = InferenceRequest(model_name, model_version, request_id, inputs, outputs, parameters)
    return request, binary_default


def _request_parameters(document: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    params = document.get("parameters", _MISSING)
    if params is _MISSING:
        return {}, False
    if type(params) is not dict:
        raise invalid_arg("failed to get request params.: attempt to get members for non-object")
    binary_default = False
    result: dict[str, Any] = {}
    for key, value in params.items():
        if key == "sequence_id":
            if not is_uint(value) and type(value) is not str:
                raise invalid_arg(f"Unable to parse 'sequence_id': {NOT_STRING}")
            result[key] = value
        elif key in ("sequence_start", "sequence_end"):
            if type(value) is not bool:
                raise invalid_arg(f"Unable to parse '{key}': {NOT_BOOL}")
            result[key] = value
        elif key in ("priority", "timeout"):
            if not is_uint(value):
                raise invalid_arg(f"Unable to parse '{key}': {NOT_UINT}")
            result[key] = value
        elif key == "binary_data_output":
            if type(value) is not bool:
                raise invalid_arg(f"Unable to parse 'binary_data_output': {NOT_BOOL}")
            binary_default = value
        elif key.startswith("triton_"):
            raise invalid_arg(
                "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                "specified."
            )
        elif isinstance(value, (str, int, float)):  # bool is an int
            result[key] = value
        else:
            raise invalid_arg(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
            )
    return result, binary_default


def _decode_input(
    entry: Any,
    body: bytes | bytearray | memoryview,
    position: int,
    request_id: str,
    model_name: str,
    max_input_size: int,
    shm: ShmView | None,
    seen: set[str],
) -> tuple[Tensor, int]:
    if type(entry) is not dict:
        entry = _EMPTY
    params = entry.get("parameters", _EMPTY)
    if type(params) is not dict:
        params = _EMPTY
    has_data = "data" in entry
    has_binary = "binary_data_size" in params
    has_shm = "shared_memory_region" in params
    if has_data + has_binary + has_shm != 1:
        given = "".join(
            f" '{field}'"
            for field, present in (
                ("data", has_data),
                ("binary_data_size", has_binary),
                ("shared_memory_region", has_shm),
            )
            if present
        )
        raise invalid_arg(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But" + (f" set{given}" if given else " no field is set")
        )

    name = entry.get("name")
    if type(name) is not str:
        name = _member_string(entry, "name")
    datatype = entry.get("datatype")
    if type(datatype) is not str:
        datatype = _member_string(entry, "datatype")
    shape_json = entry.get("shape", _MISSING)
    if type(shape_json) is not list:
        if shape_json is _MISSING:
            raise invalid_arg(f"Unable to parse 'shape': {missing_member('shape')}")
        raise invalid_arg(f"Unable to parse 'shape': {NOT_ARRAY}")
    for dim in shape_json:
        if type(dim) is not int or dim < 0 or dim > INT64_MAX:
            raise invalid_arg(f"Unable to parse 'shape': {NOT_UINT}")
    shape = tuple(shape_json)
    if name in seen:
        raise invalid_arg(f"{request_prefix(request_id)}input '{name}' already exists in request")
    seen.add(name)
    if datatype != "BYTES" and datatype not in _DTYPES:
        raise invalid_arg(f"invalid datatype for input {name}")

    if has_binary:
        byte_size = params["binary_data_size"]
        if type(byte_size) is not int or byte_size < 0:
            raise invalid_arg(f"Unable to parse 'binary_data_size': {NOT_UINT}")
        available = len(body) - position
        if byte_size > available:
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting {byte_size - available} additional bytes "
                f"for model '{model_name}'"
            )
        data = from_buffer(body, position, byte_size, name, datatype, shape, request_id, model_name)
        return Tensor(name, datatype, shape, data), position + byte_size

    if has_shm:
        region, offset, byte_size = shm_parameters(params)
        data = from_shm(shm, region, offset, byte_size, name, datatype, shape, request_id, model_name)
        return Tensor(name, datatype, shape, data), position

    data = from_json(entry["data"], name, datatype, shape, request_id, model_name, max_input_size)
    return Tensor(name, datatype, shape, data), position


def _member_string(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key, _MISSING)
    if value is _MISSING:
        raise invalid_arg(f"Unable to parse '{key}': {missing_member(key)}")
    if type(value) is not str:
        raise invalid_arg(f"Unable to parse '{key}': {NOT_STRING}")
    return value


def _decode_output(entry: Any, shm: ShmView | None) -> RequestedOutput:
    if type(entry) is not dict:
        entry = _EMPTY
    params = entry.get("parameters", _EMPTY)
    if type(params) is not dict:
        params = _EMPTY
    if "shared_memory_region" in params:
        if "classification" in params:
            raise invalid_arg("Output can't set both 'shared_memory_region' and 'classification'")
        binary = params.get("binary_data", False)
        if type(binary) is not bool:
            raise invalid_arg(f"Unable to set 'binary_data': {NOT_BOOL}")
        if binary:
            raise invalid_arg("Output can't set both 'shared_memory_region' and 'binary_data'")
    name = _member_string(entry, "name")
    class_count = params.get("classification", 0)
    if not is_uint(class_count):
        raise invalid_arg(f"Unable to set 'classification': {NOT_UINT}")
    if "shared_memory_region" in params:
        region, offset, byte_size = shm_parameters(params)
        if shm is None:
            raise unavailable(SHM_DISABLED)
        shm(region, offset, byte_size)  # the region and range must exist now, as Triton checks
    elif "binary_data" in params and type(params["binary_data"]) is not bool:
        raise invalid_arg(f"Unable to parse 'binary_data': {NOT_BOOL}")
    return RequestedOutput(name, class_count, dict(params))
