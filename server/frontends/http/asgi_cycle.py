"""One request and its response through an ASGI 3 app: the scope, `receive` (the request body as
the parser hands it over, then `http.disconnect`) and `send` (the response head, held back until the
body follows so both leave in one write; a body without Content-Length in chunks, or up to the
connection's close for HTTP/1.0)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from server.frontends.http.wire import CONTINUE, ResponseHead, chunk, plain_response
from server.frontends.http.writer import ResponseWriter

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]

log = logging.getLogger("tcli.server.http")

# a request body buffered beyond this waits, reading paused, until the app takes it
BODY_HIGH_WATER = 65536


class Connection(Protocol):
    """What a cycle asks of the connection it arrived on."""

    writer: ResponseWriter
    paused_writing: asyncio.Future[None] | None  # while the transport's buffer is full

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...

    def response_complete(self) -> None:
        """The response was sent whole: the next pipelined request may start."""


class AsgiCycle:
    """A request handed to the ASGI app (`run`), fed by the connection's parser (`body`,
    `more_body`, `wake`) and told of disconnection (`disconnected`, `wake`)."""

    __slots__ = (
        "_connection",
        "_expected",
        "_head",
        "_waiter",
        "body",
        "continue_expected",
        "delivered",
        "disconnected",
        "http10",
        "keep_alive",
        "more_body",
        "response_complete",
        "response_started",
        "scope",
    )

    def __init__(
        self, connection: Connection, scope: Scope, keep_alive: bool, continue_expected: bool
    ) -> None:
        self._connection = connection
        self.scope = scope
        self.keep_alive = keep_alive  # the server's shutdown clears it: close once answered
        self.continue_expected = continue_expected
        self.http10 = scope["http_version"] == "1.0"
        self.body = bytearray()
        self.more_body = True
        self.delivered = False  # the whole body was handed to the app
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self._head: ResponseHead | None = None
        self._expected: int | None = None
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Body arrived, the request ended, or the client left: a waiting `receive` looks again."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run(self, app: ASGIApp) -> None:
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.error(
                    "exception in the ASGI app for %s %s",
                    self.scope["method"],
                    self.scope["path"],
                    exc_info=exc,
                )
            if not self.response_started and not self.disconnected:
                self.response_started = self.response_complete = True
                self._connection.writer.write(plain_response(500, "Internal Server Error"))
            self._connection.close()
            if not isinstance(exc, Exception):
                raise
        else:
            if not self.response_complete and not self.disconnected:
                log.error("the ASGI app returned without completing its response to %s", self.scope["path"])
                if not self.response_started:
                    self.response_started = self.response_complete = True
                    self._connection.writer.write(plain_response(500, "Internal Server Error"))
                self._connection.close()

    # ASGI ------------------------------------------------------------------------------------------
    async def receive(self) -> Message:
        connection = self._connection
        if self.continue_expected:
            self.continue_expected = False
            if not connection.is_closing():
                connection.writer.write(CONTINUE)
        if (
            not self.disconnected
            and not self.response_complete
            and (self.delivered or (self.more_body and not self.body))
        ):
            # waiting for body, or, the body all handed over, for the client to go away
            connection.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = bytes(self.body), bytearray()
        if self.more_body:
            connection.resume_reading()
        else:
            self.delivered = True
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        connection = self._connection
        if connection.paused_writing is not None:
            await connection.paused_writing
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected ASGI message 'http.response.start', got {kind!r}")
            self.response_started = True
            if self.continue_expected:  # answered before the body was asked for: the client may never
                self.continue_expected = False  # send it, so this connection cannot carry another request
                self.keep_alive = False
            if self.more_body:  # answered before its body arrived (too large, say): the rest is not read
                self.keep_alive = False
            head = ResponseHead(
                message["status"],
                message.get("headers", ()),
                self.keep_alive,
                self.scope["method"] == "HEAD",
                self.http10,
            )
            self._head = head
            self._expected = head.length
            self.keep_alive = not head.closes
            connection.writer.hold_head(head.data)
            return
        if self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response was complete")
        if kind != "http.response.body":
            raise RuntimeError(f"expected ASGI message 'http.response.body', got {kind!r}")
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        sent = self._head
        assert sent is not None
        if sent.chunked:
            connection.writer.write(chunk(body, not more))
        else:
            expected = self._expected
            if expected is not None:
                if sent.bodiless:  # HEAD, 204, 304: the head says how long, no body follows
                    body = b""
                elif len(body) > expected:
                    raise RuntimeError("response body longer than its Content-Length")
                else:
                    self._expected = expected - len(body)
            connection.writer.write(body)
        if not more:
            if self._expected:
                raise RuntimeError("response body shorter than its Content-Length")
            self.response_complete = True
            self.wake()
            if not self.keep_alive:
                connection.close()
            connection.response_complete()
