"""Writing responses to a connection's transport with each response's head and body in one socket
write.

ASGI sends a response as two messages (`http.response.start`, then the body), and a server that
writes each as it comes makes two send() calls, two TCP segments and two wake-ups of the client per
response. On loopback each send runs the whole TCP path inline, and profiles of the infer route
showed those two writes as the largest single cost (benchmarks/NOTES.md). Holding the head until the
body follows (at the latest until the end of the event loop's current iteration, so a streamed
response's head is never kept waiting for its first event) makes it one.
"""

from __future__ import annotations

import asyncio

from server.frontends.http.turns import TurnOrder

# a body this large is not copied into one buffer behind its head: a second write costs little next to it
COPY_LIMIT = 65536


class ResponseWriter:
    """A connection's transport as responses see it: `hold_head` keeps a head back until the next
    write; `answered` is the TurnOrder count when a response last left."""

    __slots__ = ("_flush_handle", "_head", "_loop", "_transport", "_turns", "answered")

    def __init__(
        self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop, turns: TurnOrder
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._turns = turns
        self._head: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None
        self.answered = 0

    def hold_head(self, head: bytes) -> None:
        """A response head: written with the next write, or alone at the end of this loop iteration."""
        self.flush()
        self._head = head
        self._flush_handle = self._loop.call_soon(self.flush)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is None:
            if data:
                self._transport.write(data)
            return
        self._head = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self.answered = self._turns.tick()
        if len(data) < COPY_LIMIT:
            self._transport.write(head + data)
        else:
            self._transport.write(head)
            self._transport.write(data)

    def write_response(self, response: bytes, body: bytes = b"") -> None:
        """A whole response at once (the fast path's): `response`, then a large `body` if given."""
        self.flush()
        self.answered = self._turns.tick()
        self._transport.write(response)
        if body:
            self._transport.write(body)

    def flush(self) -> None:
        """Write a held head now."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()
