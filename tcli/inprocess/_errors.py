"""The in-process API's exceptions: one class per Triton status code, named as the `tritonserver`
package names them, so `except tritonserver.NotFoundError` ports unchanged.

Every error the server raises is a `server.protocol.errors.TritonError` with a code; `from_server`
turns it into the class for that code, keeping the message as Triton writes it (str() is the bare
message, as in `tritonserver`). `code` keeps the status for callers that want it as a value.
"""

from __future__ import annotations

from server.protocol.errors import ErrorCode
from server.protocol.errors import TritonError as ServerError


class TritonError(Exception):
    """Base of every error of the in-process API; `code` is Triton's status (ErrorCode)."""

    code = ErrorCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownError(TritonError):
    code = ErrorCode.UNKNOWN


class InternalError(TritonError):
    code = ErrorCode.INTERNAL


class NotFoundError(TritonError):
    code = ErrorCode.NOT_FOUND


class InvalidArgumentError(TritonError):
    code = ErrorCode.INVALID_ARG


class UnavailableError(TritonError):
    code = ErrorCode.UNAVAILABLE


class UnsupportedError(TritonError):
    code = ErrorCode.UNSUPPORTED


class AlreadyExistsError(TritonError):
    code = ErrorCode.ALREADY_EXISTS


class CancelledError(UnknownError):
    """A cancelled request. `tritonserver` has no class for this code and raises UnknownError; this one
    is an UnknownError too, so code catching that still catches it."""

    code = ErrorCode.CANCELLED


_BY_CODE: dict[ErrorCode, type[TritonError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        InternalError,
        NotFoundError,
        InvalidArgumentError,
        UnavailableError,
        UnsupportedError,
        AlreadyExistsError,
        CancelledError,
    )
}


def from_server(error: ServerError) -> TritonError:
    """The in-process exception for a server error: its code's class, its message."""
    return _BY_CODE.get(error.code, UnknownError)(error.message)
