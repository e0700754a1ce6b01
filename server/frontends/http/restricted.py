"""Restricted HTTP APIs (tritonserver --http-restricted-api): the check a route of a restricted group
makes before anything else (server/protocol/restricted.py). Each route names its group in the route
table of server/frontends/http/app.py, as in Triton's HTTP server."""

from __future__ import annotations

import orjson

from server.frontends.http.direct import carries
from server.protocol.restricted import Restrictions, http_refusal


class Refused(Exception):
    """The request lacks the header its restricted group requires; `body` is the 403 answer's."""

    def __init__(self, body: bytes) -> None:
        super().__init__()
        self.body = body


class HttpRestrictions:
    """The restricted groups, each with the (lower-case header, value) its requests must carry."""

    def __init__(self, restrictions: Restrictions) -> None:
        self._rules = {
            group: (
                (rule.header.lower().encode(), rule.value.encode()),
                orjson.dumps({"error": http_refusal(rule)}),
            )
            for group, rule in restrictions.items()
        }
        inference = self._rules.get("inference")
        self.inference: tuple[bytes, bytes] | None = inference[0] if inference else None

    def check(self, headers: list[tuple[bytes, bytes]], group: str) -> None:
        """Raise Refused when `group` is restricted and `headers` lack its header and value."""
        rule = self._rules.get(group)
        if rule is not None and not carries(headers, rule[0]):
            raise Refused(rule[1])
