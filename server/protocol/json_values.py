"""The values of a KServe v2 JSON request read as Triton reads them (TritonJson): its type errors,
worded as Triton words them, and a tensor's 'data' field (nested lists of numbers, booleans or
strings) turned into a numpy array.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from server.protocol import datatypes
from server.protocol.codec_tensors import bytes_array
from server.protocol.errors import invalid_arg

MAX_JSON_NESTING_DEPTH = 100
INT64_MAX = 2**63 - 1

_DTYPES = datatypes.raw_dtypes()
_SIGNED = frozenset({"INT8", "INT16", "INT32", "INT64"})
_UNSIGNED = frozenset({"UINT8", "UINT16", "UINT32", "UINT64"})
_FLOATING = frozenset({"FP32", "FP64"})
NO_JSON = frozenset({"FP16", "BF16"})  # only the binary format carries these

# TritonJson's type errors, worded as Triton words them
NOT_ARRAY = "attempt to access JSON non-array as array"
NOT_STRING = "attempt to access JSON non-string as string"
NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
NOT_BOOL = "attempt to access JSON non-boolean as boolean"
NOT_NUMBER = "attempt to access JSON non-number as double"
_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def missing_member(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def is_uint(value: object) -> bool:
    return type(value) is int and value >= 0


def bytes_from_json(
    data: list[Any], name: str, shape: tuple[int, ...], request_id: str, model_name: str
) -> np.ndarray[Any, Any]:
    flat = data if all(type(v) is str for v in data) else _flatten(data)
    elements: list[bytes] = []
    for value in flat:
        if type(value) is not str:
            raise invalid_arg(f"Unable to parse JSON bytes array: {NOT_STRING}")
        elements.append(value.encode())
    return bytes_array(elements, math.prod(shape), name, shape, request_id, model_name, from_json=True)


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


def numbers_from_json(data: list[Any], datatype: str, count: int) -> np.ndarray[Any, Any]:
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
