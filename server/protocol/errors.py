"""One error type for the whole server, with Triton's error codes and their mapping per transport."""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """Triton's status codes (TRITONSERVER_Error_Code); the value is the status string prefix."""

    UNKNOWN = "Unknown"
    INTERNAL = "Internal"
    NOT_FOUND = "Not found"
    INVALID_ARG = "Invalid argument"
    UNAVAILABLE = "Unavailable"
    UNSUPPORTED = "Unsupported"
    ALREADY_EXISTS = "Already exists"
    CANCELLED = "Cancelled"

    @property
    def http_status(self) -> int:
        return _HTTP_STATUS.get(self, 400)

    @property
    def grpc_status_name(self) -> str:
        """The grpc.StatusCode member name (kept as a string so this module never imports grpc)."""
        return _GRPC_STATUS[self]


_HTTP_STATUS = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
}

_GRPC_STATUS = {
    ErrorCode.UNKNOWN: "UNKNOWN",
    ErrorCode.INTERNAL: "INTERNAL",
    ErrorCode.NOT_FOUND: "NOT_FOUND",
    ErrorCode.INVALID_ARG: "INVALID_ARGUMENT",
    ErrorCode.UNAVAILABLE: "UNAVAILABLE",
    ErrorCode.UNSUPPORTED: "UNIMPLEMENTED",
    ErrorCode.ALREADY_EXISTS: "ALREADY_EXISTS",
    ErrorCode.CANCELLED: "CANCELLED",
}


class TritonError(Exception):
    """An error with a Triton status code; `str()` is the bare message, as Triton's error bodies carry."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status_string(self) -> str:
        """Triton's `<Code>: <message>` form, used in model state reasons and logs."""
        return f"{self.code.value}: {self.message}"


def invalid_arg(message: str) -> TritonError:
    return TritonError(ErrorCode.INVALID_ARG, message)


def not_found(message: str) -> TritonError:
    return TritonError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> TritonError:
    return TritonError(ErrorCode.UNAVAILABLE, message)


def client_cancelled() -> TritonError:
    """The answer to a request whose client went away before it ran (nobody reads it)."""
    return TritonError(ErrorCode.CANCELLED, "the client cancelled the request")


def unsupported(message: str) -> TritonError:
    return TritonError(ErrorCode.UNSUPPORTED, message)


def internal(message: str) -> TritonError:
    return TritonError(ErrorCode.INTERNAL, message)


# Triton's words for a request naming a model (or version) it cannot serve: clients and scripts match
# them, so every layer that refuses such a request says it through these
def model_not_found(name: str) -> TritonError:
    return not_found(f"Request for unknown model: '{name}' is not found")


def no_available_versions(name: str) -> TritonError:
    return not_found(f"Request for unknown model: '{name}' has no available versions")


def version_not_found(name: str, version: str) -> TritonError:
    return not_found(f"Request for unknown model: '{name}' version {version} is not found")


def version_not_ready(name: str, version: str) -> TritonError:
    return unavailable(f"Request for unknown model: '{name}' version {version} is not at ready state")


def trace_model_unknown(name: str) -> TritonError:
    """The trace settings API's answer for a model that is not ready (its own wording, 400)."""
    return invalid_arg(f"Request for unknown model : {name}")
