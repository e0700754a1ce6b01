"""How long an HTTP connection may take over each part of a request, and how many connections one
server serves at once (--http-header-timeout, --http-body-timeout, --http-keepalive-timeout,
--http-max-connections).

One sweep per server checks every connection a few times per shortest timeout, instead of a timer
re-armed on every read: a read costs nothing more, and 5,000 connections cost one pass of a set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

SWEEP_MAX_PERIOD = 5.0  # seconds between sweeps at most, whatever the timeouts


@dataclass(frozen=True)
class ConnectionLimits:
    """Seconds a connection may spend on each part of a request, and the connection cap."""

    # the whole request head (request line and headers), from its first byte (or, for a new
    # connection, from its accept): a client dripping a head slowly is dropped too
    header_timeout: float = 30.0
    # without any body byte arriving while the body is being read (a slow upload that moves is fine)
    body_timeout: float = 60.0
    # between requests on a keep-alive connection
    keep_alive_timeout: float = 75.0
    # connections served at once; the ones beyond are answered 503 and closed
    max_connections: int = 10000

    def sweep_period(self) -> float:
        shortest = min(self.header_timeout, self.body_timeout, self.keep_alive_timeout)
        return max(0.05, min(shortest / 4, SWEEP_MAX_PERIOD))


class Timed(Protocol):
    """A connection the sweep looks at."""

    def expire(self, now: float, limits: ConnectionLimits) -> None:
        """Close if a timeout of `limits` has passed at `now` (the loop's clock)."""


async def sweep(connections: Iterable[Timed], limits: ConnectionLimits) -> None:
    """Close, forever, the connections whose head, body or keep-alive wait has timed out."""
    loop = asyncio.get_running_loop()
    period = limits.sweep_period()
    while True:
        await asyncio.sleep(period)
        now = loop.time()
        for connection in list(connections):
            connection.expire(now, limits)
