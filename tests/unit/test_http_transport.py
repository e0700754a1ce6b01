"""The HTTP front end's transport writes a response's head and body in one send, and never keeps a
head waiting past the event loop's current iteration (a streamed response's head goes out at once)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from server.frontends.http_transport import _CoalescingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 8000) if name == "sockname" else default


def test_head_and_body_leave_in_one_write() -> None:
    async def main() -> list[bytes]:
        recorder = Recorder()
        transport = _CoalescingTransport(recorder, asyncio.get_running_loop())
        transport.write(HEAD)
        transport.write(b"{}")
        await asyncio.sleep(0)
        return recorder.writes

    assert asyncio.run(main()) == [HEAD + b"{}"]


def test_head_alone_is_flushed_at_the_end_of_the_loop_iteration() -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        recorder = Recorder()
        transport = _CoalescingTransport(recorder, asyncio.get_running_loop())
        transport.write(HEAD)
        held = list(recorder.writes)
        await asyncio.sleep(0)
        return held, recorder.writes

    held, sent = asyncio.run(main())
    assert held == []
    assert sent == [HEAD]


def test_large_body_is_not_copied_behind_the_head() -> None:
    body = b"x" * 100_000

    async def main() -> list[bytes]:
        recorder = Recorder()
        transport = _CoalescingTransport(recorder, asyncio.get_running_loop())
        transport.write(HEAD)
        transport.write(body)
        return recorder.writes

    assert asyncio.run(main()) == [HEAD, body]


def test_other_writes_pass_straight_through_and_close_flushes() -> None:
    async def main() -> Recorder:
        recorder = Recorder()
        transport = _CoalescingTransport(recorder, asyncio.get_running_loop())
        transport.write(b"5\r\nhello\r\n")
        transport.write(HEAD)
        transport.close()
        return recorder

    recorder = asyncio.run(main())
    assert recorder.writes == [b"5\r\nhello\r\n", HEAD]
    assert recorder.closed
    assert recorder.get_extra_info("sockname") == ("127.0.0.1", 8000)


def test_uvicorn_serves_through_the_coalescing_protocol() -> None:
    """uvicorn with the protocol class, over a real socket: a whole, well-formed response."""
    from server.frontends.http_transport import CoalescingHttpToolsProtocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def main() -> bytes:
        import uvicorn

        config = uvicorn.Config(
            app, http=CoalescingHttpToolsProtocol, loop="none", lifespan="off", log_config=None
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await server.startup(sockets=[sock])
        port = sock.getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"{}"):
            chunk = await reader.read(65536)
            assert chunk, data
            data += chunk
        writer.close()
        await server.shutdown()
        return data

    data = asyncio.run(main())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.endswith(b"\r\n\r\n{}")
