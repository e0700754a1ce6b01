"""--http-header-forward-pattern and --grpc-header-forward-pattern: an inference request's headers (gRPC
metadata) whose name the pattern matches anywhere become string parameters of the request, as Triton
forwards them, so that a model reads them with `request.parameters()` (a tenant, a user, a trace id
set by a gateway). Off when the pattern is empty, as in Triton.

Triton's patterns are RE2 expressions, and its command line makes them case-insensitive (header names
are, by the HTTP specification) unless the pattern turns that off with `(?-i)`. Python's `re` cannot
turn a flag off mid-pattern; the `regex` module's version 1 syntax can, as RE2 does: an inline flag
holds to the end of its group."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from server.protocol.types import InferenceRequest

if TYPE_CHECKING:
    import regex


class PatternError(ValueError):
    """A header forward pattern that is not a regular expression (the message says why)."""


class HeaderForward:
    def __init__(self, pattern: str = "", *, case_insensitive: bool = False) -> None:
        """`case_insensitive` as Triton's command line has it (`(?-i)` in the pattern still turns it
        off); the in-process front ends take the pattern as given. Raises PatternError."""
        self._regex: regex.Pattern[str] | None = None
        if pattern:
            import regex  # only with a pattern: its import costs every server's start-up 7 ms

            flags = regex.VERSION1 | (regex.IGNORECASE if case_insensitive else 0)
            try:
                self._regex = regex.compile(pattern, flags)
            except regex.error as error:
                raise PatternError(str(error)) from None

    @property
    def enabled(self) -> bool:
        return self._regex is not None

    def apply(self, request: InferenceRequest, headers: Iterable[tuple[str | bytes, str | bytes]]) -> None:
        """Add each matching header to `request.parameters` (name as received, value as text)."""
        pattern = self._regex
        if pattern is None:
            return
        for key, value in headers:
            name = key.decode("latin-1") if isinstance(key, bytes) else key
            if pattern.search(name):
                request.parameters[name] = value.decode("latin-1") if isinstance(value, bytes) else value


NO_FORWARD = HeaderForward()
