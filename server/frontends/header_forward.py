"""--http-header-forward-pattern and --grpc-header-forward-pattern: an inference request's headers (gRPC
metadata) whose name the pattern matches anywhere become string parameters of the request, as Triton
forwards them, so that a model reads them with `request.parameters()` (a tenant, a user, a trace id
set by a gateway). Off when the pattern is empty, as in Triton."""

from __future__ import annotations

import re
from collections.abc import Iterable

from server.protocol.types import InferenceRequest


class HeaderForward:
    def __init__(self, pattern: str = "") -> None:
        """Raises re.error for a pattern that is not a regular expression."""
        self._regex = re.compile(pattern) if pattern else None

    @property
    def enabled(self) -> bool:
        return self._regex is not None

    def apply(self, request: InferenceRequest, headers: Iterable[tuple[str | bytes, str | bytes]]) -> None:
        """Add each matching header to `request.parameters` (name as received, value as text)."""
        regex = self._regex
        if regex is None:
            return
        for key, value in headers:
            name = key.decode("latin-1") if isinstance(key, bytes) else key
            if regex.search(name):
                request.parameters[name] = value.decode("latin-1") if isinstance(value, bytes) else value


NO_FORWARD = HeaderForward()
