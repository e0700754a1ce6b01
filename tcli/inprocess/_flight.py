"""One request in flight: its task on the server's event loop, which calls the core service exactly as
the front ends do, and where its responses go.

A model that sends one response per request is asked through `InferenceService.infer`, the call the
HTTP front end and gRPC ModelInfer make (a cheap python model then runs inline on the loop, as over
HTTP); a decoupled model through `InferenceService.infer_stream`, the call of gRPC ModelStreamInfer.
Every answer, error or not, is delivered as an `InferenceResponse`; the last one is final. The
caller's side (a queue per iterator) is given as `deliver`, called on the loop's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from server.protocol import types as core
from server.protocol.errors import ErrorCode, internal, unavailable
from server.protocol.errors import TritonError as ServerError
from tcli.inprocess._allocators import OutputPlacement
from tcli.inprocess._errors import InvalidArgumentError, TritonError, from_server
from tcli.inprocess._handles import ModelHandle
from tcli.inprocess._response import InferenceResponse
from tcli.inprocess._tensor import Tensor

if TYPE_CHECKING:
    from server.service import InferenceService

log = logging.getLogger("tcli.inprocess")

Deliver = Callable[[InferenceResponse], None]


class Flight:
    def __init__(
        self,
        model: ModelHandle,
        request: core.InferenceRequest,
        deliver: Deliver,
        placement: OutputPlacement | None = None,
    ) -> None:
        self.model = model
        self.request = request
        self.deliver = deliver
        self.placement = placement or OutputPlacement(None, None)
        self.future: concurrent.futures.Future[None] | None = None

    def start(self, service: InferenceService, loop: asyncio.AbstractEventLoop, decoupled: bool) -> None:
        self.future = asyncio.run_coroutine_threadsafe(self._run(service, decoupled), loop)

    def cancel(self, error: ServerError | None = None) -> None:
        """Stop waiting for the request (cancel it on the loop) and end its responses with `error`
        (default: cancelled). A request that already finished is left alone."""
        if self.future is None or self.future.done():
            return
        self.future.cancel()
        # the task may be cancelled before it ever ran, and then says nothing: say it here (a second
        # final response, from the task, is never read)
        self.deliver(self._error(error or ServerError(ErrorCode.CANCELLED, "the request was cancelled")))

    async def _run(self, service: InferenceService, decoupled: bool) -> None:
        try:
            if decoupled:
                async for item in service.infer_stream(self.request):
                    if item.error is not None:
                        self.deliver(self._error(item.error, item.final))
                    else:
                        self.deliver(self._response(item.response, item.final))
            else:
                self.deliver(self._response(await service.infer(self.request), True))
        except ServerError as error:
            self.deliver(self._error(error))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug of tcli's: the caller must not wait forever
            log.exception("in-process request to model '%s' failed", self.request.model_name)
            self.deliver(self._error(internal("internal error: a bug in tcli; the log has the traceback")))

    def _response(self, response: core.InferenceResponse | None, final: bool) -> InferenceResponse:
        if response is None:  # a decoupled model's flags-only end of stream
            return InferenceResponse(self.model, self.request.id, final=final)
        result = InferenceResponse(
            self.model.versioned(response.model_version), response.id, dict(response.parameters), final=final
        )
        outputs = {tensor.name: Tensor._from_server(tensor) for tensor in response.outputs}
        try:
            result.outputs = self.placement.place(outputs)
        except InvalidArgumentError as error:  # a memory type nobody serves: raised whatever raise_on_error
            result._failure = error
        except TritonError as error:  # the allocator failed: the response's error, as in tritonserver
            result.error = error
        return result

    def _error(self, error: ServerError, final: bool = True) -> InferenceResponse:
        return InferenceResponse(self.model, self.request.id, error=from_server(error), final=final)


def stopped() -> ServerError:
    return unavailable("the in-process server stopped before the request finished")


def deliver_threadsafe(
    loop: asyncio.AbstractEventLoop, *targets: asyncio.Queue[InferenceResponse]
) -> Deliver:
    """Deliver into asyncio.Queues owned by another loop (the caller's), all in one callback and in
    the order given: a response the iterator (the last target) yields is in the others already."""

    def put(response: InferenceResponse) -> None:
        for target in targets:
            target.put_nowait(response)

    def deliver(response: InferenceResponse) -> None:
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody reads any more
            loop.call_soon_threadsafe(put, response)

    return deliver
