"""The HTTP server's response writer sends a response's head and body in one write, and never keeps a
head waiting past the event loop's current iteration (a streamed response's head goes out at once).
Requests read in one loop turn are parsed longest-unanswered connection first."""

from __future__ import annotations

import asyncio
from typing import Any

from server.frontends.http.turns import TurnOrder
from server.frontends.http.wire import ResponseHead, chunk
from server.frontends.http.writer import ResponseWriter

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _writer(recorder: Recorder) -> ResponseWriter:
    loop = asyncio.get_running_loop()
    return ResponseWriter(recorder, loop, TurnOrder(loop))  # type: ignore[arg-type]


def test_head_and_body_leave_in_one_write() -> None:
    async def main() -> list[bytes]:
        recorder = Recorder()
        writer = _writer(recorder)
        writer.hold_head(HEAD)
        writer.write(b"{}")
        await asyncio.sleep(0)
        return recorder.writes

    assert asyncio.run(main()) == [HEAD + b"{}"]


def test_head_alone_is_flushed_at_the_end_of_the_loop_iteration() -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        recorder = Recorder()
        writer = _writer(recorder)
        writer.hold_head(HEAD)
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
        writer = _writer(recorder)
        writer.hold_head(HEAD)
        writer.write(body)
        return recorder.writes

    assert asyncio.run(main()) == [HEAD, body]


def test_other_writes_pass_straight_through_and_close_flushes() -> None:
    async def main() -> Recorder:
        recorder = Recorder()
        writer = _writer(recorder)
        writer.write(b"5\r\nhello\r\n")
        writer.hold_head(HEAD)
        writer.close()
        return recorder

    recorder = asyncio.run(main())
    assert recorder.writes == [b"5\r\nhello\r\n", HEAD]
    assert recorder.closed


def test_a_response_counts_as_answered_in_the_turn_order() -> None:
    async def main() -> list[int]:
        writer = _writer(Recorder())
        seen = [writer.answered]
        writer.hold_head(HEAD)
        writer.write(b"{}")
        seen.append(writer.answered)
        writer.write_response(HEAD + b"{}")
        seen.append(writer.answered)
        return seen

    assert asyncio.run(main()) == [0, 1, 2]


def test_a_head_without_length_is_chunked_and_http10_is_closed_instead() -> None:
    chunked = ResponseHead(200, [(b"content-type", b"text/event-stream")], True, False, False)
    assert chunked.chunked and not chunked.closes
    assert chunked.data.endswith(b"transfer-encoding: chunked\r\n\r\n")
    assert chunk(b"hello", False) == b"5\r\nhello\r\n"
    assert chunk(b"", True) == b"0\r\n\r\n"
    old = ResponseHead(200, [(b"content-type", b"text/plain")], False, False, True)
    assert not old.chunked and old.closes and old.length is None
    assert b"connection: close\r\n" in old.data
    head = ResponseHead(204, [(b"content-length", b"0")], True, False, False)
    assert head.length == 0 and not head.chunked


def test_a_header_that_would_break_the_head_is_refused() -> None:
    for headers in ([(b"x-a", b"1\r\nset-cookie: evil")], [(b"bad name", b"1")]):
        try:
            ResponseHead(200, headers, True, False, False)
        except RuntimeError:
            continue
        raise AssertionError(f"accepted {headers}")


class Waiting:
    """A connection with bytes read: what the turn order sees of it."""

    def __init__(self, name: str, answered: int, fed: list[str], fails: bool = False) -> None:
        self.name = name
        self.answered = answered
        self.fed = fed
        self.fails = fails

    def feed_unparsed(self) -> None:
        self.fed.append(self.name)
        if self.fails:
            raise RuntimeError("parser broke")


def test_a_turns_first_read_is_parsed_at_once_the_others_longest_unanswered_first() -> None:
    async def main() -> tuple[list[bool], list[str], bool]:
        fed: list[str] = []
        turns = TurnOrder(asyncio.get_running_loop())
        at_once = [
            turns.first(Waiting(name, answered, fed))
            for name, answered in (("lead", 9), ("recent", 7), ("new", 0), ("older", 3))
        ]
        assert fed == []  # the others wait for the end of the turn
        await asyncio.sleep(0)
        next_turn = turns.first(Waiting("next", 1, fed))
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
        turns = TurnOrder(loop)
        for waiting in (Waiting("lead", 0, fed), Waiting("broken", 1, fed, True), Waiting("fine", 2, fed)):
            turns.first(waiting)
        await asyncio.sleep(0)
        return fed, reported

    fed, reported = asyncio.run(main())
    assert fed == ["broken", "fine"]
    assert [str(context["exception"]) for context in reported] == ["parser broke"]
