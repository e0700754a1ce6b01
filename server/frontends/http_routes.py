"""The HTTP front end's routes as data: each `Route` names the methods it answers, the whole path it
matches (a regular expression whose groups are the route's parameters), the front end's handler and
the restricted-API group (--http-restricted-api) it belongs to. `RouteTable` matches a path against
every route at once, with one regular expression; the first route listed wins. The table itself is
`ROUTES` in server/frontends/http.py, beside the handlers it names."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

# a handler of HttpFrontend, called as handler(frontend, scope, receive, send, method, *parameters)
Handler = Callable[..., Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Route:
    methods: tuple[str, ...]  # any other method is answered 405
    pattern: str  # the whole path; each group is a parameter ("" when an optional one is absent)
    handler: Handler
    group: str  # the restricted-API group, checked before anything else
    # refuse a body whose declared size is over the limit from the request's head, before the method
    limit_head: bool = False


class RouteTable:
    """Routes matched at once: one regular expression of all patterns, each in a group of its own."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = tuple(routes)
        parts = []
        self._by_group: dict[int, tuple[Route, int]] = {}  # outer group -> route, its parameter count
        group = 1
        for route in self.routes:
            count = re.compile(route.pattern).groups
            parts.append(f"({route.pattern})")
            self._by_group[group] = (route, count)
            group += 1 + count
        self._pattern = re.compile("|".join(parts))

    def match(self, path: str) -> tuple[Route, tuple[str, ...]] | None:
        """The first route whose pattern is the whole `path`, with its parameters (percent-decoded),
        or None."""
        found = self._pattern.fullmatch(path)
        if found is None:
            return None
        outer = found.lastindex  # a route's own group closes after the groups inside it
        assert outer is not None
        route, count = self._by_group[outer]
        return route, tuple(_segment(value) for value in found.groups()[outer : outer + count])


def _segment(value: str | None) -> str:
    if not value:
        return ""
    return unquote(value) if "%" in value else value
