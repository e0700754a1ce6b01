"""Server-sent events for a streamed completion: `data: {chunk}` per event and `data: [DONE]` at the
end. Every stream ends: after the last chunk, after an error (one more event carrying OpenAI's error
object, then `[DONE]`), or, when the client disconnects, by cancelling the work (the model's request
with it). An error before the first event is raised instead, so the caller answers it with its status."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator

import orjson

from server.frontends.http.asgi_io import Receive, Send, cancelled_on_disconnect
from server.frontends.openai.errors import OpenAIError, from_triton
from server.protocol.errors import TritonError

log = logging.getLogger("tcli.server.openai")

HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
DONE = b"data: [DONE]\n\n"


def error_event(error: BaseException) -> bytes:
    if isinstance(error, TritonError):
        error = from_triton(error)
    if not isinstance(error, OpenAIError):
        log.error("unexpected error in a streamed completion", exc_info=error)
        error = OpenAIError(500, f"internal error: {type(error).__name__}: {error}")
    return b"data: " + error.body() + b"\n\n"


async def serve_events(receive: Receive, send: Send, events: AsyncGenerator[dict[str, object], None]) -> None:
    started = False
    async with cancelled_on_disconnect(receive):
        async with contextlib.aclosing(events):
            try:
                async for event in events:
                    if not started:
                        await send({"type": "http.response.start", "status": 200, "headers": list(HEADERS)})
                        started = True
                    body = b"data: " + orjson.dumps(event) + b"\n\n"
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            except Exception as error:
                if not started:
                    raise
                await send({"type": "http.response.body", "body": error_event(error), "more_body": True})
        if not started:
            await send({"type": "http.response.start", "status": 200, "headers": list(HEADERS)})
        await send({"type": "http.response.body", "body": DONE})
