"""Reading a request and answering it through ASGI's `receive` and `send`: the whole body within
the size limit, work that the client's disconnect cancels, a response in two messages, and the
lifespan handshake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

from server.frontends.http.content import too_large

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
T = TypeVar("T")

JSON = (b"content-type", b"application/json")
_NOT_FOUND = b'{"error":"Not Found"}'
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'


class Disconnected(Exception):
    """The client went away before sending its whole request."""


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """`work`'s result, once the whole body was read; cancelled (its request leaves the model's
    queue) when the client disconnects first, the only message `receive` still gives."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(receive())
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise Disconnected
        return task.result()
    finally:
        gone.cancel()


@contextlib.asynccontextmanager
async def cancelled_on_disconnect(receive: Receive) -> AsyncIterator[None]:
    """The block runs until the client disconnects (its body already read): then the task is
    cancelled, and the cancellation ends with the block, since what it cancelled was that client's
    (a stream's model request). Any other cancellation goes on."""
    task = asyncio.current_task()
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        if task is not None:
            task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    except asyncio.CancelledError:
        if not gone:
            raise
        if task is not None:
            task.uncancel()
    finally:
        watcher.cancel()


async def read_body(receive: Receive, limit: int, json_only: bool) -> bytes | bytearray:
    """The whole request body, at most `limit` bytes. A body in one piece is returned as is; one in
    several pieces is gathered into a bytearray (so tensors viewing it are writable)."""
    message = await receive()
    if message["type"] != "http.request":
        raise Disconnected
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise too_large(len(body), limit, json_only)
        return body
    gathered = bytearray(body)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Disconnected
        gathered += message.get("body", b"")
        if len(gathered) > limit:
            raise too_large(len(gathered), limit, json_only)
        if not message.get("more_body", False):
            return gathered


async def respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    response_headers = [JSON] if headers is None else headers
    response_headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    await send({"type": "http.response.body", "body": body})


async def not_found(send: Send) -> None:
    await respond(send, 404, _NOT_FOUND)


async def not_allowed(send: Send) -> None:
    await respond(send, 405, _NOT_ALLOWED)


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
