"""The HTTP front end's transport writes a response's head and body in one send, and never keeps a
head waiting past the event loop's current iteration (a streamed response's head goes out at once).
Requests read in one loop turn are parsed longest-unanswered connection first."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from server.frontends.http_transport import _CoalescingTransport, _TurnOrder

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


class Waiting:
    """A connection with bytes read: what the turn order sees of it."""

    def __init__(self, name: str, answered: int, fed: list[str], fails: bool = False) -> None:
        self.name = name
        self.coalescing = type("T", (), {"answered": answered})()
        self.fed = fed
        self.fails = fails

    def feed_unparsed(self) -> None:
        self.fed.append(self.name)
        if self.fails:
            raise RuntimeError("parser broke")


def test_a_turns_first_read_is_parsed_at_once_the_others_longest_unanswered_first() -> None:
    async def main() -> tuple[list[bool], list[str], bool]:
        fed: list[str] = []
        turns = _TurnOrder(asyncio.get_running_loop())
        at_once = [
            turns.first(Waiting(name, answered, fed))  # type: ignore[arg-type]
            for name, answered in (("lead", 9), ("recent", 7), ("new", 0), ("older", 3))
        ]
        assert fed == []  # the others wait for the end of the turn
        await asyncio.sleep(0)
        next_turn = turns.first(Waiting("next", 1, fed))  # type: ignore[arg-type]
        return at_once, fed, next_turn

    at_once, fed, next_turn = asyncio.run(main())
    assert at_once == [True, False, False, False]
    assert fed == ["new", "older", "recent"]
    assert next_turn  # a new turn has a new first


def test_one_connection_failing_to_parse_does_not_starve_the_others() -> None:
    async def main() -> tuple[list[str], list[dict[str, Any]]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        fed: list[str] = []
        turns = _TurnOrder(loop)
        for waiting in (Waiting("lead", 0, fed), Waiting("broken", 1, fed, True), Waiting("fine", 2, fed)):
            turns.first(waiting)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        return fed, reported

    fed, reported = asyncio.run(main())
    assert fed == ["broken", "fine"]
    assert [str(context["exception"]) for context in reported] == ["parser broke"]


def test_requests_split_across_reads_on_several_connections_are_answered_whole() -> None:
    """Two connections sending POSTs in small interleaved pieces (several reads per request, both
    connections waiting in the same turns): each gets its own bodies back, in order."""
    from server.frontends.http_transport import CoalescingHttpToolsProtocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def main() -> list[bytes]:
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
        connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        requests = [
            b"".join(
                b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\n" + f"c{c}r{r}..".encode()
                for r in range(3)
            )
            for c in range(2)
        ]
        for start in range(0, len(requests[0]), 7):  # 7-byte pieces, alternating connections
            for (_, writer), data in zip(connections, requests, strict=True):
                writer.write(data[start : start + 7])
                await writer.drain()
            await asyncio.sleep(0.001)
        answers = []
        for reader, writer in connections:
            data = b""
            while data.count(b"..") < 3:
                chunk = await reader.read(65536)
                assert chunk, data
                data += chunk
            answers.append(data)
            writer.close()
        await server.shutdown()
        return answers

    answers = asyncio.run(main())
    for c, answer in enumerate(answers):
        assert answer.count(b"HTTP/1.1 200 OK") == 3
        bodies = [part.rsplit(b"\r\n\r\n", 1)[-1] for part in answer.split(b"HTTP/1.1 ")[1:]]
        assert bodies == [f"c{c}r{r}..".encode() for r in range(3)]


# An inference request's answer starts outside any task and only becomes one when it has to wait
# (http_transport._resume): it must then see its future's result, exception or cancellation as a
# task-run coroutine would.


def _started(coroutine: Any) -> Any:
    """Start `coroutine` by hand, as the fast path does; the future it waits on."""
    waiting = coroutine.send(None)
    assert isinstance(waiting, asyncio.Future)
    return waiting


def test_a_coroutine_started_outside_a_task_resumes_with_its_futures_outcomes() -> None:
    from server.frontends.http_transport import _resume

    async def answer(first: asyncio.Future[int], second: asyncio.Future[int]) -> None:
        seen.append(await first)
        try:
            await second
        except ValueError as error:
            seen.append(str(error))
        await asyncio.sleep(0)  # a bare yield, as asyncio.sleep(0) makes
        seen.append("done")

    seen: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        coroutine = answer(first, second)
        task = loop.create_task(_resume(coroutine, _started(coroutine)))
        loop.call_later(0.01, first.set_result, 7)
        loop.call_later(0.02, second.set_exception, ValueError("bad"))
        await task

    asyncio.run(main())
    assert seen == [7, "bad", "done"]


def test_cancelling_the_resumed_task_cancels_the_coroutine() -> None:
    from server.frontends.http_transport import _resume

    outcome: list[str] = []

    async def answer(future: asyncio.Future[int]) -> None:
        try:
            await future
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    async def main() -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        coroutine = answer(future)
        task = loop.create_task(_resume(coroutine, _started(coroutine)))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            outcome.append("task cancelled")

    asyncio.run(main())
    assert outcome == ["cancelled", "task cancelled"]
