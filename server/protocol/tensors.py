"""Tensors on the wire, for every codec: the one place that turns what a request carries into numpy
arrays, with Triton's checks, and output arrays into what a response carries.

Assembling an input (each returns the array of `shape`, or raises INVALID_ARG with Triton's words):
- `from_buffer`: raw little-endian bytes, row-major: a binary-data segment of an HTTP body
  (`binary_data_size`), a raw binary request, a gRPC `raw_input_contents` entry; a numpy view on
  those bytes, never a copy. `from_shm` does the same over a registered shared memory region.
- `from_json`: a JSON 'data' field (nested lists of numbers, booleans or strings).
- `from_contents`: gRPC's typed `InferTensorContents` fields.
The checks: no negative dimension, the byte size is the element count times the datatype's size,
BYTES elements parse (`bytes_codec`, the one home of that format) and there are as many as the
shape holds, BOOL is one byte, FP16 and BF16 are two (BF16 arrays are uint16 holding the raw
bits: numpy has no bfloat16) and travel only as bytes, never as JSON.

Splitting an output: `binary_buffer` (the binary data extension and shared memory: a view on the
array when it is contiguous), `raw_bytes` (gRPC `raw_output_contents`, bytes for protobuf),
`json_data` (a JSON 'data' field, flat), `write_shm` (into the region an output names).

Where Triton's two front ends word or code a failure differently, `wire` says which one asks
(`HTTP` or `GRPC`): a BYTES length indicator cut short, and an output too large for its shared
memory region (INVALID_ARG over HTTP, INTERNAL over gRPC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import numpy as np

from server.protocol import bytes_codec, datatypes
from server.protocol.errors import TritonError, internal, invalid_arg, unavailable
from server.protocol.json_values import (
    INT64_MAX,
    NOT_ARRAY,
    NOT_BOOL,
    NOT_INT,
    NOT_NUMBER,
    NOT_STRING,
    NOT_UINT,
)
from server.protocol.types import Tensor

Wire = Literal["http", "grpc"]
HTTP: Wire = "http"
GRPC: Wire = "grpc"

ShmView = Callable[[str, int, int], memoryview]
"""(region name, offset, byte size) -> a writable view of exactly those bytes of a registered region."""

SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
INVALID = "<invalid>"  # how Triton prints a datatype it does not know
NO_JSON = frozenset({"FP16", "BF16"})  # only bytes carry these
MAX_JSON_NESTING_DEPTH = 100

_DTYPES = datatypes.raw_dtypes()
_SIGNED = frozenset({"INT8", "INT16", "INT32", "INT64"})
_FLOATING = frozenset({"FP32", "FP64"})
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def request_prefix(request_id: str) -> str:
    """How Triton's core starts the messages about a request."""
    return f"[request id: {request_id or '<id_unknown>'}] "


# ------------------------------------------------------------------------------------------ BYTES
def bytes_array(
    elements: list[bytes],
    expected: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    *,
    from_json: bool = False,
) -> np.ndarray[Any, Any]:
    """The BYTES input `name` as an object array of `shape`, once it has exactly `expected` elements.
    Too many are 'unexpected number of string elements', except when they come from a JSON 'data'
    field (`from_json`): then, like too few, 'expected N string elements'."""
    if len(elements) != expected:
        prefix = request_prefix(request_id)
        if len(elements) < expected or from_json:
            raise invalid_arg(
                f"{prefix}expected {expected} string elements for inference input '{name}' for model "
                f"'{model_name}', got {len(elements)}"
            )
        raise invalid_arg(
            f"{prefix}unexpected number of string elements {len(elements)} for inference input '{name}' "
            f"for model '{model_name}', expecting {expected}"
        )
    return bytes_codec.object_array(elements, shape)


# ------------------------------------------------------------------------------------------ bytes in
def _fmt(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def element_count(shape: tuple[int, ...], name: str, request_id: str, model_name: str) -> int:
    """The number of elements of input `name`'s shape; a negative dimension is refused."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(
                f"{request_prefix(request_id)}unexpected shape for input '{name}' for model '{model_name}'. "
                f"Dimensions must not be negative, got {_fmt(shape)}"
            )
        count *= dim
    if count > INT64_MAX:  # Triton counts in int64: refused before anything is sized from it
        raise invalid_arg(
            f"{request_prefix(request_id)}input '{name}' with shape {_fmt(shape)} causes total element "
            f"count to exceed maximum size of {INT64_MAX}"
        )
    return count


def checked_byte_size(count: int, itemsize: int, name: str, datatype: str, shape: tuple[int, ...]) -> int:
    """`count` elements of `itemsize` bytes, refused as Triton refuses it past int64."""
    size = count * itemsize
    if size > INT64_MAX:
        raise invalid_arg(
            f"byte size overflow for input '{name}': shape {_fmt(shape)} of {datatype} is more than "
            f"{INT64_MAX} bytes"
        )
    return size


def _byte_size_mismatch(name: str, request_id: str, model_name: str, expected: int, got: int) -> TritonError:
    return invalid_arg(
        f"{request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
        f"'{model_name}'. Expected {expected}, got {got}"
    )


def from_buffer(
    buffer: bytes | bytearray | memoryview,
    offset: int,
    byte_size: int,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    wire: Wire = HTTP,
) -> np.ndarray[Any, Any]:
    """Input `name` over `byte_size` bytes of `buffer` at `offset`: a numpy view, not a copy. A
    datatype Triton does not know is let through as the bytes, for the core's checks to name it."""
    count = element_count(shape, name, request_id, model_name)
    dtype = _DTYPES.get(datatype)
    if dtype is None:
        view = memoryview(buffer)[offset : offset + byte_size]
        if datatype != "BYTES":
            return np.frombuffer(view, np.uint8)
        short = _grpc_short_length(name, request_id, model_name) if wire == GRPC else None
        elements = bytes_codec.deserialize(view, f"inference input '{name}'", short)
        return bytes_array(elements, count, name, shape, request_id, model_name)
    expected = checked_byte_size(count, dtype.itemsize, name, datatype, shape)
    if byte_size != expected:
        raise _byte_size_mismatch(name, request_id, model_name, expected, byte_size)
    if count == 0:
        return np.empty(shape, dtype)
    array = np.frombuffer(buffer, dtype, count, offset)
    return array if len(shape) == 1 else array.reshape(shape)


def _grpc_short_length(name: str, request_id: str, model_name: str) -> Callable[[int], str]:
    return lambda available: (
        f"{request_prefix(request_id)}incomplete string length indicator for inference input '{name}' "
        f"for model '{model_name}', expecting 4 bytes but only {available} bytes available. Please "
        "make sure the string length indicator is in one buffer."
    )


def from_shm(
    shm: ShmView | None,
    region: str,
    offset: int,
    byte_size: int,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    wire: Wire = HTTP,
) -> np.ndarray[Any, Any]:
    """Input `name` in `byte_size` bytes of a registered shared memory region, viewed in place."""
    if shm is None:
        raise unavailable(SHM_DISABLED)
    view = shm(region, offset, byte_size)
    return from_buffer(view, 0, len(view), name, datatype, shape, request_id, model_name, wire)


# ------------------------------------------------------------------------------------------ JSON in
def from_json(
    data: Any,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    max_input_size: int,
) -> np.ndarray[Any, Any]:
    """Input `name` from its JSON 'data' field, read as Triton reads it: flat or nested row-major, BOOL
    as JSON booleans, integers truncated to the type, FP32/FP64 as doubles, BYTES as strings."""
    if type(data) is not list:
        raise invalid_arg(f"Unable to parse 'data': {NOT_ARRAY}")
    if datatype in NO_JSON:
        raise invalid_arg(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for "
            f"input {name}"
        )
    count = element_count(shape, name, request_id, model_name)
    if datatype == "BYTES":
        flat = data if all(type(v) is str for v in data) else _flatten(data)
        elements: list[bytes] = []
        for value in flat:
            if type(value) is not str:
                raise invalid_arg(f"Unable to parse JSON bytes array: {NOT_STRING}")
            elements.append(value.encode())
        return bytes_array(elements, count, name, shape, request_id, model_name, from_json=True)
    if count == 0:
        return np.empty(shape, _DTYPES[datatype])
    byte_size = checked_byte_size(count, _DTYPES[datatype].itemsize, name, datatype, shape)
    if byte_size > max_input_size:
        raise invalid_arg(
            f"JSON input '{name}' has a byte_size ({byte_size} bytes) that exceeds the maximum allowed "
            f"value of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    return _numbers(data, datatype, count).reshape(shape)


def _flatten(data: list[Any]) -> list[Any]:
    """Row-major elements of arbitrarily (even raggedly) nested lists, as Triton reads 'data'."""
    flat: list[Any] = []

    def walk(items: list[Any], depth: int) -> None:
        if depth > MAX_JSON_NESTING_DEPTH:
            raise invalid_arg(
                f"Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit "
                f"({MAX_JSON_NESTING_DEPTH})"
            )
        for item in items:
            if type(item) is list:
                walk(item, depth + 1)
            else:
                flat.append(item)

    walk(data, 1)
    return flat


def _numbers(data: list[Any], datatype: str, count: int) -> np.ndarray[Any, Any]:
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
                raise invalid_arg(f"Unable to parse 'data': {NOT_BOOL}")
        return np.array(flat, dtype=np.bool_)
    if datatype in _FLOATING:
        for value in flat:
            if type(value) is not int and type(value) is not float:
                raise invalid_arg(f"Unable to parse 'data': {NOT_NUMBER}")
        return np.array(flat, dtype=np.float64).astype(_DTYPES[datatype])
    if datatype in _SIGNED:
        for value in flat:
            if type(value) is not int or not -(2**63) <= value <= INT64_MAX:
                raise invalid_arg(f"Unable to parse 'data': {NOT_INT}")
        # values are truncated to the type, as Triton's C casts do
        return np.array(flat, dtype=np.int64).astype(_DTYPES[datatype])
    for value in flat:
        if type(value) is not int or not 0 <= value < 2**64:
            raise invalid_arg(f"Unable to parse 'data': {NOT_UINT}")
    return np.array(flat, dtype=np.uint64).astype(_DTYPES[datatype])


# ------------------------------------------------------------------------------------------ gRPC contents in
# InferTensorContents fields in the order Triton reads them: (field, the datatypes it may carry, the
# numpy dtype its values are read as, the datatype named when it does not fit). int_contents and
# uint_contents carry the 8- and 16-bit types as 32-bit values of which the low bytes count.
_CONTENT_FIELDS: tuple[tuple[str, frozenset[str], str, str], ...] = (
    ("bool_contents", frozenset({"BOOL"}), "?", "BOOL"),
    ("int_contents", frozenset({"INT8", "INT16", "INT32"}), "<i4", "INT32"),
    ("int64_contents", frozenset({"INT64"}), "<i8", "INT64"),
    ("uint_contents", frozenset({"UINT8", "UINT16", "UINT32"}), "<u4", "UINT32"),
    ("uint64_contents", frozenset({"UINT64"}), "<u8", "UINT64"),
    ("fp32_contents", frozenset({"FP32"}), "<f4", "FP32"),
    ("fp64_contents", frozenset({"FP64"}), "<f8", "FP64"),
    ("bytes_contents", frozenset({"BYTES"}), "O", "BYTES"),
)


def from_contents(tensor: Any, request_id: str, model_name: str) -> np.ndarray[Any, Any]:
    """An InferInputTensor given in the typed `contents` fields, built in C (BYTES aside); Triton's
    checks of which field may carry which datatype, then its byte size (or element count) check."""
    name: str = tensor.name
    datatype: str = tensor.datatype
    shape = tuple(tensor.shape)
    contents = tensor.contents
    declared = datatype if datatype in _DTYPES or datatype == "BYTES" else INVALID
    chosen: tuple[Any, str] | None = None
    for field, carries, numpy_type, field_type in _CONTENT_FIELDS:
        values = getattr(contents, field)
        if not values:
            continue
        if chosen is not None:
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}', "
                "binary data was already supplied."
            )
        if declared not in carries:
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}' of "
                f"type '{field_type}', expected datatype '{declared}'"
            )
        chosen = (values, numpy_type)
    count = element_count(shape, name, request_id, model_name)
    if declared == "BYTES":
        elements = list(chosen[0]) if chosen is not None else []
        return bytes_array(elements, count, name, shape, request_id, model_name)
    if declared == INVALID:  # no field may carry it (only an empty `contents` gets here): the core
        return np.empty(0, np.uint8)  # rejects the datatype
    dtype = _DTYPES[declared]
    if chosen is None:
        array = np.empty(0, dtype)
    else:
        values, numpy_type = chosen
        array = np.array(values, dtype=numpy_type)
        if array.dtype != dtype:  # INT8/INT16/UINT8/UINT16 keep the low bytes of each 32-bit value
            array = array.astype(dtype)
    expected = checked_byte_size(count, dtype.itemsize, name, declared, shape)
    if array.nbytes != expected:
        raise _byte_size_mismatch(name, request_id, model_name, expected, array.nbytes)
    return array.reshape(shape)


# ------------------------------------------------------------------------------------------ outputs
def _typed(tensor: Tensor) -> np.ndarray[Any, Any]:
    """The output's array in its datatype's raw dtype (BF16: its uint16 bits)."""
    array = tensor.data
    dtype = _DTYPES.get(tensor.datatype)
    if dtype is None:
        raise internal(f"Invalid data type for output tensor '{tensor.name}'")
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.dtype != dtype:
        if tensor.datatype == "BF16" and array.itemsize == 2:
            return array.view(dtype)
        array = array.astype(dtype)
    return array


def binary_buffer(tensor: Tensor) -> tuple[bytes | memoryview, int]:
    """An output's bytes (a buffer over the array when it is contiguous) and their number."""
    if tensor.datatype == "BYTES":
        data = bytes_codec.serialize(tensor.data)
        return data, len(data)
    array = _typed(tensor)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(-1).data.cast("B"), array.nbytes


def raw_bytes(tensor: Tensor) -> bytes:
    """An output's bytes as a bytes object (protobuf's `raw_output_contents` takes no buffers)."""
    if tensor.datatype == "BYTES":
        return bytes_codec.serialize(tensor.data)
    return _typed(tensor).tobytes()


def json_data(tensor: Tensor) -> Any:
    """An output's JSON 'data': flat, BYTES as strings."""
    if tensor.datatype == "BYTES":
        return [
            item.decode("utf-8", "replace")
            if isinstance(item, bytes)
            else bytes_codec.as_bytes(item).decode()
            for item in np.asarray(tensor.data, dtype=object).reshape(-1)
        ]
    if tensor.datatype in NO_JSON:
        raise invalid_arg(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    array = _typed(tensor).reshape(-1)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array  # orjson writes contiguous numpy arrays natively


def write_shm(
    tensor: Tensor, shm: ShmView | None, region: str, offset: int, byte_size: int, wire: Wire = HTTP
) -> None:
    """Write an output into the `byte_size` bytes of a shared memory region its request named."""
    if shm is None:
        raise unavailable(SHM_DISABLED)
    blob, size = binary_buffer(tensor)
    if size > byte_size:
        refuse = invalid_arg if wire == HTTP else internal
        raise refuse(
            f"shared memory size specified with the request for output '{tensor.name}' ({byte_size} "
            f"bytes) should be at least {size} bytes to hold the results"
        )
    view = shm(region, offset, byte_size)
    view[:size] = blob
