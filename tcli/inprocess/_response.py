"""Responses of the in-process API, shaped as `tritonserver`'s: an `InferenceResponse` per response the
model sends (outputs by name, `error`, `final`), read from a `ResponseIterator` (`model.infer`) or an
`AsyncResponseIterator` (`model.async_infer`). The last response of a request has `final` set; a
decoupled model's last one may carry no outputs (the flags-only end of its stream).

With `raise_on_error` (the default) an iterator raises a response's error (an exception of
`_errors`); without it the response comes back with `error` set. Every error reaches the caller
through the iterator, including the ones of a request the server refused before running it.
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import Any

from tcli.inprocess._errors import TritonError
from tcli.inprocess._handles import Cancellable, ModelHandle
from tcli.inprocess._tensor import Tensor


@dataclass
class InferenceResponse:
    model: ModelHandle
    request_id: str | None = None
    parameters: dict[str, str | int | bool] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    error: TritonError | None = None
    classification_label: str | None = None  # unused, as in tritonserver
    final: bool = False
    # raised by the iterator whatever raise_on_error says (an output_memory_type it cannot serve)
    _failure: TritonError | None = field(default=None, repr=False, compare=False)


class ResponseIterator:
    """The responses to one request, blocking until each arrives."""

    def __init__(
        self, flight: Cancellable, responses: queue.SimpleQueue[InferenceResponse], raise_on_error: bool
    ) -> None:
        self._flight = flight
        self._responses = responses
        self._raise_on_error = raise_on_error
        self._complete = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        response = self._responses.get()
        return _checked(self, response)

    def cancel(self) -> None:
        """Cancel the request: a queued one never runs, a running python model sees is_cancelled(); the
        iterator then ends with a CancelledError."""
        self._flight.cancel()


class AsyncResponseIterator:
    """The responses to one request, awaited on the caller's event loop."""

    def __init__(
        self, flight: Cancellable, responses: asyncio.Queue[InferenceResponse], raise_on_error: bool
    ) -> None:
        self._flight = flight
        self._responses = responses
        self._raise_on_error = raise_on_error
        self._complete = False

    def __aiter__(self) -> AsyncResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        response = await self._responses.get()
        return _checked(self, response)

    def cancel(self) -> None:
        """As ResponseIterator.cancel."""
        self._flight.cancel()


def _checked(iterator: Any, response: InferenceResponse) -> InferenceResponse:
    iterator._complete = response.final
    if response._failure is not None:
        raise response._failure
    if response.error is not None and iterator._raise_on_error:
        raise response.error
    return response
