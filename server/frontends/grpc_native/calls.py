"""gRPC calls on HTTP/2 streams: the method table (filled by the generated `add_*_to_server` functions,
as on a grpc server), the length-prefixed messages of a stream, the handler run as a task, and the
servicer context the handler sees (the part of grpc.aio.ServicerContext the front end uses: `abort`,
`invocation_metadata`, `cancelled`, `done`, `time_remaining`, `peer`).

A unary handler starts once the client has sent its message and half-closed the stream; a streaming
one at once, reading its requests from an async iterator. A call ends with trailers carrying its
status (or, when nothing was sent before, trailers only); a client's RST_STREAM cancels the
handler's task, as a grpc.aio server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import grpc

from server.frontends.grpc_native import wire
from server.frontends.grpc_native.wire import CallError
from server.protocol.http2.header_block import literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from server.frontends.grpc_native.connection import Connection, Stream

log = logging.getLogger("tcli.server.grpc")

BACKLOG_LIMIT = 4 * 2**20  # unread request bytes of a streaming call before its window is held back
_OK = grpc.StatusCode.OK


class _CallDetails(NamedTuple):  # grpc.HandlerCallDetails, for generic handlers' service()
    method: str
    invocation_metadata: tuple[tuple[str, str | bytes], ...]


class MethodTable:
    """RPC method handlers by path ("/package.Service/Method"), registered the way generated code
    registers them on a grpc server (`add_XServicer_to_server(servicer, table)`)."""

    def __init__(self) -> None:
        self._methods: dict[str, grpc.RpcMethodHandler | None] = {}
        self._generic: list[grpc.GenericRpcHandler] = []

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def lookup(self, path: str) -> grpc.RpcMethodHandler | None:
        if path in self._methods:
            return self._methods[path]
        found = None
        for generic in self._generic:
            found = generic.service(_CallDetails(path, ()))
            if found is not None:
                break
        if len(self._methods) < 1024:  # clients asking for made-up paths do not grow it forever
            self._methods[path] = found
        return found


class _Head(NamedTuple):
    """What a request's headers say, parsed once per distinct header block."""

    handler: grpc.RpcMethodHandler | None
    timeout: float | None
    encoding: bytes | None
    refusal: bytes | None  # the trailers-only answer refusing the call, or None


class CallServer:
    """Opens a `Call` for each new stream (the connection's `open_call`)."""

    def __init__(self, table: MethodTable, max_message_size: int) -> None:
        self.table = table
        self.max_receive = max_message_size
        self.max_send = max_message_size
        # parsed heads by the identity of the decoded header list (the decoder hands out the same list
        # for a repeated block); the list is kept so that its id is not reused
        self._heads: dict[int, tuple[list[tuple[bytes, bytes]], _Head]] = {}

    def open_call(
        self, conn: Connection, stream: Stream, headers: list[tuple[bytes, bytes]]
    ) -> Call | _Refused:
        known = self._heads.get(id(headers))
        if known is not None and known[0] is headers:
            head = known[1]
        else:
            head = self._parse(headers)
            if len(self._heads) >= 512:
                self._heads.clear()
            self._heads[id(headers)] = (headers, head)
        if head.refusal is not None or head.handler is None:
            conn.send_headers(stream, head.refusal or b"", end=True)
            return _REFUSED
        return Call(self, conn, stream, head, headers)

    def _parse(self, headers: list[tuple[bytes, bytes]]) -> _Head:
        fields: dict[bytes, bytes] = {}
        for name, value in headers:
            if name in _HEAD_FIELDS:
                fields[name] = value
        if fields.get(b":method") != b"POST":
            return _Head(None, None, None, _http_status(b"405"))
        if not fields.get(b"content-type", b"").startswith(b"application/grpc"):
            return _Head(None, None, None, _http_status(b"415"))
        path = fields.get(b":path", b"").decode("latin-1")
        handler = self.table.lookup(path)
        if handler is None:
            return _Head(None, None, None, wire.status_block(grpc.StatusCode.UNIMPLEMENTED, "", True))
        encoding = fields.get(b"grpc-encoding")
        if encoding is not None and not wire.supported_encoding(encoding):
            details = f"Compression algorithm '{encoding.decode('latin-1')}' is not supported"
            refusal = wire.status_block(grpc.StatusCode.UNIMPLEMENTED, details, True)
            return _Head(None, None, None, refusal + literal(b"grpc-accept-encoding", wire.ACCEPT_ENCODING))
        timeout = wire.parse_timeout(fields[b"grpc-timeout"]) if b"grpc-timeout" in fields else None
        return _Head(handler, timeout, encoding, None)


_HEAD_FIELDS = frozenset({b":method", b":path", b"content-type", b"grpc-encoding", b"grpc-timeout"})


def _http_status(status: bytes) -> bytes:
    return literal(b":status", status)


class _Refused:
    """The call of a stream refused at its headers: what follows on the stream is dropped."""

    def on_data(self, data: bytes | bytearray) -> None:
        pass

    def on_end(self) -> None:
        pass

    def on_reset(self) -> None:
        pass

    def cancel(self) -> None:
        pass


_REFUSED = _Refused()


class Call:
    """One gRPC call: its stream's messages in, its handler's answers out; and its servicer context."""

    __slots__ = (
        "_backlog",
        "_cancelled",
        "_conn",
        "_deadline",
        "_done",
        "_encoding",
        "_ended",
        "_handler",
        "_headers",
        "_headers_sent",
        "_max_receive",
        "_max_send",
        "_metadata",
        "_pending",
        "_request",
        "_requests",
        "_stream",
        "_task",
        "_timer",
        "_waiter",
    )

    def __init__(
        self,
        server: CallServer,
        conn: Connection,
        stream: Stream,
        head: _Head,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        self._conn = conn
        self._stream = stream
        self._handler: Any = head.handler  # open_call made sure there is one
        self._headers = headers
        self._encoding = head.encoding
        self._max_receive = server.max_receive
        self._max_send = server.max_send
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None
        self._pending = bytearray()  # bytes of a message not yet complete
        self._request: bytes | None = None  # a unary call's message
        self._requests: deque[tuple[bytes, int]] | None = None  # a streaming call's unread messages
        self._backlog = 0  # their size on the wire
        self._waiter: asyncio.Future[None] | None = None  # the request iterator waiting for more
        self._ended = False  # the client half-closed
        self._done = False  # the status was sent (or the stream is gone)
        self._cancelled = False
        self._headers_sent = False
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        loop = conn.loop
        if head.timeout is not None:
            self._deadline = loop.time() + head.timeout
            self._timer = loop.call_at(self._deadline, self._expired)
        if head.handler is not None and head.handler.request_streaming:
            self._requests = deque()
            self._task = loop.create_task(self._run(_Requests(self)))

    # from the connection ----------------------------------------------------------------------------
    def on_data(self, data: bytes | bytearray) -> None:
        if self._done:
            return
        pending = self._pending
        if not pending and len(data) >= 5:  # the usual case: one whole message in one DATA frame
            length = int.from_bytes(data[1:5], "big")
            if len(data) == 5 + length and length <= self._max_receive:
                self._message(data[0], bytes(data[5:]), len(data))
                return
        pending += data
        while len(pending) >= 5 and not self._done:
            length = int.from_bytes(pending[1:5], "big")
            if length > self._max_receive:
                self._fail(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({length} vs. {self._max_receive})",
                )
                return
            if len(pending) < 5 + length:
                return
            compressed = pending[0]
            with memoryview(pending) as view:
                message = bytes(view[5 : 5 + length])
            del pending[: 5 + length]
            self._message(compressed, message, 5 + length)

    def on_end(self) -> None:
        self._ended = True
        if self._done:
            return
        if self._pending:
            self._fail(grpc.StatusCode.INTERNAL, "the stream ended inside a message")
        elif self._requests is not None:
            self._wake()
        elif self._request is None:
            self._fail(grpc.StatusCode.INTERNAL, "the call ended without its request message")
        else:
            request, self._request = self._request, None
            self._task = self._conn.loop.create_task(self._run_unary(request))

    def on_reset(self) -> None:
        if not self._done:
            self._done = self._cancelled = True
        self._stop()

    # messages in ------------------------------------------------------------------------------------
    def _message(self, compressed: int, message: bytes, size: int) -> None:
        if compressed:
            try:
                message = wire.decompress(self._encoding or b"identity", message, self._max_receive)
            except CallError as error:
                self._fail(error.code, error.details)
                return
        requests = self._requests
        if requests is None:
            if self._request is not None:
                self._fail(grpc.StatusCode.INTERNAL, "a unary call carried more than one request message")
                return
            self._request = message
            return
        requests.append((message, size))
        self._backlog += size
        if self._backlog >= BACKLOG_LIMIT:
            self._stream.hold = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next_request(self) -> Any:
        """The next request message of a streaming call (the request iterator's __anext__)."""
        requests = self._requests
        assert requests is not None
        while not requests:
            if self._ended or self._done:
                raise StopAsyncIteration
            self._waiter = self._conn.loop.create_future()
            await self._waiter
        message, size = requests.popleft()
        self._backlog -= size
        if self._stream.hold and self._backlog < BACKLOG_LIMIT // 2:
            self._stream.hold = False
            self._conn.credit(self._stream)
        deserialize = self._handler.request_deserializer
        try:
            return deserialize(message) if deserialize is not None else message
        except Exception:
            raise CallError(grpc.StatusCode.INTERNAL, "Exception deserializing request!") from None

    # the handler ------------------------------------------------------------------------------------
    async def _run_unary(self, message: bytes) -> None:
        deserialize = self._handler.request_deserializer
        try:
            request = deserialize(message) if deserialize is not None else message
        except Exception:
            self._finish(grpc.StatusCode.INTERNAL, "Exception deserializing request!")
            return
        await self._run(request)

    async def _run(self, request: Any) -> None:
        handler = self._handler
        try:
            if handler.response_streaming:
                behaviour = handler.unary_stream or handler.stream_stream
                async with contextlib.aclosing(behaviour(request, self)) as responses:
                    async for response in responses:
                        self._send(response)
                        if not self._conn.writable(self._stream):
                            await self._conn.wait_writable(self._stream)
                self._finish(_OK, "")
            else:
                behaviour = handler.unary_unary or handler.stream_unary
                self._answer(await behaviour(request, self))
        except CallError as error:
            self._finish(error.code, error.details)
        except asyncio.CancelledError:  # the client went away, the deadline passed, or shutdown
            self._finish(grpc.StatusCode.CANCELLED, "Cancelled")
        except Exception as exc:
            log.exception("unexpected error in gRPC handler of %s", self._stream.id)
            self._finish(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")

    def _serialize(self, response: Any) -> bytes:
        serialize = self._handler.response_serializer
        data: bytes = serialize(response) if serialize is not None else response
        if len(data) > self._max_send:
            raise CallError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({len(data)} vs. {self._max_send})",
            )
        return data

    def _answer(self, response: Any) -> None:
        """A unary call's response and OK status."""
        data = self._serialize(response)
        if self._done:
            return
        self._done = True
        self._stop_timer()
        self._conn.send_answer(
            self._stream, wire.RESPONSE_HEAD, len(data).to_bytes(5, "big"), data, wire.OK_TRAILERS
        )

    def _send(self, response: Any) -> None:
        """One message of a streaming response."""
        data = self._serialize(response)
        if self._done:
            return
        if not self._headers_sent:
            self._headers_sent = True
            self._conn.send_headers(self._stream, wire.RESPONSE_HEAD)
        self._conn.send_data(self._stream, len(data).to_bytes(5, "big") + data)

    def _finish(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with a status (trailers, or trailers only when nothing was sent)."""
        if self._done:
            return
        self._done = True
        self._stop_timer()
        self._conn.send_headers(
            self._stream, wire.status_block(code, details, not self._headers_sent), end=True
        )

    def _fail(self, code: grpc.StatusCode, details: str) -> None:
        """The transport ends the call: status out, handler cancelled."""
        self._finish(code, details)
        self._stop()

    def cancel(self) -> None:
        """The server ends the call (it is shutting down): CANCELLED, as grpc's servers say it."""
        self._fail(grpc.StatusCode.CANCELLED, "CANCELLED")

    def _expired(self) -> None:
        self._timer = None
        self._fail(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _stop(self) -> None:
        self._stop_timer()
        self._wake()
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # the servicer context ---------------------------------------------------------------------------
    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[Any] = ()
    ) -> NoReturn:
        raise CallError(code, details)

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        if self._metadata is None:
            self._metadata = wire.metadata(self._headers)
        return self._metadata

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._done

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._conn.loop.time())

    def peer(self) -> str:
        transport = self._conn.transport
        address = transport.get_extra_info("peername") if transport is not None else None
        if isinstance(address, tuple) and len(address) >= 2:
            family = "ipv6" if ":" in str(address[0]) else "ipv4"
            return f"{family}:{address[0]}:{address[1]}"
        return "unknown"


class _Requests:
    """A streaming call's request messages, as the async iterator its handler reads."""

    __slots__ = ("_call",)

    def __init__(self, call: Call) -> None:
        self._call = call

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        return await self._call.next_request()
