"""KServe v2 JSON inference messages with Triton's binary tensor extension: pure functions between wire
bytes and the core InferenceRequest / InferenceResponse.

Request body: a JSON header, then (binary extension) the raw tensors of the inputs that set
`parameters.binary_data_size`, in input order. `header_length` is the value of the
Inference-Header-Content-Length HTTP header (None when absent: the whole body is JSON; 0 means a raw
request, decoded by `decode_raw_request`). Binary tensors are decoded as numpy views on the body, never
copied; BYTES elements are 4-byte little-endian lengths followed by the bytes. BF16 tensors are uint16
arrays holding the raw bits (numpy has no bfloat16).

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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import orjson

from server.protocol import datatypes
from server.protocol.bytes_tensor import as_bytes, serialize_bytes, split_bytes
from server.protocol.errors import ErrorCode, TritonError, invalid_arg, unavailable
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

DEFAULT_MAX_INPUT_SIZE = 64 * 2**20  # tritonserver --http-max-input-size
MAX_JSON_NESTING_DEPTH = 100
_INT64_MAX = 2**63 - 1

ShmView = Callable[[str, int, int], memoryview]
"""(region name, offset, byte size) -> a writable view of exactly those bytes of the region."""

SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."

_DTYPES = datatypes.raw_dtypes()
_SIGNED = frozenset({"INT8", "INT16", "INT32", "INT64"})
_UNSIGNED = frozenset({"UINT8", "UINT16", "UINT32", "UINT64"})
_FLOATING = frozenset({"FP32", "FP64"})
_NO_JSON = frozenset({"FP16", "BF16"})  # only the binary format carries these

# TritonJson's type errors, worded as Triton words them
_NOT_ARRAY = "attempt to access JSON non-array as array"
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"

_MISSING = object()
_EMPTY: dict[str, Any] = {}


def _missing_member(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def _request_prefix(request_id: str) -> str:
    return f"[request id: {request_id or '<id_unknown>'}] "


def _is_uint(value: object) -> bool:
    return type(value) is int and value >= 0


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


def parse_json(data: bytes | bytearray | memoryview) -> Any:
    """A JSON document; errors are Triton's 'failed to parse the request JSON buffer'. Like Triton's
    parser (RapidJSON), NaN and Infinity are accepted."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not len(data):
            raise invalid_arg("failed to parse the request JSON buffer: The document is empty.") from None
        try:  # the standard parser accepts NaN/Infinity, which orjson refuses
            return json.loads(bytes(data), parse_float=_finite_float)
        except (ValueError, RecursionError):
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
        raise invalid_arg(f"Unable to parse 'id': {_NOT_STRING}")
    parameters, binary_default = _request_parameters(document)

    inputs_json = document.get("inputs", _MISSING)
    if inputs_json is _MISSING:
        raise invalid_arg(f"Unable to parse 'inputs': {_missing_member('inputs')}")
    if type(inputs_json) is not list:
        raise invalid_arg(f"Unable to parse 'inputs': {_NOT_ARRAY}")
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
            raise invalid_arg(f"Unable to parse 'outputs': {_NOT_ARRAY}")
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
            if not _is_uint(value) and type(value) is not str:
                raise invalid_arg(f"Unable to parse 'sequence_id': {_NOT_STRING}")
            result[key] = value
        elif key in ("sequence_start", "sequence_end"):
            if type(value) is not bool:
                raise invalid_arg(f"Unable to parse '{key}': {_NOT_BOOL}")
            result[key] = value
        elif key in ("priority", "timeout"):
            if not _is_uint(value):
                raise invalid_arg(f"Unable to parse '{key}': {_NOT_UINT}")
            result[key] = value
        elif key == "binary_data_output":
            if type(value) is not bool:
                raise invalid_arg(f"Unable to parse 'binary_data_output': {_NOT_BOOL}")
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
            raise invalid_arg(f"Unable to parse 'shape': {_missing_member('shape')}")
        raise invalid_arg(f"Unable to parse 'shape': {_NOT_ARRAY}")
    for dim in shape_json:
        if type(dim) is not int or dim < 0 or dim > _INT64_MAX:
            raise invalid_arg(f"Unable to parse 'shape': {_NOT_UINT}")
    shape = tuple(shape_json)
    if name in seen:
        raise invalid_arg(f"{_request_prefix(request_id)}input '{name}' already exists in request")
    seen.add(name)
    if datatype != "BYTES" and datatype not in _DTYPES:
        raise invalid_arg(f"invalid datatype for input {name}")

    if has_binary:
        byte_size = params["binary_data_size"]
        if type(byte_size) is not int or byte_size < 0:
            raise invalid_arg(f"Unable to parse 'binary_data_size': {_NOT_UINT}")
        available = len(body) - position
        if byte_size > available:
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting {byte_size - available} additional bytes "
                f"for model '{model_name}'"
            )
        data = _from_buffer(body, position, byte_size, name, datatype, shape, request_id, model_name)
        return Tensor(name, datatype, shape, data), position + byte_size

    if has_shm:
        region, offset, byte_size = _shm_parameters(params)
        if shm is None:
            raise unavailable(SHM_DISABLED)
        view = shm(region, offset, byte_size)
        data = _from_buffer(view, 0, byte_size, name, datatype, shape, request_id, model_name)
        return Tensor(name, datatype, shape, data), position

    data_json = entry["data"]
    if type(data_json) is not list:
        raise invalid_arg(f"Unable to parse 'data': {_NOT_ARRAY}")
    if datatype in _NO_JSON:
        raise invalid_arg(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for "
            f"input {name}"
        )
    count = math.prod(shape)
    if datatype == "BYTES":
        data = _bytes_from_json(data_json, name, shape, request_id, model_name)
    elif count == 0:
        data = np.empty(shape, _DTYPES[datatype])
    else:
        byte_size = count * _DTYPES[datatype].itemsize
        if byte_size > max_input_size:
            raise invalid_arg(
                f"JSON input '{name}' has a byte_size ({byte_size} bytes) that exceeds the maximum allowed "
                f"value of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
            )
        data = _numbers_from_json(data_json, datatype, count).reshape(shape)
    return Tensor(name, datatype, shape, data), position


def _member_string(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key, _MISSING)
    if value is _MISSING:
        raise invalid_arg(f"Unable to parse '{key}': {_missing_member(key)}")
    if type(value) is not str:
        raise invalid_arg(f"Unable to parse '{key}': {_NOT_STRING}")
    return value


def _shm_parameters(params: dict[str, Any]) -> tuple[str, int, int]:
    region = params.get("shared_memory_region")
    if type(region) is not str:
        raise invalid_arg(f"Unable to parse 'shared_memory_region': {_NOT_STRING}")
    offset = params.get("shared_memory_offset", 0)
    if not _is_uint(offset):
        raise invalid_arg(f"Unable to parse 'shared_memory_offset': {_NOT_UINT}")
    byte_size = params.get("shared_memory_byte_size", 0)
    if not _is_uint(byte_size):
        raise invalid_arg(f"Unable to parse 'shared_memory_byte_size': {_NOT_UINT}")
    return region, offset, byte_size


def _from_buffer(
    buffer: bytes | bytearray | memoryview,
    offset: int,
    byte_size: int,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    """A tensor over `byte_size` bytes of `buffer` at `offset`: a numpy view, not a copy."""
    if datatype == "BYTES":
        return _bytes_from_buffer(buffer, offset, byte_size, name, shape, request_id, model_name)
    dtype = _DTYPES[datatype]
    count = math.prod(shape)
    expected = count * dtype.itemsize
    if byte_size != expected:
        raise invalid_arg(
            f"{_request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {byte_size}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    return np.frombuffer(buffer, dtype, count, offset).reshape(shape)


def _bytes_from_buffer(
    buffer: bytes | bytearray | memoryview,
    offset: int,
    byte_size: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    elements = split_bytes(memoryview(buffer)[offset : offset + byte_size], name)
    return _bytes_array(elements, name, shape, request_id, model_name, from_json=False)


def _bytes_array(
    elements: list[bytes],
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    *,
    from_json: bool,
) -> np.ndarray[Any, Any]:
    expected = math.prod(shape)
    if len(elements) != expected:
        prefix = _request_prefix(request_id)
        if len(elements) < expected or from_json:
            raise invalid_arg(
                f"{prefix}expected {expected} string elements for inference input '{name}' for model "
                f"'{model_name}', got {len(elements)}"
            )
        raise invalid_arg(
            f"{prefix}unexpected number of string elements {len(elements)} for inference input '{name}' "
            f"for model '{model_name}', expecting {expected}"
        )
    array = np.empty(expected, dtype=object)
    array[:] = elements
    return array.reshape(shape)


def _bytes_from_json(
    data: list[Any], name: str, shape: tuple[int, ...], request_id: str, model_name: str
) -> np.ndarray[Any, Any]:
    flat = data if all(type(v) is str for v in data) else _flatten(data)
    elements: list[bytes] = []
    for value in flat:
        if type(value) is not str:
            raise invalid_arg(f"Unable to parse JSON bytes array: {_NOT_STRING}")
        elements.append(value.encode())
    return _bytes_array(elements, name, shape, request_id, model_name, from_json=True)


def _flatten(data: list[Any]) -> list[Any]:
    """Row-major elements of arbitrarily (even raggedly) nested lists, as Triton reads 'data'."""
    flat: list[Any] = []

    def walk(items: list[Any], depth: int) -> None:
        if depth > MAX_JSON_NESTING_DEPTH:
            raise invalid_arg(
                f"Unable to parse 'data': JSON nesting is deeper than {MAX_JSON_NESTING_DEPTH} levels"
            )
        for item in items:
            if type(item) is list:
                walk(item, depth + 1)
            else:
                flat.append(item)

    walk(data, 1)
    return flat


def _numbers_from_json(data: list[Any], datatype: str, count: int) -> np.ndarray[Any, Any]:
    """Numeric or BOOL 'data' as a flat array: numpy reads the parsed list in C (no per-element Python
    work); values of the wrong JSON type fall back to a strict element-by-element check."""
    try:
        array = np.array(data)
    except (ValueError, TypeError):  # ragged or deeper than numpy's 64 dimensions
        array = None
    if array is not None and array.size == count and _fast_kind_ok(array, datatype):
        return array.reshape(-1).astype(_DTYPES[datatype], copy=False)
    flat = _flatten(data)
    checked = _strict_numbers(flat, datatype)
    if len(flat) != count:
        raise invalid_arg(_SHAPE_MISMATCH)
    return checked


def _fast_kind_ok(array: np.ndarray[Any, Any], datatype: str) -> bool:
    kind = array.dtype.kind
    if datatype == "BOOL":
        return kind == "b"
    if datatype in _FLOATING:
        return kind in "iuf"
    if datatype in _SIGNED:
        return kind == "i"
    # unsigned: non-negative integers
    return kind == "u" or (kind == "i" and bool(array.min() >= 0))


def _strict_numbers(flat: list[Any], datatype: str) -> np.ndarray[Any, Any]:
    """Triton's per-element JSON type rules (AsBool, AsInt, AsUInt, AsDouble), then the array."""
    if datatype == "BOOL":
        for value in flat:
            if type(value) is not bool:
                raise invalid_arg(f"Unable to parse 'data': {_NOT_BOOL}")
        return np.array(flat, dtype=np.bool_)
    if datatype in _FLOATING:
        for value in flat:
            if type(value) is not int and type(value) is not float:
                raise invalid_arg(f"Unable to parse 'data': {_NOT_NUMBER}")
        return np.array(flat, dtype=np.float64).astype(_DTYPES[datatype])
    if datatype in _SIGNED:
        for value in flat:
            if type(value) is not int or not -(2**63) <= value <= _INT64_MAX:
                raise invalid_arg(f"Unable to parse 'data': {_NOT_INT}")
        # values are truncated to the type, as Triton's C casts do
        return np.array(flat, dtype=np.int64).astype(_DTYPES[datatype])
    for value in flat:
        if type(value) is not int or not 0 <= value < 2**64:
            raise invalid_arg(f"Unable to parse 'data': {_NOT_UINT}")
    return np.array(flat, dtype=np.uint64).astype(_DTYPES[datatype])


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
            raise invalid_arg(f"Unable to set 'binary_data': {_NOT_BOOL}")
        if binary:
            raise invalid_arg("Output can't set both 'shared_memory_region' and 'binary_data'")
    name = _member_string(entry, "name")
    class_count = params.get("classification", 0)
    if not _is_uint(class_count):
        raise invalid_arg(f"Unable to set 'classification': {_NOT_UINT}")
    if "shared_memory_region" in params:
        region, offset, byte_size = _shm_parameters(params)
        if shm is None:
            raise unavailable(SHM_DISABLED)
        shm(region, offset, byte_size)  # the region and range must exist now, as Triton checks
    elif "binary_data" in params and type(params["binary_data"]) is not bool:
        raise invalid_arg(f"Unable to parse 'binary_data': {_NOT_BOOL}")
    return RequestedOutput(name, class_count, dict(params))


def decode_raw_request(
    body: bytes | bytearray | memoryview,
    model_name: str,
    model_version: str,
    config: Mapping[str, Any],
) -> tuple[InferenceRequest, bool]:
    """A raw binary request (Inference-Header-Content-Length: 0): the whole body is the data of the
    model's only input, batch 1; its shape is deduced from the config (JSON form, as `/config` returns
    it). All outputs are returned binary."""
    prefix = _request_prefix("")
    config_inputs = list(config.get("input", []))
    if len(config_inputs) != 1:
        raise invalid_arg(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config_inputs)} inputs in '{model_name}' model configuration"
        )
    config_input = config_inputs[0]
    name = str(config_input.get("name", ""))
    datatype = _wire_type(str(config_input.get("data_type", "")))
    shape: list[int] = [1] if int(config.get("max_batch_size", 0)) > 0 else []
    dynamic_axis = -1
    element_count = 1
    for dim in config_input.get("dims", []):
        if int(dim) == -1:
            if dynamic_axis != -1:
                raise invalid_arg(
                    f"{prefix}The shape of the raw input '{name}' can not be deduced because there are "
                    "more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
            shape.append(-1)
        else:
            shape.append(int(dim))
            element_count *= int(dim)
    if datatype == "BYTES":
        if dynamic_axis != -1 or element_count != 1:
            raise invalid_arg(
                f"{prefix}For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(body)
        tensor = Tensor(name, datatype, tuple(shape), data.reshape(shape))
    else:
        dtype = _DTYPES.get(datatype)
        if dtype is None:
            raise invalid_arg(f"invalid datatype for input {name}")
        if dynamic_axis != -1:
            unit = element_count * dtype.itemsize
            shape[dynamic_axis] = len(body) // unit if unit else 0
        shape_tuple = tuple(shape)
        data = _from_buffer(body, 0, len(body), name, datatype, shape_tuple, "", model_name)
        tensor = Tensor(name, datatype, shape_tuple, data)
    return InferenceRequest(model_name, model_version, inputs=[tensor]), True


def _wire_type(config_type: str) -> str:
    if config_type == "TYPE_STRING":
        return "BYTES"
    return config_type.removeprefix("TYPE_")


# ------------------------------------------------------------------------------------------ encoding
def encode_response(
    response: InferenceResponse,
    requested: list[RequestedOutput],
    binary_default: bool = False,
    *,
    shm: ShmView | None = None,
) -> tuple[bytes, int | None]:
    """The response body and, when it carries binary tensors, the length of its JSON header (the
    Inference-Header-Content-Length value; None for an all-JSON body).

    Outputs named in `requested` are binary if their parameters say `binary_data: true`, written to
    shared memory if they name a region, JSON otherwise; outputs not named use `binary_default`."""
    wanted = {output.name: output.parameters for output in requested} if requested else None
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes | memoryview] = []
    for tensor in response.outputs:
        params = wanted.get(tensor.name) if wanted is not None else None
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if params is None:
            binary = binary_default
        elif "shared_memory_region" in params:
            _write_shm(tensor, params, shm)
            outputs.append(entry)
            continue
        else:
            binary = params.get("binary_data") is True
        if binary:
            blob, size = tensor_bytes(tensor)
            entry["parameters"] = {"binary_data_size": size}
            if size:
                blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)

    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    encoded = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return encoded, None
    return b"".join([encoded, *blobs]), len(encoded)


def tensor_bytes(tensor: Tensor) -> tuple[bytes | memoryview, int]:
    """The binary-extension bytes of a tensor (a buffer over the array when it is contiguous) and their
    number."""
    if tensor.datatype == "BYTES":
        data = serialize_bytes(tensor.data)
        return data, len(data)
    array = _typed(tensor)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(-1).data.cast("B"), array.nbytes


def _typed(tensor: Tensor) -> np.ndarray[Any, Any]:
    array = np.asarray(tensor.data)
    dtype = _DTYPES.get(tensor.datatype)
    if dtype is None:
        raise TritonError(ErrorCode.INTERNAL, f"Invalid data type for output tensor '{tensor.name}'")
    if array.dtype != dtype:
        if tensor.datatype == "BF16" and array.dtype.itemsize == 2:
            return array.view(dtype)
        array = array.astype(dtype)
    return array


def _json_data(tensor: Tensor) -> Any:
    if tensor.datatype == "BYTES":
        return [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else as_bytes(item).decode()
            for item in np.asarray(tensor.data, dtype=object).reshape(-1)
        ]
    if tensor.datatype in _NO_JSON:
        raise invalid_arg(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    array = _typed(tensor).reshape(-1)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array  # orjson writes contiguous numpy arrays natively


def _write_shm(tensor: Tensor, params: Mapping[str, Any], shm: ShmView | None) -> None:
    region, offset, byte_size = _shm_parameters(dict(params))
    if shm is None:
        raise unavailable(SHM_DISABLED)
    blob, size = tensor_bytes(tensor)
    if size > byte_size:
        raise invalid_arg(
            f"shared memory size specified with the request for output '{tensor.name}' ({byte_size} "
            f"bytes) should be at least {size} bytes to hold the results"
        )
    view = shm(region, offset, byte_size)
    view[:size] = blob
