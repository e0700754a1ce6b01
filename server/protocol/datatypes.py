"""Triton data types: config enum names (TYPE_FP32), wire names (FP32) and numpy dtypes.

numpy is imported lazily so that modules needing only the names stay cheap to import.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# config enum name -> (wire name, element size in bytes; 0 = variable)
_TYPES: dict[str, tuple[str, int]] = {
    "TYPE_BOOL": ("BOOL", 1),
    "TYPE_UINT8": ("UINT8", 1),
    "TYPE_UINT16": ("UINT16", 2),
    "TYPE_UINT32": ("UINT32", 4),
    "TYPE_UINT64": ("UINT64", 8),
    "TYPE_INT8": ("INT8", 1),
    "TYPE_INT16": ("INT16", 2),
    "TYPE_INT32": ("INT32", 4),
    "TYPE_INT64": ("INT64", 8),
    "TYPE_FP16": ("FP16", 2),
    "TYPE_FP32": ("FP32", 4),
    "TYPE_FP64": ("FP64", 8),
    "TYPE_STRING": ("BYTES", 0),
    "TYPE_BF16": ("BF16", 2),
}
_WIRE_TO_CONFIG = {wire: cfg for cfg, (wire, _) in _TYPES.items()}

CONFIG_TYPE_NAMES: tuple[str, ...] = tuple(_TYPES)
WIRE_TYPE_NAMES: tuple[str, ...] = tuple(_WIRE_TO_CONFIG)

# numpy dtype names per wire type; BYTES is an object array of bytes, BF16 has no numpy type.
_NUMPY_NAMES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BYTES": "object",
}


def config_to_wire(config_type: str) -> str:
    """'TYPE_FP32' -> 'FP32'; 'TYPE_INVALID' (or anything unknown) -> 'INVALID', as Triton prints it."""
    entry = _TYPES.get(config_type)
    return entry[0] if entry else "INVALID"


def wire_to_config(wire_type: str) -> str:
    """'FP32' -> 'TYPE_FP32'; unknown -> 'TYPE_INVALID'."""
    return _WIRE_TO_CONFIG.get(wire_type, "TYPE_INVALID")


def element_size(wire_type: str) -> int:
    """Bytes per element; 0 for BYTES (variable length)."""
    return _TYPES[wire_to_config(wire_type)][1]


def wire_to_numpy(wire_type: str) -> np.dtype[Any]:
    import numpy as np

    name = _NUMPY_NAMES.get(wire_type)
    if name is None:
        raise KeyError(f"data type {wire_type} has no numpy equivalent")
    return np.dtype(name)


def numpy_to_wire(dtype: Any) -> str:
    """numpy dtype (or anything np.dtype accepts) -> wire name; str/bytes/object arrays are BYTES."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt.kind in ("O", "S", "U"):
        return "BYTES"
    for wire, name in _NUMPY_NAMES.items():
        if name == dt.name:
            return wire
    raise KeyError(f"numpy dtype {dt} has no Triton data type")


@functools.cache
def raw_dtypes() -> dict[str, Any]:
    """Wire type -> little-endian numpy dtype of its raw bytes, as both codecs read and write them
    (BYTES has no fixed-size dtype; BF16 travels as its uint16 bits, numpy has no bfloat16)."""
    import numpy as np

    return {
        "BOOL": np.dtype("?"),
        "UINT8": np.dtype("u1"),
        "UINT16": np.dtype("<u2"),
        "UINT32": np.dtype("<u4"),
        "UINT64": np.dtype("<u8"),
        "INT8": np.dtype("i1"),
        "INT16": np.dtype("<i2"),
        "INT32": np.dtype("<i4"),
        "INT64": np.dtype("<i8"),
        "FP16": np.dtype("<f2"),
        "FP32": np.dtype("<f4"),
        "FP64": np.dtype("<f8"),
        "BF16": np.dtype("<u2"),
    }
