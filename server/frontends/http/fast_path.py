"""Inference requests answered outside ASGI.

An inference request (POST .../infer with a Content-Length, on a keep-alive HTTP/1.1 connection with
nothing else in flight) skips ASGI: its body is gathered as the parser hands it over and the app's
`infer_direct` (http_direct.DirectInference) answers it, written as one response. ASGI's per-request
machinery (a cycle object, an event, receive and send coroutines, header checks on the way out) was
a fifth of the server's CPU per request on a cheap model. Every other request, and every case the
fast path does not take, goes to the ASGI app.
"""

from __future__ import annotations

import time

from server.frontends.http.direct import DirectInference, InferHeaders, carries
from server.frontends.http.wire import HEAD_END, STATUS_LINE
from server.frontends.http.writer import COPY_LIMIT

# the fast path's bodies are gathered in memory before anything is answered; larger ones stream
# through ASGI, which answers an oversized body before it has arrived
FAST_BODY_LIMIT = 1 << 20


class FastCycle:
    """An inference request on the fast path: where it goes, its headers and its body so far."""

    __slots__ = ("body", "disconnected", "headers", "keep_alive", "model", "response_complete", "version")

    def __init__(self, model: str, version: str, headers: InferHeaders) -> None:
        self.model = model
        self.version = version
        self.headers = headers
        self.body = bytearray()
        self.disconnected = False
        self.keep_alive = True  # the server's shutdown clears it: close once answered
        self.response_complete = False

    def wake(self) -> None:
        """Nothing waits on the body: the answer starts when the request is whole."""


def fast_cycle(app: DirectInference, target: bytes, headers: list[tuple[bytes, bytes]]) -> FastCycle | None:
    """A FastCycle for a POST to `target` (the request target as sent) when `app` answers it directly,
    the request carries the header a restricted inference API requires, and its body has a
    Content-Length it may gather; else None."""
    query = target.find(b"?")
    route = app.infer_target(target if query < 0 else target[:query])
    if route is None:
        return None
    required = app.restricted_inference
    if required is not None and not carries(headers, required):
        return None  # ASGI's route answers the refusal
    found = InferHeaders.of(headers)
    if not 0 <= found.content_length <= min(FAST_BODY_LIMIT, app.max_input_size):
        return None  # chunked, or large: ASGI streams it and checks its size as it comes
    if app.tracer.enabled:  # HTTP_RECV_START, should the request be traced
        found.began_ns = time.monotonic_ns()
    return FastCycle(route[0], route[1], found)


def fast_response(
    cycle: FastCycle, status: int, headers: list[tuple[bytes, bytes]], payload: bytes
) -> tuple[bytes, bytes]:
    """The bytes of the answer `infer_direct` gave to `cycle`'s request: (head with as much of the
    body as is worth copying into one buffer, the rest of the body)."""
    parts = [STATUS_LINE[status]]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if not cycle.keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"content-length: ", str(len(payload)).encode(), HEAD_END)
    if len(payload) < COPY_LIMIT:
        parts.append(payload)
        return b"".join(parts), b""
    return b"".join(parts), payload
