"""The small interface between the HTTP front end and its transport's fast path: what the transport
reads off an inference request's headers (`InferHeaders`) and what it asks of the front end
(`DirectInference`, which `http.HttpFrontend` implements). The transport knows only this module, so
the front end can be served by any transport and the transport by any app."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from server.protocol.trace import Trace


@dataclass(slots=True)
class InferHeaders:
    """What an inference request's headers say about its body and the answer's encoding."""

    content_length: int = -1  # -1: not given (chunked, or no body)
    header_length: bytes | None = None  # Inference-Header-Content-Length, as sent
    content_encoding: bytes = b""
    accept_encoding: bytes = b""
    traceparent: bytes = b""  # a client's W3C trace context (OpenTelemetry tracing continues it)
    began_ns: int = 0  # when its head was read, taken only while tracing is on
    trace: Trace | None = None  # the request's trace, when it was sampled: the transport ends it
    all: Sequence[tuple[bytes, bytes]] = ()  # every header (--http-header-forward-pattern reads them)

    @classmethod
    def of(cls, headers: list[tuple[bytes, bytes]]) -> InferHeaders:
        """From lower-cased (name, value) pairs, as ASGI and the HTTP protocol hold them."""
        found = cls()
        found.all = headers
        for key, value in headers:
            if key == b"content-length":
                found.content_length = int(value) if value.isdigit() else -1
            elif key == b"inference-header-content-length":
                found.header_length = value
            elif key == b"content-encoding":
                found.content_encoding = value
            elif key == b"accept-encoding":
                found.accept_encoding = value
            elif key == b"traceparent":
                found.traceparent = value
        return found


def carries(headers: list[tuple[bytes, bytes]], required: tuple[bytes, bytes]) -> bool:
    """Whether the first header named required[0] (lower case) has exactly the value required[1]."""
    name, value = required
    for key, found in headers:
        if key == name:
            return found == value
    return False


class Switch(Protocol):
    enabled: bool


class DirectInference(Protocol):
    """An app that answers a whole inference request outside ASGI."""

    max_input_size: int  # bodies larger than this are refused
    # (header, value) every inference request must carry (--http-restricted-api=inference:...), or
    # None; a request without it goes through ASGI, whose route answers the refusal
    restricted_inference: tuple[bytes, bytes] | None

    @property
    def tracer(self) -> Switch:
        """Tracing on anywhere: worth timing a request's head."""

    def infer_target(self, path: bytes) -> tuple[str, str] | None:
        """(model, version) when `path` (a request target without query) is POST-able inference."""

    async def infer_direct(
        self, model: str, version: str, headers: InferHeaders, body: bytes | bytearray
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers without content-length, body) of the answer; never raises."""
