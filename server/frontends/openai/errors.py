"""OpenAI's error objects: `{"error": {"message", "type", "param", "code"}}` with the HTTP status OpenAI
gives (400 a bad parameter, 401 a restricted API, 404 an unknown model, 413 a body over
--http-max-input-size, 500 a model that failed). Clients written for Triton's own OpenAI front end read
FastAPI's `{"detail": message}`: the body carries that key too, with the same message, where Triton's
front end has it (not in a 413, which its middleware answers as OpenAI does)."""

from __future__ import annotations

import orjson

from server.protocol.errors import ErrorCode, TritonError

_TYPES = {401: "authentication_error"}


class OpenAIError(Exception):
    """An answer in OpenAI's error shape; `param` names the request parameter at fault."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        detail: bool = True,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.detail = detail  # FastAPI's `detail` beside it, as Triton's front end answers

    def body(self) -> bytes:
        kind = _TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        error = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return orjson.dumps({"error": error, "detail": self.message} if self.detail else {"error": error})


def too_large(size: int, limit: int) -> OpenAIError:
    """413 for a body over --http-max-input-size, in Triton's front end's words."""
    return OpenAIError(
        413,
        f"Request size of {size} bytes exceeds the maximum allowed input size of {limit} bytes. "
        "Use --http-max-input-size to increase the limit.",
        None,
        "content_too_large",
        detail=False,
    )


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
