"""The errors of the model API: TritonError (attached to a response, not raised) and
TritonModelException (raised by pb_utils calls that fail).
"""

from __future__ import annotations

import enum


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code; member names equal server.protocol.errors.ErrorCode's."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error a model attaches to an InferenceResponse. Not an exception, as in Triton."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: _ErrorCode = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): message must be a str, got {type(message).__name__}")
        if not isinstance(code, _ErrorCode):
            raise TypeError("TritonError(): code must be one of TritonError.UNKNOWN, INTERNAL, ... CANCELLED")
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code=TritonError.{self._code.name})"


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail (bad tensors, BLS, metrics, response senders)."""

    def message(self) -> str:
        return str(self)
