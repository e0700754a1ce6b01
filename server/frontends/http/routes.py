"""The HTTP front end's routes as data: each `Route` names the methods it answers, the whole path it
matches (a regular expression whose groups are the route's parameters), the front end's handler and
the restricted-API group (--http-restricted-api) it belongs to. `RouteTable` matches a path against
every route at once, with one regular expression; the first route listed wins. The table itself is
`ROUTES` in server/frontends/http/app.py, beside the handlers it names."""

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
    """Routes matched at once. A route whose path has no parameters is found by a dict lookup; the
    others by one regular expression of all their patterns, each in a group of its own. Either way
    the first route listed that matches wins: a fixed path listed after a pattern that matches it
    is refused when the table is built."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = tuple(routes)
        self._fixed: dict[str, tuple[Route, tuple[str, ...]]] = {}
        # outer group of a route's pattern -> the route, and its parameters' groups
        self._by_group: dict[int, tuple[Route, tuple[int, ...]]] = {}
        parts: list[str] = []
        group = 1
        for index, route in enumerate(self.routes):
            compiled = re.compile(route.pattern)
            if compiled.groups == 0 and re.escape(route.pattern) == route.pattern:  # a fixed path
                for earlier in self.routes[:index]:
                    if re.fullmatch(earlier.pattern, route.pattern):
                        raise ValueError(
                            f"route {route.pattern} comes after {earlier.pattern}, which matches it"
                        )
                self._fixed[route.pattern] = (route, ())
                continue
            parts.append(f"({route.pattern})")
            self._by_group[group] = (route, tuple(range(group + 1, group + 1 + compiled.groups)))
            group += 1 + compiled.groups
        self._pattern = re.compile("|".join(parts))

    def match(self, path: str) -> tuple[Route, tuple[str, ...]] | None:
        """The first route whose pattern is the whole `path`, with its parameters (percent-decoded),
        or None."""
        fixed = self._fixed.get(path)
        if fixed is not None:
            return fixed
        found = self._pattern.fullmatch(path)
        if found is None:
            return None
        # a route's own group closes after the groups inside it: the last one closed is the route's
        route, groups = self._by_group[found.lastindex or 0]
        if len(groups) == 1:
            values: tuple[str | None, ...] = (found.group(groups[0]),)
        else:
            values = found.group(*groups) if groups else ()
        if "%" in path:
            return route, tuple([_segment(value) for value in values])
        return route, tuple(["" if value is None else value for value in values])


def _segment(value: str | None) -> str:
    if not value:
        return ""
    return unquote(value) if "%" in value else value
