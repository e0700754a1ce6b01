"""Triton's numbers as models see them: request and response flags, TRITONSERVER_DataType values with
their numpy types and names, and BYTES tensors (de)serialised to length-prefixed bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

# ---------------------------------------------------------------------------------------------------
# Constants (values as the real module and its C++ stub define them)
# ---------------------------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# TRITONSERVER_DataType values, as Tensor.triton_dtype() returns them
TYPE_INVALID = 0
TYPE_BOOL = 1
TYPE_BF16 = 14
TYPE_BYTES = 13

_CONFIG_NAMES = (
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
)
_WIRE_NAMES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)

# 1..13 in enum order; BF16 (14) has no numpy type
_NUMPY_TYPES: tuple[type[Any], ...] = (
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.object_,
)
_NUMPY_NAME_TO_TRITON = {
    np.dtype(t).name: i for i, t in enumerate(_NUMPY_TYPES, start=1) if t is not np.object_
}

# The real module maps TYPE_BOOL to Python's bool (np.dtype(bool) is np.bool_ all the same).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


# ---------------------------------------------------------------------------------------------------
# Data types and BYTES tensors
# ---------------------------------------------------------------------------------------------------


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType (1..13) -> numpy type; None for BF16 (14) and unknown values, as Triton."""
    if isinstance(data_type, int) and 1 <= data_type <= len(_NUMPY_TYPES):
        return _NUMPY_TYPES[data_type - 1]
    return None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy type or dtype -> TRITONSERVER_DataType; None when Triton has no such type (e.g. str_).

    Object and bytes_ ('S') dtypes are BYTES (13). Triton 2.51 returns None for an np.dtype('S3')
    though its Tensor accepts such arrays; here both agree on 13."""
    if data_type is None:  # np.dtype(None) would be float64
        return None
    known = _DTYPE_TO_TRITON.get(data_type)  # every Tensor asks: dtype.name is slow in numpy
    if known is not None:
        return known
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in ("O", "S"):
        result: int | None = TYPE_BYTES
    else:
        result = _NUMPY_NAME_TO_TRITON.get(dtype.name)  # the name ignores byte order: '>f4' is float32 too
    if result is not None and isinstance(data_type, np.dtype):
        _DTYPE_TO_TRITON[data_type] = result
    return result


_DTYPE_TO_TRITON: dict[Any, int] = {}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """'TYPE_FP32' -> np.float32; a KeyError for names without a numpy type (TYPE_BF16), as Triton."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | None:
    """Flatten a BYTES tensor (C order) into elements each prefixed by its 4-byte little-endian length.

    bytes elements go as they are, str as UTF-8, anything else as str(x) in UTF-8. Returns None for a
    numeric tensor. An empty tensor gives b"" (Triton 2.51 returns an empty tuple)."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C"):
        raw = isinstance(item, (bytes, bytearray, memoryview))
        data = bytes(item) if raw else str(item).encode("utf-8")
        parts.append(len(data).to_bytes(4, "little"))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[np.object_]:
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes (reshape it as needed).

    Accepts bytes-like objects and uint8 numpy arrays (what the real stub passes)."""
    data = encoded_tensor.tobytes() if isinstance(encoded_tensor, np.ndarray) else bytes(encoded_tensor)
    items: list[bytes] = []
    offset, end = 0, len(data)
    while offset < end:
        if offset + 4 > end:
            raise ValueError(
                f"truncated BYTES tensor: {end - offset} byte(s) left where a 4-byte length is due"
            )
        length = int.from_bytes(data[offset : offset + 4], "little")
        offset += 4
        if offset + length > end:
            raise ValueError(
                f"truncated BYTES tensor: element {len(items)} declares {length} bytes, {end - offset} remain"
            )
        items.append(data[offset : offset + length])
        offset += length
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result
