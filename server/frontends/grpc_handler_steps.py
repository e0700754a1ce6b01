"""Triton's gRPC infer handlers as their verbose log tells them, and the wait Triton's testing aid
TRITONSERVER_DELAY_GRPC_PROCESS puts on a new ModelInfer call.

Triton serves ModelInfer from two handler threads and ModelStreamInfer from one, each a state
machine over a gRPC completion queue (steps START, ISSUED, CANCELLATION_ISSUED, CANCELLED, ...), and
its verbose log tells the steps: a handler posted for the next call ("New request handler for
ModelInferHandler, 0"), a call's START step processed, a client's cancellation seen ("Cancellation
notification received for ModelInferHandler, rpc_ok=1, context 0, 0 step START") and completed.
Scripts count those lines (Triton's qa L0_request_cancellation does). tcli has no handler threads
(a call is a task on the event loop); it writes the same lines at the same moments of a call, so
that what a user greps in Triton's log is there in tcli's. The ids are 0, as in Triton's release
builds (which number states only in debug builds).

Levels: the handlers posted when the front end starts and every line of a cancellation at
--log-verbose 1, as Triton; the lines each ordinary call writes (its START step processed, the
handler replacing it) at level 2, where tcli writes each request (its level 1 has no line per
request).

TRITONSERVER_DELAY_GRPC_PROCESS=N (milliseconds, read when the front end starts): each new ModelInfer
call waits N ms at its START step before it is processed ("Delaying the write of the response by N
ms..." at INFO, as Triton says it). A call its client cancels meanwhile never reaches the model and
ends CANCELLED. As in Triton, the cancellation is seen when the START step is processed (once the
wait is over, a handler is posted to replace the call's), and seen again when the call's done
notification is processed, after a wait of its own, which completes it. Triton's handler thread
sleeps through the wait, holding back the other calls it would serve; here only the call waits.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

DELAY_PROCESS_ENV = "TRITONSERVER_DELAY_GRPC_PROCESS"
INFER = "ModelInferHandler"
STREAM_INFER = "ModelStreamInferHandler"
INFER_HANDLERS = 2  # Triton's ModelInfer handler threads, each with a handler posted at start

_LOG = logging.getLogger("tcli.server.grpc")  # level 1 (--log-verbose >= 1)
_REQUESTS = logging.getLogger("tcli.requests.grpc")  # level 2, with tcli's other per-request lines


def delay_from_environment() -> int:
    """TRITONSERVER_DELAY_GRPC_PROCESS in milliseconds; unset or not a positive number: 0."""
    text = os.environ.get(DELAY_PROCESS_ENV, "").strip()
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def _cancellation(handler: str, step: str) -> str:
    return f"Cancellation notification received for {handler}, rpc_ok=1, context 0, 0 step {step}"


def _completing(handler: str, step: str) -> str:
    return f"Completing cancellation for {handler}, rpc_ok=1, context 0, 0 step {step}"


class HandlerSteps:
    """The handler lines of one gRPC front end, and its calls' wait at START."""

    def __init__(self, delay_ms: int | None = None) -> None:
        self.delay_ms = delay_from_environment() if delay_ms is None else delay_ms
        self._pending: set[asyncio.Task[None]] = set()  # cancelled calls still to be completed

    def posted(self) -> None:
        """The front end started: Triton's handlers each post one for the first call."""
        if _LOG.isEnabledFor(logging.DEBUG):
            for _ in range(INFER_HANDLERS):
                _LOG.debug("New request handler for %s, 0", INFER)
            _LOG.debug("New request handler for %s, 0", STREAM_INFER)

    # ModelInfer ----------------------------------------------------------------------------------
    async def delay(self) -> None:
        """A ModelInfer call waits `delay_ms` at its START step (the caller asks only when there is
        a wait). Raises CancelledError when the call is cancelled meanwhile; its cancellation is
        then told as Triton's handlers tell it, and the model never sees the call."""
        _LOG.info("Delaying the write of the response by %d ms...", self.delay_ms)
        wait = asyncio.ensure_future(asyncio.sleep(self.delay_ms / 1000))
        try:
            await asyncio.shield(wait)
        except asyncio.CancelledError:
            _LOG.debug("Received notification for %s, 0", INFER)
            self._keep(self._cancelled_at_start(wait))
            raise

    def started(self) -> None:
        """A ModelInfer call's START step processed."""
        if _REQUESTS.isEnabledFor(logging.DEBUG):
            _REQUESTS.debug("Process for %s, rpc_ok=1, 0 step START", INFER)
            _REQUESTS.debug("New request handler for %s, 0", INFER)

    async def _cancelled_at_start(self, wait: asyncio.Future[None]) -> None:
        await wait  # the START step is processed when its wait is over
        _LOG.debug("New request handler for %s, 0", INFER)
        _LOG.debug(_cancellation(INFER, "START"))
        # then the done notification, processed (after its own wait) as a step of the same call
        _LOG.info("Delaying the write of the response by %d ms...", self.delay_ms)
        await asyncio.sleep(self.delay_ms / 1000)
        _LOG.debug(_cancellation(INFER, "START"))
        _LOG.debug(_completing(INFER, "START"))
        _LOG.debug("Done for %s, 0", INFER)

    def cancelled_issued(self, handler: str = INFER, requests: int = 1) -> None:
        """A call cancelled while its `requests` run in the core (step ISSUED): the core is told to
        cancel them; the call ends CANCELLED."""
        if not _LOG.isEnabledFor(logging.DEBUG):
            return
        _LOG.debug("Received notification for %s, 0", handler)
        _LOG.debug(_cancellation(handler, "ISSUED"))
        for _ in range(requests):
            _LOG.debug("Issuing cancellation for 0")
        _LOG.debug(_completing(handler, "CANCELLED"))
        _LOG.debug("Done for %s, 0", handler)

    # ModelStreamInfer ----------------------------------------------------------------------------
    def stream_started(self) -> None:
        if _REQUESTS.isEnabledFor(logging.DEBUG):
            _REQUESTS.debug("Process for %s, rpc_ok=1, context 0, 0 step START", STREAM_INFER)
            _REQUESTS.debug("New request handler for %s, 0", STREAM_INFER)

    # ---------------------------------------------------------------------------------------------
    def _keep(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def close(self) -> None:
        """The front end closes: cancellations still being completed are dropped."""
        for task in list(self._pending):
            task.cancel()
