"""The values of a KServe v2 JSON request read as Triton reads them (TritonJson): its type errors,
worded as Triton words them. A tensor's 'data' field is read by `server/protocol/tensors.py`.
"""

from __future__ import annotations

INT64_MAX = 2**63 - 1


# TritonJson's type errors, worded as Triton words them
NOT_ARRAY = "attempt to access JSON non-array as array"
NOT_STRING = "attempt to access JSON non-string as string"
NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
NOT_BOOL = "attempt to access JSON non-boolean as boolean"
NOT_NUMBER = "attempt to access JSON non-number as double"


def missing_member(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def is_uint(value: object) -> bool:
    return type(value) is int and value >= 0
