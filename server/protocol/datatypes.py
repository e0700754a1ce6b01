"""Triton data types, in one table: the wire name (FP32), the config enum name (TYPE_FP32), the
TRITONSERVER_DataType number (11), the element size and the numpy dtype. Every other module asks here.

numpy is imported lazily so that modules needing only the names stay cheap to import.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np


class DataType(NamedTuple):
    wire: str  # as requests, responses and metadata name it
    config: str  # the model config's enum name
    number: int  # TRITONSERVER_DataType (what pb_utils' Tensor.triton_dtype() returns)
    size: int  # bytes per element; 0 = variable (BYTES)
    numpy: str | None  # numpy dtype name; BYTES is an object array of bytes, BF16 has no numpy type


TYPES: tuple[DataType, ...] = (
    DataType("BOOL", "TYPE_BOOL", 1, 1, "bool"),
    DataType("UINT8", "TYPE_UINT8", 2, 1, "uint8"),
    DataType("UINT16", "TYPE_UINT16", 3, 2, "uint16"),
    DataType("UINT32", "TYPE_UINT32", 4, 4, "uint32"),
    DataType("UINT64", "TYPE_UINT64", 5, 8, "uint64"),
    DataType("INT8", "TYPE_INT8", 6, 1, "int8"),
    DataType("INT16", "TYPE_INT16", 7, 2, "int16"),
    DataType("INT32", "TYPE_INT32", 8, 4, "int32"),
    DataType("INT64", "TYPE_INT64", 9, 8, "int64"),
    DataType("FP16", "TYPE_FP16", 10, 2, "float16"),
    DataType("FP32", "TYPE_FP32", 11, 4, "float32"),
    DataType("FP64", "TYPE_FP64", 12, 8, "float64"),
    DataType("BYTES", "TYPE_STRING", 13, 0, "object"),
    DataType("BF16", "TYPE_BF16", 14, 2, None),
)
BY_WIRE: dict[str, DataType] = {t.wire: t for t in TYPES}
BY_CONFIG: dict[str, DataType] = {t.config: t for t in TYPES}

CONFIG_TYPE_NAMES: tuple[str, ...] = tuple(t.config for t in TYPES)
WIRE_TYPE_NAMES: tuple[str, ...] = tuple(t.wire for t in TYPES)  # in TRITONSERVER_DataType order
NUMERIC_TYPE_NAMES: tuple[str, ...] = tuple(t.wire for t in TYPES if t.numpy not in (None, "bool", "object"))
INVALID_NUMBER = 0  # TRITONSERVER_TYPE_INVALID


def config_to_wire(config_type: str) -> str:
    """'TYPE_FP32' -> 'FP32'; 'TYPE_INVALID' (or anything unknown) -> 'INVALID', as Triton prints it."""
    entry = BY_CONFIG.get(config_type)
    return entry.wire if entry else "INVALID"


def wire_to_config(wire_type: str) -> str:
    """'FP32' -> 'TYPE_FP32'; unknown -> 'TYPE_INVALID'."""
    entry = BY_WIRE.get(wire_type)
    return entry.config if entry else "TYPE_INVALID"


def element_size(wire_type: str) -> int:
    """Bytes per element; 0 for BYTES (variable length). A KeyError for an unknown name."""
    return BY_WIRE[wire_type].size


def wire_to_number(wire_type: str) -> int:
    """'FP32' -> 11; 0 (TYPE_INVALID) for an unknown name."""
    entry = BY_WIRE.get(wire_type)
    return entry.number if entry else INVALID_NUMBER


def config_to_number(config_type: str) -> int:
    """'TYPE_FP32' -> 11; 0 (TYPE_INVALID) for an unknown name."""
    entry = BY_CONFIG.get(config_type)
    return entry.number if entry else INVALID_NUMBER


def number_to_wire(number: int) -> str:
    """11 -> 'FP32'; 'INVALID' for anything else."""
    if isinstance(number, int) and 1 <= number <= len(TYPES):
        return TYPES[number - 1].wire  # numbers run 1..14 in table order (tests/unit/test_pb_utils.py checks)
    return "INVALID"


def wire_to_numpy(wire_type: str) -> np.dtype[Any]:
    import numpy as np

    entry = BY_WIRE.get(wire_type)
    if entry is None or entry.numpy is None:
        raise KeyError(f"data type {wire_type} has no numpy equivalent")
    return np.dtype(entry.numpy)


def numpy_to_wire(dtype: Any) -> str:
    """numpy dtype (or anything np.dtype accepts) -> wire name; str/bytes/object arrays are BYTES."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt.kind in ("O", "S", "U"):
        return "BYTES"
    for entry in TYPES:
        if entry.numpy == dt.name:
            return entry.wire
    raise KeyError(f"numpy dtype {dt} has no Triton data type")


@functools.cache
def raw_dtypes() -> dict[str, Any]:
    """Wire type -> little-endian numpy dtype of its raw bytes, as both codecs read and write them
    (BYTES has no fixed-size dtype; BF16 travels as its uint16 bits, numpy has no bfloat16)."""
    import numpy as np

    return {
        t.wire: np.dtype(t.numpy or "uint16").newbyteorder("<")
        for t in TYPES
        if t.size  # size 0: BYTES
    }
