"""The load generator's HTTP/1.1 client: one keep-alive connection driven by an asyncio Protocol, with
no HTTP library and no response decoding beyond the status line and the length. Standard library only,
so that a worker process starts cheaply.
"""

from __future__ import annotations

import asyncio

from tcli.perf.load_spec import RequestFailed, now_ns


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight. The response is complete when
    its body has arrived (Content-Length, or the last chunk of a chunked body)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[tuple[int, int, int, bytes]] | None = None
        self.first_ns = 0
        self.body_at = -1
        self.length = -1
        self.chunked = False
        self.status = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, message: bytes) -> asyncio.Future[tuple[int, int, int, bytes]]:
        if self.closed or self.transport is None:
            raise RequestFailed("the server closed the connection")
        self.buffer.clear()
        self.first_ns = 0
        self.body_at = -1
        self.waiter = self.loop.create_future()
        self.transport.write(message)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        if not self.first_ns:
            self.first_ns = now_ns()
        buffer = self.buffer
        buffer += data
        if self.body_at < 0:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            self.body_at = head_end + 4
            try:
                self.status = int(buffer[9:12])
            except ValueError:
                self._fail("the server's answer is not HTTP")
                return
            head = bytes(buffer[:head_end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                self.length = int(head[at + 17 : stop if stop >= 0 else len(head)])
                self.chunked = False
            else:
                self.length = -1
                self.chunked = b"transfer-encoding: chunked" in head
                if not self.chunked:
                    self.length = 0
        if self.chunked:
            if not buffer.endswith(b"0\r\n\r\n"):
                return
            body = _dechunk(bytes(buffer[self.body_at :]))
        else:
            if len(buffer) - self.body_at < self.length:
                return
            body = bytes(buffer[self.body_at : self.body_at + self.length]) if self.status != 200 else b""
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.first_ns, now_ns(), body))

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(RequestFailed(message))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail("the server closed the connection" + (f": {exc}" if exc else ""))


def _dechunk(data: bytes) -> bytes:
    out, at = bytearray(), 0
    while True:
        line_end = data.find(b"\r\n", at)
        size = int(data[at:line_end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += data[line_end + 2 : line_end + 2 + size]
        at = line_end + 4 + size


def http_error(status: int, body: bytes) -> str:
    import json

    try:
        message = json.loads(body).get("error")
    except (ValueError, AttributeError):
        message = None
    return str(message or body[:200].decode("utf-8", "replace") or f"HTTP {status}")
