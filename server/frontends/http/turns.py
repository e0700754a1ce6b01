"""The order in which one server's connections have their reads parsed within an event-loop turn.

The event loop (libuv's level-triggered epoll under uvloop) hands over readable connections in the
kernel's ready-list order, where a connection that was readable at the previous poll keeps its place
ahead of one that became readable since. Under load one connection that misses a turn thus stays at
the back, turn after turn: measured at perf_analyzer concurrency 8, one connection at a time ran at
twice the others' cycle for a second or more, and one request in eight took twice the median latency
(the p99). So the first connection read in a turn is parsed at once (a lone request pays nothing),
and the others' bytes are queued and fed to their parsers at the end of the turn ordered by when
each connection was last answered, longest ago first: the order requests arrived in a closed loop. A
connection that missed a turn thus comes at most second in the next.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Waiting(Protocol):
    """A connection whose read waits for the end of the turn."""

    @property
    def answered(self) -> int:
        """The TurnOrder count when it last sent a response."""

    def feed_unparsed(self) -> None:
        """Parse what it read meanwhile."""


class TurnOrder:
    """One server's reads in the current loop turn: the first is parsed at once (so a lone request
    costs nothing extra), the others wait for the end of the turn and go longest-unanswered first."""

    __slots__ = ("_count", "_loop", "_open", "_waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: list[Waiting] = []
        self._open = False
        self._count = 0

    def tick(self) -> int:
        """A response left: its connection's new `answered`."""
        self._count += 1
        return self._count

    def first(self, connection: Waiting) -> bool:
        """True when `connection` read first in this turn (parse now); else it waits for `_feed`."""
        if not self._open:
            self._open = True
            self._loop.call_soon(self._feed)
            return True
        self._waiting.append(connection)
        return False

    def _feed(self) -> None:
        self._open = False
        waiting, self._waiting = self._waiting, []
        if len(waiting) > 1:
            waiting.sort(key=_answered)
        for connection in waiting:
            try:
                connection.feed_unparsed()
            except Exception as exc:  # one connection's failure must not starve the others
                self._loop.call_exception_handler(
                    {"message": "HTTP request parsing failed", "exception": exc, "protocol": connection}
                )


def _answered(connection: Waiting) -> int:
    return connection.answered
