"""Triton's numbers as models see them: request and response flags, TRITONSERVER_DataType values with
their numpy types and names, and BYTES tensors (de)serialised to length-prefixed bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from server.protocol import bytes_codec, datatypes

# ---------------------------------------------------------------------------------------------------
# Constants (values as the real module and its C++ stub define them)
# ---------------------------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# TRITONSERVER_DataType values, as Tensor.triton_dtype() returns them
TYPE_INVALID = datatypes.INVALID_NUMBER
TYPE_BOOL = datatypes.BY_WIRE["BOOL"].number
TYPE_BF16 = datatypes.BY_WIRE["BF16"].number
TYPE_BYTES = datatypes.BY_WIRE["BYTES"].number

# numpy types by TRITONSERVER_DataType, from the one datatype table (BF16 has none)
_NUMPY_TYPES: dict[int, type[Any]] = {t.number: np.dtype(t.numpy).type for t in datatypes.TYPES if t.numpy}
_NUMPY_NAME_TO_TRITON = {t.numpy: t.number for t in datatypes.TYPES if t.numpy and t.numpy != "object"}

# The real module maps TYPE_BOOL to Python's bool (np.dtype(bool) is np.bool_ all the same).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    t.config: bool if t.wire == "BOOL" else np.dtype(t.numpy).type for t in datatypes.TYPES if t.numpy
}


# ---------------------------------------------------------------------------------------------------
# Data types and BYTES tensors
# ---------------------------------------------------------------------------------------------------


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType (1..13) -> numpy type; None for BF16 (14) and unknown values, as Triton."""
    return _NUMPY_TYPES.get(data_type) if isinstance(data_type, int) else None


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
    return bytes_codec.serialize(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[np.object_]:
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes (reshape it as needed).

    Accepts bytes-like objects and uint8 numpy arrays (what the real stub passes). A malformed buffer
    raises a ValueError saying what is wrong."""
    data = encoded_tensor.tobytes() if isinstance(encoded_tensor, np.ndarray) else encoded_tensor
    return bytes_codec.object_array(bytes_codec.deserialize(data))
