"""tcli's HTTP/1.1 server connection: an asyncio Protocol over httptools' request parser.

Each connection parses what it reads (in the order `http_turns.TurnOrder` sets for reads of the same
loop turn) and answers each request in turn: a plain inference request through the fast path
(`http_fast_path`), every other request through the ASGI app (`http_asgi_cycle`), responses written
by `http_writer` with head and body in one write. HTTP/1.1's rules kept here: keep-alive (HTTP/1.1
by default, never HTTP/1.0), `Connection: close`, pipelined requests answered in order (reading
paused while one waits), `Expect: 100-continue`, chunked request bodies (the parser de-chunks them),
a request body read no faster than the app takes it, 400 and a close for a malformed request, 431
for oversized headers, a closed connection seen by the app as `http.disconnect`. Its limits
(http_limits): a head or body that stalls past its timeout is answered 408 and closed, an idle
keep-alive connection closed, and a connection beyond the cap answered 503 and closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, cast
from urllib.parse import unquote

import httptools

from server.frontends.http.asgi_cycle import BODY_HIGH_WATER, ASGIApp, AsgiCycle
from server.frontends.http.direct import DirectInference
from server.frontends.http.fast_path import FastCycle, fast_cycle, fast_response
from server.frontends.http.limits import ConnectionLimits
from server.frontends.http.turns import TurnOrder
from server.frontends.http.wire import plain_response
from server.frontends.http.writer import ResponseWriter
from server.protocol.trace import HTTP_SEND_END, HTTP_SEND_START

log = logging.getLogger("tcli.server.http")

# the request line and headers of one request, at most (larger: 431 and the connection closes)
MAX_HEAD_BYTES = 64 * 1024
_ASGI = {"version": "3.0", "spec_version": "2.3"}


class ServerState:
    """What one listening server's connections share: the app, the turn order of their reads, the
    open connections and the tasks running the ASGI app (shutdown waits for these and for every
    connection to go idle)."""

    def __init__(
        self,
        app: ASGIApp,
        loop: asyncio.AbstractEventLoop,
        limits: ConnectionLimits,
        direct: DirectInference | None = None,
    ) -> None:
        self.app = app
        self.direct = direct  # answers plain inference requests outside ASGI, when given
        self.loop = loop
        self.turns = TurnOrder(loop)
        self.limits = limits
        self.connections: set[HttpProtocol] = set()
        self.served = 0  # connections within the cap (the others are refused with 503)
        self.tasks: set[asyncio.Task[None]] = set()
        self.shutting_down = False
        self.scheme = "http"  # "https" when the server's connections are TLS


def _chunked_with_length(headers: list[tuple[bytes, bytes]]) -> bool:
    names = {name for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


class _HeadTooLarge(Exception):
    pass


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection (pass `lambda: HttpProtocol(state)` to loop.create_server)."""

    writer: ResponseWriter
    paused_writing: asyncio.Future[None] | None

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._loop = state.loop
        self._parser = httptools.HttpRequestParser(self)
        # A body sent chunked with a Content-Length too (requests does this when a caller sets
        # Transfer-Encoding itself; Triton's qa does) is read as chunked, as Triton's server reads it;
        # the connection then closes after the answer, so that no request can hide in the body.
        self._parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self._transport: asyncio.Transport | None = None
        self._unparsed: list[bytes] = []
        self._pipeline: deque[AsgiCycle] = deque()
        self._cycle: AsgiCycle | FastCycle | None = None  # the request being answered
        self._parsing: AsgiCycle | FastCycle | None = None  # the request whose body is being read
        self._ignoring = False  # what else arrives is not read: the connection closes when answered
        self._close_when_done = False
        self._answering: asyncio.Task[None] | None = None  # the fast path's answer
        self._last_request = False  # the request being read is the connection's last
        self._lost = False
        self._read_paused = False
        self.paused_writing = None
        self._server_addr: tuple[str, int] | None = None
        self._client_addr: tuple[str, int] | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._continue_expected = False
        self.last_active = self._loop.time()
        # when the head being read began (None: no head is being read); a new connection waits for one
        self._head_since: float | None = self.last_active
        self._head_begun = False  # a byte of that head has arrived
        self._in_body = False  # a request's body is being read
        self._over_limit = False  # beyond the connection cap: answered 503 once its head is read
        # answered early (beyond the cap, or before the body was read): reading and discarding until
        # the client closes, since _linger_since
        self._lingering = False
        self._linger_since = 0.0

    @property
    def answered(self) -> int:
        return self.writer.answered

    # asyncio.Protocol ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self._transport = transport
        self.writer = ResponseWriter(transport, self._loop, self._state.turns)
        self._server_addr = _address(transport.get_extra_info("sockname"))
        self._client_addr = _address(transport.get_extra_info("peername"))
        state = self._state
        state.connections.add(self)
        if state.served >= state.limits.max_connections:
            self._over_limit = True
        else:
            state.served += 1

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        if self._unparsed:  # already waiting in this turn: keep the bytes in order
            self._unparsed.append(data)
        elif self._state.turns.first(self):
            self._feed(data)
        else:
            self._unparsed.append(data)

    def feed_unparsed(self) -> None:
        chunks, self._unparsed = self._unparsed, []
        for data in chunks:
            self._feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.feed_unparsed()  # what was read before the connection went is handled as if it had stayed
        self._lost = True
        self._state.connections.discard(self)
        if not self._over_limit:
            self._state.served -= 1
        self._head_since = None
        self._in_body = False
        self.writer.flush()
        cycle = self._cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.wake()
            if type(cycle) is FastCycle and self._answering is not None:
                self._answering.cancel()  # nobody waits for the answer: its request leaves the queue
        for waiting in self._pipeline:
            waiting.disconnected = True
        self._pipeline.clear()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self.paused_writing is None:
            self.paused_writing = self._loop.create_future()

    def resume_writing(self) -> None:
        waiter, self.paused_writing = self.paused_writing, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # the connection as a cycle sees it -------------------------------------------------------------
    def pause_reading(self) -> None:
        if not self._read_paused and self._transport is not None and not self._lost:
            self._read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._read_paused and not self._lost and not self._pipeline:
            self._read_paused = False
            assert self._transport is not None
            self._transport.resume_reading()

    def is_closing(self) -> bool:
        return self._lost or self._transport is None or self._transport.is_closing()

    def close(self) -> None:
        """Close once what was written is sent. While the client is still sending a request body
        (answered before it was read: too large, say) the write side closes and what arrives is
        discarded until the client closes, for up to the header timeout: closing at once would have
        the client's kernel reset the connection, often before the client read the answer."""
        self._ignoring = True
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._lingering:
            return
        if self._in_body and not self._lost and transport.can_write_eof():
            self._lingering = True
            self._linger_since = self._loop.time()
            self.writer.flush()
            transport.write_eof()
            return
        self.writer.close()

    def response_complete(self) -> None:
        """The current response was sent whole: start the next pipelined request, if any."""
        now = self.last_active = self._loop.time()
        if self._head_since is not None:  # a pipelined head read meanwhile: its time starts now
            self._head_since = now
        if self.is_closing():
            return
        if self._pipeline:
            cycle = self._pipeline.popleft()
            self._cycle = cycle
            self._start(cycle)
        elif self._close_when_done:
            self.close()
            return
        self.resume_reading()

    def idle(self) -> bool:
        """True when no request of this connection is being answered or waits to be."""
        cycle = self._cycle
        return (cycle is None or cycle.response_complete) and not self._pipeline

    def expire(self, now: float, limits: ConnectionLimits) -> None:
        """Close when a head, a body or an idle keep-alive wait has outlasted its timeout (the sweep
        of http_limits calls this): a stalled client's connection and all it buffered go."""
        if self._lost or self._ignoring:  # answered, or being answered, and closing once it is
            if self._lingering and now - self._linger_since > limits.header_timeout:
                self._drop()  # answered early (see close): the client had its time to read it
            return
        if self._head_since is not None:
            if self.idle() and now - self._head_since > limits.header_timeout:
                if self._head_begun:
                    self._timed_out(f"the request head did not arrive within {limits.header_timeout:g}s")
                else:
                    self._drop()  # nothing sent at all: nothing to answer
        elif self._in_body:
            if not self._read_paused and now - self.last_active > limits.body_timeout:
                self._timed_out(f"no request body arrived for {limits.body_timeout:g}s")
        elif self.idle() and now - self.last_active > limits.keep_alive_timeout:
            self.close()

    def _timed_out(self, what: str) -> None:
        cycle = self._parsing
        if cycle is None or not cycle.response_complete:  # else it was answered: nothing to add
            self._ignoring = True
            self._refuse(408, f"Request Timeout: {what}; the connection is closed.")
        self._drop()

    def _drop(self) -> None:
        """Close now, dropping what the client has not read (it stalled: it may never read it)."""
        self._ignoring = True
        transport = self._transport
        if transport is None:
            return
        self.writer.flush()
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    def shutdown(self) -> None:
        """The server stops: close now if idle, else once the request in flight is answered."""
        if self._lingering:
            self._drop()
            return
        if self.idle():
            self.close()
            return
        self._close_when_done = True
        for cycle in (self._cycle, *self._pipeline):
            if cycle is not None:
                cycle.keep_alive = False

    # parsing ---------------------------------------------------------------------------------------
    def _feed(self, data: bytes) -> None:
        if self._ignoring or self._lost:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._ignoring = True  # the bytes after the upgrade request are not HTTP: close when answered
        except httptools.HttpParserError as exc:
            if self._ignoring:  # bytes after a request that closes the connection: dropped, as they must be
                return
            self._ignoring = True
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse(431, "Request header fields too large.")
            elif isinstance(exc, httptools.HttpParserCallbackError) and exc.__context__ is not None:
                log.error("handling an HTTP request failed", exc_info=exc.__context__)
                self._refuse(500, "Internal Server Error")
            else:
                self._refuse(400, "Invalid HTTP request received.")

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that cannot be read with `status` and close; with a response in flight,
        stop reading and close once it is sent."""
        cycle = self._parsing
        if cycle is not None and cycle is self._cycle and not cycle.response_complete:
            # the request being answered is the broken one (its body, say): its app sees it go away
            started = isinstance(cycle, AsgiCycle) and cycle.response_started
            cycle.disconnected = True
            cycle.wake()
            if not started:
                self.writer.write(plain_response(status, message))
            self.close()
        elif self.idle():
            self.writer.write(plain_response(status, message))
            self.close()
        else:
            self._close_when_done = True

    def on_message_begin(self) -> None:
        if self._head_since is None or not self._head_begun:
            self._head_since = self._loop.time()
        self._head_begun = True
        self._url = b""
        self._headers = []
        self._head_bytes = 0
        self._continue_expected = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge
        if name == b"expect" and value.lower() == b"100-continue":
            self._continue_expected = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._head_since = None
        self._head_begun = False
        self._in_body = True
        if self._over_limit:
            self._refuse_over_limit()
            return
        parser = self._parser
        state = self._state
        method = parser.get_method()
        version = parser.get_http_version()
        keep_alive = version == "1.1" and parser.should_keep_alive() and not parser.should_upgrade()
        if keep_alive and _chunked_with_length(self._headers):
            keep_alive = False
        self._last_request = not keep_alive
        current = self._cycle
        busy = current is not None and not current.response_complete
        direct = state.direct
        if (
            direct is not None
            and method == b"POST"
            and keep_alive
            and not busy
            and not self._continue_expected
            and not state.shutting_down
        ):
            fast = fast_cycle(direct, self._url, self._headers)
            if fast is not None:
                self._cycle = self._parsing = fast
                return
        url = httptools.parse_url(self._url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "method": method.decode("ascii"),
            "scheme": state.scheme,
            "path": unquote(path) if "%" in path else path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "root_path": "",
            "headers": self._headers,
            "client": self._client_addr,
            "server": self._server_addr,
        }
        cycle = AsgiCycle(self, scope, keep_alive and not state.shutting_down, self._continue_expected)
        self._parsing = cycle
        if busy:  # pipelined: answered after the ones before it
            self._pipeline.append(cycle)
            self.pause_reading()
        else:
            self._cycle = cycle
            self._start(cycle)

    def on_body(self, body: bytes) -> None:
        cycle = self._parsing
        if type(cycle) is FastCycle:
            cycle.body += body
        elif cycle is not None and not cycle.response_complete:
            cycle.body += body
            if len(cycle.body) > BODY_HIGH_WATER:
                self.pause_reading()
            cycle.wake()

    def on_message_complete(self) -> None:
        self._in_body = False
        cycle, self._parsing = self._parsing, None
        if self._last_request:
            self._ignoring = True
        if type(cycle) is FastCycle:
            # a task of its own, kept by the connection (shutdown waits for connections to go idle):
            # no shared set and done callback on this path, the hottest one
            self._answering = self._loop.create_task(self._answer(cycle))
        elif isinstance(cycle, AsgiCycle):
            cycle.more_body = False
            cycle.wake()

    def _refuse_over_limit(self) -> None:
        """A connection beyond --http-max-connections, its head read: 503 and a close. A load
        balancer sees a plain, immediate, retryable answer (and may send the request elsewhere), where
        a connection left unaccepted would wait in the kernel's backlog until its connect timeout.
        The write side closes at once; reading goes on, discarding, until the client closes (or the
        header timeout passes), so the client's kernel does not reset the connection under the 503."""
        limit = self._state.limits.max_connections
        self.writer.write(
            plain_response(
                503,
                f"Service Unavailable: the server is serving its maximum of {limit} HTTP connections "
                "(--http-max-connections); retry, or raise the limit.",
            )
        )
        self.close()  # in_body: lingers

    # answering -------------------------------------------------------------------------------------
    def _start(self, cycle: AsgiCycle) -> None:
        tasks = self._state.tasks
        task = self._loop.create_task(cycle.run(self._state.app))
        tasks.add(task)  # the server's shutdown waits for these
        task.add_done_callback(tasks.discard)

    def cancel(self) -> None:
        """Past the shutdown's grace period: stop answering."""
        if self._answering is not None:
            self._answering.cancel()
        self._drop()

    async def _answer(self, cycle: FastCycle) -> None:
        direct = self._state.direct
        assert direct is not None
        try:
            status, headers, payload = await direct.infer_direct(
                cycle.model, cycle.version, cycle.headers, cycle.body
            )
            response, rest = fast_response(cycle, status, headers, payload)
        except Exception:  # infer_direct answers its errors itself: this is a bug, still answered
            log.exception("answering POST .../%s/infer failed", cycle.model)
            response, rest = plain_response(500, "Internal Server Error"), b""
            cycle.keep_alive = False
        trace = cycle.headers.trace
        if cycle.disconnected:
            if trace is not None:
                trace.finish()
            return
        if trace is None:
            self.writer.write_response(response, rest)
        else:
            sending = time.monotonic_ns()
            self.writer.write_response(response, rest)
            trace.sent(HTTP_SEND_START, HTTP_SEND_END, sending)
            trace.finish()
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.close()
        self.response_complete()


def _address(address: Any) -> tuple[str, int] | None:
    if isinstance(address, tuple) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None
