"""Requests of a default-scheduled model whose instances run in processes of their own (python
instances, `process_host`), handed to the instances from the event loop that received them.

The worker-thread path costs three thread switches per request in the server (loop -> worker thread
-> pipe reader thread -> worker thread -> loop), each a wait for the GIL the other thread holds. Here
the loop writes a request straight to an idle instance's process and reads the results itself
(`loop.add_reader`), completing the request on the loop: no thread on the way. Requests that find
every instance busy wait in a queue of the loop's, which each completion drains, first come first
served.

When every instance is busy, the next waiting batch is sent behind a running one (one per instance,
when its inputs ride in the message): the instance process reads it as soon as it finishes, instead
of idling until the loop gets a core to take the result and hand over the next batch. On two cores
shared by two busy instances, a client and the server, that wait was ~12% of an instance's time.
The batch behind counts as started when the one ahead of it completes (its statistics' queue time
ends then).

Everything here runs on the loop's thread except `forward`, `wake` and `settle`. Requests submitted
from elsewhere (streams, callers without a loop) still go through the scheduler to the worker
threads, which pass them on to the loop once it is attached; a worker also runs a batch itself when
the loop cannot (not attached, or stopped at shutdown). An instance's busy lock is held by whoever
runs it, so the two never overlap.

An instance whose process died is started again by a helper thread (a process start takes too long
for the loop), holding its busy lock: meanwhile the batch that found it dead, and every later one,
go to the model's other instances. A start that fails is tried again later (backing off from 0.5 s
to 30 s) while the other instances serve; only when every instance is down do the waiting requests
fail, with the reason the last start gave. Before, the batch waited for its own instance's restart
and failed with it, though another instance was serving (issue 14's hour-long soak lost 134 requests
that way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from server.backends.base import NotStarted
from server.protocol.errors import ErrorCode, TritonError, internal, unavailable
from server.scheduling.work import WorkItem, answer_cancelled, drop_cancelled

if TYPE_CHECKING:
    from server.backends.base import LoopRequestModel, ResponseChannel
    from server.protocol.types import InferenceRequest, InferenceResponse
    from server.scheduling.stats import ModelStats


class Runner(Protocol):
    """What the dispatcher needs of its ModelRunner."""

    batched: bool
    stats: ModelStats  # requests cancelled while queued count there

    def begin(self, batch: list[WorkItem], index: int) -> tuple[int, list[ResponseChannel]]: ...

    def settle(
        self, batch: list[WorkItem], results: Sequence[InferenceResponse | TritonError | None], start: int
    ) -> None: ...

    def fail(self, batch: list[WorkItem], error: TritonError) -> None: ...

    def bug(self, batch: list[WorkItem], exc: BaseException) -> TritonError: ...


_LOG = logging.getLogger("tcli.scheduling")
# a failed start of an instance is tried again after this long, doubling up to the most
RETRY_FIRST_S, RETRY_MOST_S = 0.5, 30.0


class _Sent:
    """A batch handed to an instance, and when it counts as started."""

    __slots__ = ("batch", "start")

    def __init__(self, batch: list[WorkItem], start: int) -> None:
        self.batch = batch
        self.start = start


class LoopDispatcher:
    def __init__(
        self, runner: Runner, instances: Sequence[LoopRequestModel], busy: Sequence[threading.Lock]
    ) -> None:
        self._runner = runner
        self._instances = list(instances)
        self._busy = list(busy)
        # per instance, the batches sent and not done (at most 2, loop thread); the dispatcher holds an
        # instance's busy lock exactly while this is not empty
        self._out: list[deque[_Sent]] = [deque() for _ in self._instances]
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0  # the loop's thread
        self.waiting: deque[list[WorkItem]] = deque()
        self.running = 0  # batches the instances run for the dispatcher
        self._closed = False  # no new requests (unloading)
        self._ended = False  # no new executions either (the instances go)
        self._next = 0  # the instance to try first: spreads work over the instances
        # instances being started again (the dispatcher holds their busy locks); of those, the ones
        # whose last start failed, with its error, until the next try; and each one's next delay
        self._reviving: set[int] = set()
        self._down: dict[int, TritonError] = {}
        self._retry_s: dict[int, float] = {}

    # the loop's side ---------------------------------------------------------------------------------
    def offer(self, request: InferenceRequest, complete: Callable[..., None]) -> bool:
        """Take `request` (on the loop's thread): run it now or queue it. False when this loop cannot
        (the dispatcher is closed or belongs to another loop): submit it instead."""
        if self._closed:
            return False
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            if self.loop is not None:
                return False
            self.loop, self._thread = loop, threading.get_ident()
        self.waiting.append([WorkItem(request, request.batch_size(self._runner.batched), complete)])
        self._pump()
        return True

    def _pump(self) -> None:
        """Start waiting batches on the free instances; then queue behind the busy ones."""
        count = len(self._instances)
        if self.waiting and len(self._down) == count and not self._ended:
            self._fail_waiting_with(next(iter(self._down.values())))  # no instance can run them
        while self.waiting and not self._ended:
            for step in range(count):
                index = (self._next + step) % count
                if not self._out[index] and self._busy[index].acquire(blocking=False):
                    break
            else:
                self._queue_behind()
                return  # the next completion calls again
            batch = drop_cancelled(self.waiting.popleft(), self._runner.stats)
            if not batch:  # its clients went away while it waited
                self._busy[index].release()
                continue
            self._next = (index + 1) % count
            self._start(index, batch)

    def _queue_behind(self) -> None:
        count = len(self._instances)
        for step in range(count):
            if not self.waiting:
                return
            index = (self._next + step) % count
            if len(self._out[index]) != 1:  # one behind at most; an instance a worker runs is not ours
                continue
            if not self._instances[index].can_queue([item.request for item in self.waiting[0]]):
                continue
            batch = drop_cancelled(self.waiting.popleft(), self._runner.stats)
            if batch:
                self._start(index, batch)

    def _start(self, index: int, batch: list[WorkItem]) -> None:
        assert self.loop is not None
        self.running += 1
        start, channels = self._runner.begin(batch, index)
        sent = _Sent(batch, start)
        out = self._out[index]
        out.append(sent)

        def done(results: list[InferenceResponse | TritonError | None]) -> None:
            if threading.get_ident() == self._thread:
                self._done(index, sent, results)
            else:  # the process's reader thread, before the loop took over reading it
                self._call_soon(self._done, index, sent, results)

        try:
            started = self._instances[index].start_batch(
                [item.request for item in batch], channels, done, self.loop
            )
        except TritonError as error:
            self._done(index, sent, [error] * len(batch))
            return
        except Exception as exc:  # e.g. an input pickle refuses: this batch fails, the instance goes on
            self._done(index, sent, [self._runner.bug(batch, exc)] * len(batch))
            return
        if started:
            return
        # its process is down: this batch waits again, for another instance or this one's return
        out.remove(sent)
        self.running -= 1
        self.waiting.appendleft(batch)
        if not out:  # else its process died under the batch ahead, whose completion frees it
            self._revive(index)

    def _done(
        self,
        index: int,
        sent: _Sent,
        results: list[InferenceResponse | TritonError | None],
    ) -> None:
        out = self._out[index]
        ahead = out[0] is sent
        out.remove(sent)
        if results and type(results[0]) is NotStarted:
            # its instance went away before starting it (NotStarted answers a whole batch, never
            # part of one): the batch waits for an instance again
            self.waiting.appendleft(sent.batch)
            self._release(index)
            return
        if all(_dropped(item, result) for item, result in zip(sent.batch, results, strict=True)):
            # every client left before the instance ran it: no execution to count, as drop_cancelled
            self._release(index)
            answer_cancelled(sent.batch, self._runner.stats)
            return
        if ahead and out:  # the instance goes on to the batch sent behind this one
            following, now = out[0], time.monotonic_ns()
            following.start = now
            for item in following.batch:
                item.started_ns = now
        self._release(index)  # the next batch first: the instance works while this one completes
        self._runner.settle(sent.batch, results, sent.start)

    def queued_behind(self) -> int:
        """Batches sent behind a running one and not started yet: still pending, as queued ones."""
        return sum(max(0, len(out) - 1) for out in self._out)

    def _release(self, index: int) -> None:
        self.running -= 1
        if not self._out[index]:  # its last batch just left it
            self._busy[index].release()
        self._pump()

    def _revive(self, index: int) -> None:
        """Start instance `index` again on a helper thread; its busy lock stays held until it is back."""
        self._reviving.add(index)
        self._down.pop(index, None)
        instance = self._instances[index]

        def start() -> None:
            try:
                error = instance.revive()
            except Exception as exc:  # a bug of ours: the instance stays down, tried again later
                _LOG.exception("starting instance %d again", index)
                error = internal(f"{type(exc).__name__}: {exc}")
            self._call_soon(self._revived, index, error)

        threading.Thread(target=start, name=f"revive_{index}", daemon=True).start()

    def _revived(self, index: int, error: TritonError | None) -> None:
        if self._ended:
            return
        assert self.loop is not None
        if error is None:
            self._reviving.discard(index)
            self._retry_s.pop(index, None)
            self._busy[index].release()
            self._pump()
            return
        self._down[index] = error
        if error.code != ErrorCode.UNAVAILABLE:  # UNAVAILABLE: it will not run again (it gave up)
            delay = self._retry_s.get(index, RETRY_FIRST_S)
            self._retry_s[index] = min(2 * delay, RETRY_MOST_S)
            _LOG.warning("%s; trying again in %.1f s", error.message, delay)
            self.loop.call_later(delay, self._retry, index)
        self._pump()  # fails the waiting requests when no instance is left to run them

    def _retry(self, index: int) -> None:
        if not self._ended:
            self._revive(index)

    def _fail_waiting_with(self, error: TritonError) -> None:
        while self.waiting:
            self._runner.fail(self.waiting.popleft(), error)

    def _accept(self, batch: list[WorkItem]) -> None:
        self.waiting.append(batch)
        self._pump()

    def _call_soon(self, callback: Callable[..., None], *args: object) -> None:
        assert self.loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed (shutdown): nobody waits any more
            self.loop.call_soon_threadsafe(callback, *args)

    # other threads -----------------------------------------------------------------------------------
    def forward(self, batch: list[WorkItem]) -> bool:
        """A worker thread's batch: queue it on the loop. False when the loop cannot take it (none
        attached yet, or stopped): the worker runs it."""
        loop = self.loop
        if loop is None or not loop.is_running():
            return False
        try:
            loop.call_soon_threadsafe(self._accept, batch)
        except RuntimeError:
            return False
        return True

    def wake(self) -> None:
        """A worker thread freed an instance: the loop's waiting requests may take it."""
        if self.loop is not None and self.waiting:
            self._call_soon(self._pump)

    def settle_before_unload(self, timeout: float | None) -> list[int]:
        """Stop taking requests and wait (up to `timeout`) until what the loop queued and started is
        done, while the loop runs; requests still waiting then fail. Returns the instances whose
        batch is still out (a stopped loop never completes it): unloading must not wait for their
        busy locks."""
        self._closed = True
        deadline = None if timeout is None else time.monotonic() + timeout
        while (self.waiting or self.running) and self._loop_runs():
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self._ended = True
        if self.waiting:
            if self._loop_runs():
                self._call_soon(self._fail_waiting)
            else:
                self._fail_waiting()
        # an instance being started again holds its busy lock until then, or for good
        return [index for index, out in enumerate(self._out) if out or index in self._reviving]

    def _loop_runs(self) -> bool:
        return self.loop is not None and self.loop.is_running()

    def _fail_waiting(self) -> None:
        while self.waiting:
            for item in self.waiting.popleft():
                error = unavailable(f"model unloaded before request '{item.request.id}' ran")
                with contextlib.suppress(RuntimeError):  # its event loop is closed: nobody waits
                    item.complete(error)


def _dropped(item: WorkItem, result: InferenceResponse | TritonError | None) -> bool:
    """The instance answered the request CANCELLED without running it: its client had left."""
    return item.request.cancelled and isinstance(result, TritonError) and result.code == ErrorCode.CANCELLED
