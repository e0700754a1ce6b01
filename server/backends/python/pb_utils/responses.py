"""Responses: InferenceResponse, the response sender a decoupled model sends through (over the
server's ResponseTransport), and the ResponseIterator a decoupled BLS call returns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from server.backends.python.pb_utils.datatypes import TRITONSERVER_RESPONSE_COMPLETE_FINAL
from server.backends.python.pb_utils.errors import TritonError, TritonModelException
from server.backends.python.pb_utils.parameters import _parameters_json
from server.backends.python.pb_utils.tensor import Tensor


class InferenceResponse:
    """`InferenceResponse(output_tensors=[], error=None, parameters=None)`.

    `parameters` ({str: bool|int|str}) and `.parameters()` (a JSON string) come from Triton releases
    after 2.51; 2.51 itself rejects the argument."""

    __slots__ = ("_error", "_output_tensors", "_parameters", "_parameters_json")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        if not isinstance(output_tensors, (list, tuple)):  # None too, as Triton's binding refuses it
            raise TypeError(
                f"InferenceResponse(): output_tensors must be a list of Tensor, got {type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if tensor is None:
                raise TritonModelException("Output tensor for inference response should not be empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must hold Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse(): error must be a TritonError, got {type(error).__name__}")
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters, self._parameters_json = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters_json


class ResponseTransport(Protocol):
    """What the server supplies behind each InferenceResponseSender: deliver one response (or a
    flags-only final marker) to the client, and report whether the client cancelled."""

    def send(self, response: InferenceResponse | None, flags: int, /) -> None: ...

    def is_cancelled(self) -> bool: ...

    def abandoned(self) -> None:
        """The decoupled model dropped the sender before its final flag: end the request."""


class InferenceResponseSender:
    """`request.get_response_sender()`: `send(response=None, flags=0)`, `is_cancelled()`.

    This class enforces Triton's rules (flags, final response, one response for non-decoupled models);
    the server's ResponseTransport only moves the responses."""

    def __init__(self, transport: ResponseTransport, decoupled: bool) -> None:
        self._transport = transport
        self._decoupled = decoupled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"send(): response must be an InferenceResponse or None, got {type(response).__name__}"
            )
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before "
                        "sending a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1
        try:
            self._transport.send(response, flags)
        except TritonModelException:
            raise
        except Exception as e:
            raise TritonModelException(f"An error occurred while sending a response: {e}") from e

    def is_cancelled(self) -> bool:
        return bool(self._transport.is_cancelled())

    # host side ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the final flag was sent, or the server closed the sender."""
        return self._closed

    @property
    def response_count(self) -> int:
        """How many send() calls went through (responses and flags-only finals)."""
        return self._sent

    def close(self) -> None:
        """Server side: refuse further sends (Triton does this when execute raised)."""
        with self._lock:
            self._closed = True

    def __del__(self) -> None:
        # a decoupled model's sender gone before its final flag (the thread that held it raised, or
        # the model forgot it): nobody can end the request any more. Triton's stub leaves the
        # client waiting; the server ends it with an error instead
        if self._decoupled and not self._closed:
            self._closed = True
            # at interpreter exit there may be no one left to tell
            with contextlib.suppress(Exception):
                self._transport.abandoned()


class ResponseIterator:
    """What a decoupled BLS `exec(decoupled=True)` returns: iterate the responses, or `cancel()`.

    Made once the first response is in, as Triton's exec(decoupled=True) returns then: so
    `await request.async_exec(decoupled=True)` waits for it in the executor's thread, not in the
    model's event loop when the model iterates (which serialized a model's concurrent coroutines)."""

    def __init__(
        self, responses: Iterable[InferenceResponse], cancel: Callable[[], None] | None = None
    ) -> None:
        self._responses = iter(responses)
        self._cancel = cancel
        # the first response, or what reading it raised (raised again at the first next())
        self._first: InferenceResponse | BaseException | None
        try:
            self._first = next(self._responses)
        except Exception as exc:  # StopIteration included: the stream was empty
            self._first = exc

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        first = self._first
        if first is None:
            return next(self._responses)
        self._first = None
        if isinstance(first, BaseException):
            raise first
        return first

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel()


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None
