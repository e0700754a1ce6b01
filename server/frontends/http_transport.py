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

An inference request (POST .../infer with a Content-Length, on a keep-alive HTTP/1.1 connection with
nothing else in flight) skips ASGI: its body is gathered as the parser hands it over and the
frontend's `infer_direct` answers it, written as one response. ASGI's per-request machinery (a cycle
object, an event, receive and send coroutines, header checks on the way out) was a fifth of the
server's CPU per request on a cheap model. Every other request, and every case the fast path does
not take, goes to the ASGI app as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server.frontends.http_direct import DirectInference, InferHeaders

_HEAD_END = b"\r\n\r\n"
# the fast path's bodies are gathered in memory before anything is answered; larger ones stream
# through ASGI, which answers an oversized body before it has arrived
FAST_BODY_LIMIT = 1 << 20


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

    def write_response(self, response: bytes) -> None:
        """A whole response (head and body) from the fast path."""
        if self._turns is not None:
            self.answered = self._turns.tick()
        self._transport.write(response)

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

    # the fast path for inference requests ----------------------------------------------------------
    def on_headers_complete(self) -> None:
        cycle = self._fast_cycle()
        if cycle is None:
            super().on_headers_complete()
            return
        self.cycle = cycle  # type: ignore[assignment]

    def _fast_cycle(self) -> _FastCycle | None:
        """A _FastCycle when this request can skip ASGI, else None (nothing changed)."""
        frontend: DirectInference | None = self.app if hasattr(self.app, "infer_direct") else None
        parser = self.parser
        if (
            frontend is None
            or self.expect_100_continue
            or self.pipeline
            or (self.cycle is not None and not self.cycle.response_complete)
            or self.limit_concurrency is not None
            or parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
            or not parser.should_keep_alive()
            or parser.should_upgrade()
        ):
            return None
        url = self.url
        query = url.find(b"?")
        target = frontend.infer_target(url if query < 0 else url[:query])
        if target is None:
            return None
        headers = InferHeaders.of(self.headers)
        if not 0 <= headers.content_length <= min(FAST_BODY_LIMIT, frontend.max_input_size):
            return None  # chunked, or large: ASGI streams it and checks its size as it comes
        return _FastCycle(target[0], target[1], headers)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is _FastCycle:
            cycle.body += body
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is not _FastCycle:
            super().on_message_complete()
            return
        # run at once, in this callback: a model that answers inline (a cheap python model) is done
        # before this returns, with no task to create and no loop turn to wait for
        answer = self._answer(cycle)
        try:
            waiting = answer.send(None)
        except StopIteration:
            return
        task = self.loop.create_task(_resume(answer, waiting))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # the server's shutdown waits for these

    async def _answer(self, cycle: _FastCycle) -> None:
        frontend: DirectInference = self.app
        status, headers, payload = await frontend.infer_direct(
            cycle.model, cycle.version, cycle.headers, cycle.body
        )
        if cycle.disconnected:
            return
        parts = [STATUS_LINE[status]]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"content-length: ", str(len(payload)).encode(), _HEAD_END)
        if len(payload) < 65536:
            parts.append(payload)
            self.coalescing.write_response(b"".join(parts))
        else:  # a large body is not copied into one buffer: a second write costs little next to it
            self.coalescing.write_response(b"".join(parts))
            self.coalescing.write(payload)
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()


async def _resume(started: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Run the rest of a coroutine that was started outside a task and is now waiting on `waiting`
    (the future it yielded, or None for a bare yield), as the task running it would."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                # as a task does with what its coroutine yields: the flag says "yielded, not yet
                # taken"; awaiting a future that still has it set is refused
                waiting._asyncio_future_blocking = False
                await waiting  # its outcome reaches `started` when it resumes below
        except BaseException as exc:
            if waiting is None or not waiting.done():  # this task itself was cancelled
                try:
                    waiting = started.throw(exc)
                except StopIteration:
                    return
                continue
        try:
            waiting = started.send(None)
        except StopIteration:
            return


class _FastCycle:
    """The fast path's stand-in for uvicorn's RequestResponseCycle: the attributes the protocol's
    connection handling reads and sets (disconnect, shutdown, pipelining)."""

    __slots__ = (
        "body",
        "disconnected",
        "headers",
        "keep_alive",
        "message_event",
        "model",
        "response_complete",
        "version",
    )

    def __init__(self, model: str, version: str, headers: InferHeaders) -> None:
        self.model = model
        self.version = version
        self.headers = headers
        self.body = bytearray()
        self.disconnected = False
        self.keep_alive = True  # shutdown() clears it: close once answered
        self.response_complete = False
        self.message_event = self  # connection_lost() sets it

    def set(self) -> None:
        pass
