"""uvicorn's httptools protocol, with each response's head and body leaving in one socket write.

ASGI sends a response as two messages (`http.response.start`, then the body) and uvicorn writes each
to the socket as it comes: two send() calls, two TCP segments and two wake-ups of the client per
response. On loopback each send runs the whole TCP path inline, and profiles of the infer route
showed those two writes as the largest single cost (benchmarks/NOTES.md). Holding the head until the
body follows (at the latest until the end of the event loop's current iteration, so a streamed
response's head is never kept waiting for its first event) makes it one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_HEAD_END = b"\r\n\r\n"


class _CoalescingTransport:
    """An asyncio transport that keeps back a written response head until the next write."""

    __slots__ = ("_flush_handle", "_head", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if self._flush_handle is not None:
                self._flush_handle.cancel()
                self._flush_handle = None
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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol over a `_CoalescingTransport` (pass the class as uvicorn.Config(http=...))."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped = _CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(wrapped)  # type: ignore[arg-type]
