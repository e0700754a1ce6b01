"""The tensor data of a gRPC inference request as numpy arrays: views (no copy) on the bytes protobuf
hands out for `raw_input_contents` or on a shared memory region, or arrays built in C from the typed
`contents` fields (no per-element Python work, BYTES aside). The checks are Triton's: the shape, which
`contents` field may carry which datatype, the byte size or BYTES element count, with the messages
the real Triton 2.51 answers over gRPC.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from server.protocol import datatypes
from server.protocol.bytes_tensor import split_bytes
from server.protocol.codec_tensors import bytes_array, request_prefix
from server.protocol.errors import invalid_arg

_DTYPES = datatypes.raw_dtypes()
INVALID = "<invalid>"  # how Triton prints a datatype it does not know

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


def _fmt(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _check_shape(shape: tuple[int, ...], name: str, request_id: str, model_name: str) -> int:
    count = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(
                f"{request_prefix(request_id)}unexpected shape for input '{name}' for model '{model_name}'. "
                f"Dimensions must not be negative, got {_fmt(shape)}"
            )
        count *= dim
    return count


def from_buffer(
    buffer: bytes | memoryview,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    """A numpy view (no copy) of a tensor's raw bytes: little-endian values, or BYTES elements each a
    4-byte little-endian length and that many bytes."""
    count = _check_shape(shape, name, request_id, model_name)
    dtype = _DTYPES.get(datatype)
    if dtype is None:
        if datatype == "BYTES":
            return _bytes_elements(buffer, count, name, shape, request_id, model_name)
        return np.frombuffer(buffer, np.uint8)  # an unknown datatype: the core rejects the input
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise invalid_arg(
            f"{request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {len(buffer)}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    array = np.frombuffer(buffer, dtype)
    return array.reshape(shape) if len(shape) != 1 else array


def _bytes_elements(
    buffer: bytes | memoryview,
    expected: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    elements = split_bytes(
        memoryview(buffer),
        name,
        lambda available: (
            f"{request_prefix(request_id)}incomplete string length indicator for inference input '{name}' "
            f"for model '{model_name}', expecting 4 bytes but only {available} bytes available. Please "
            "make sure the string length indicator is in one buffer."
        ),
    )
    return bytes_array(elements, expected, name, shape, request_id, model_name)


def from_contents(tensor: Any, request_id: str, model_name: str) -> np.ndarray[Any, Any]:
    """A tensor given in the typed `contents` fields; Triton's checks of which field may carry which
    datatype, then its byte size (or element count) check."""
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
    count = _check_shape(shape, name, request_id, model_name)
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
    expected = count * dtype.itemsize
    if array.nbytes != expected:
        raise invalid_arg(
            f"{request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {array.nbytes}"
        )
    return array.reshape(shape)
