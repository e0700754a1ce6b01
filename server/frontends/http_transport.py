"""uvicorn's httptools protocol, with each response's head and body leaving in one socket write, and
the requests read in one event-loop turn started longest-waiting connection first.

ASGI sends a response as two messages (`http.response.start`, then the body) and uvicorn writes each
to the socket as it comes: two send() calls, two TCP segments and two wake-ups of the client per
response. On loopback each send runs the whole TCP path inline, and profiles of the infer route
showed those two writes as the largest single cost (benchmarks/NOTES.md). Holding the head until the
body follows (at the latest until the end of the event loop's current iteration, so a streamed
response's head is never kept waiting for its first event) makes it one.

The event loop (libuv's level-triggered epoll) hands over readable connections in the kernel's ready
list order, where a connection that was readable at the previous poll keeps its place ahead of one
that became readable since. Under load one connection that misses a turn thus stays at the back,
turn after turn: measured at perf_analyzer concurrency 8, one connection at a time ran at twice the
others' cycle for a second or more, and one request in eight took twice the median latency (the p99).
So the first connection read in a turn is parsed at once (a lone request pays nothing), and the
others' bytes are queued and fed to their parsers at the end of the turn ordered by when each
connection was last answered, longest ago first: the order requests arrived in a closed loop. A
connection that missed a turn thus comes at most second in the next.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HEAD_END = b"\r\n\r\n"


class _CoalescingTransport:
    """An asyncio transport that keeps back a written response head until the next write, and counts
    when it last sent a response (`answered`, in `turns`' count)."""

    __slots__ = ("_flush_handle", "_head", "_loop", "_transport", "_turns", "answered")

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, turns: _TurnOrder | None = None
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._turns = turns
        self._head: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None
        self.answered = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush_handle = None
            if self._turns is not None:
                self.answered = self._turns.tick()
            if len(data) < 65536:
                self._transport.write(head + bytes(data))
            else:  # a large body is not copied into one buffer: a second write costs little next to it
                self._transport.write(head)
                self._transport.write(data)
            return
        if isinstance(data, bytes) and data.startswith(b"HTTP/1.1 ") and data.endswith(_HEAD_END):
            self._head = data
            self._flush_handle = self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        self._flush_handle = None
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


class _TurnOrder:
    """One server's reads in the current loop turn: the first is parsed at once (so a lone request
    costs nothing extra), the others wait for the end of the turn and go longest-unanswered first."""

    __slots__ = ("_count", "_loop", "_open", "_waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: list[CoalescingHttpToolsProtocol] = []
        self._open = False
        self._count = 0

    def tick(self) -> int:
        self._count += 1
        return self._count

    def first(self, protocol: CoalescingHttpToolsProtocol) -> bool:
        """True when `protocol` read first in this turn (parse now); else it waits for `_feed`."""
        if not self._open:
            self._open = True
            self._loop.call_soon(self._feed)
            return True
        self._waiting.append(protocol)
        return False

    def _feed(self) -> None:
        self._open = False
        waiting, self._waiting = self._waiting, []
        if len(waiting) > 1:
            waiting.sort(key=_answered)
        for protocol in waiting:
            try:
                protocol.feed_unparsed()
            except Exception as exc:  # one connection's failure must not starve the others
                self._loop.call_exception_handler(
                    {"message": "HTTP request parsing failed", "exception": exc, "protocol": protocol}
                )


def _answered(protocol: CoalescingHttpToolsProtocol) -> int:
    return protocol.coalescing.answered


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol over a `_CoalescingTransport`, parsing in `_TurnOrder` (pass the class as
    uvicorn.Config(http=...))."""

    coalescing: _CoalescingTransport
    _unparsed: list[bytes]
    _turns: _TurnOrder

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        state = self.server_state  # one per uvicorn server, so one turn order per listening socket
        turns = getattr(state, "tcli_turns", None)
        if turns is None:
            turns = _TurnOrder(asyncio.get_running_loop())
            state.tcli_turns = turns  # type: ignore[attr-defined]
        self._turns = turns
        self._unparsed = []
        self.coalescing = _CoalescingTransport(transport, asyncio.get_running_loop(), turns)
        super().connection_made(self.coalescing)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self._unparsed:  # already waiting in this turn: keep the bytes in order
            self._unparsed.append(data)
        elif self._turns.first(self):
            super().data_received(data)
        else:
            self._unparsed.append(data)

    def feed_unparsed(self) -> None:
        chunks, self._unparsed = self._unparsed, []
        for chunk in chunks:
            if self.parser is None:  # the connection was lost meanwhile
                return
            super().data_received(chunk)

    def connection_lost(self, exc: Exception | None) -> None:
        self.feed_unparsed()  # what was read before the connection went is handled as before
        super().connection_lost(exc)
