"""OpenAI's error objects: `{"error": {"message", "type", "param", "code"}}` with the HTTP status OpenAI
gives (400 a bad parameter, 401 a restricted API, 404 an unknown model, 500 a model that failed).
Clients written for Triton's own OpenAI front end read FastAPI's `{"detail": message}`: the body carries
that key too, with the same message."""

from __future__ import annotations

import orjson

from server.protocol.errors import ErrorCode, TritonError

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error"}


class OpenAIError(Exception):
    """An answer in OpenAI's error shape; `param` names the request parameter at fault."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> bytes:
        kind = _TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return orjson.dumps({"error": error, "detail": self.message})


def invalid(param: str, message: str) -> OpenAIError:
    """400 naming the parameter: `message` says what is wrong with it."""
    return OpenAIError(400, message, param, "invalid_value")


def unknown_model(name: str) -> OpenAIError:
    return OpenAIError(404, f"Unknown model: {name}", "model", "model_not_found")


def from_triton(error: TritonError, model: str = "", prefix: str = "") -> OpenAIError:
    """A server error (the model's own failure, a request the model refused) with the HTTP status of
    its Triton code, as the KServe HTTP front end answers it; `prefix` says what failed."""
    if error.code is ErrorCode.NOT_FOUND and model and not prefix:
        return unknown_model(model)
    status = error.code.http_status
    return OpenAIError(status, prefix + error.message, None, None if status >= 500 else "model_error")
