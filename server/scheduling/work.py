"""A queued request, the channel a request's responses stream through, and the scheduler interface
instance workers pull batches from."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from server.protocol.errors import ErrorCode, TritonError, client_cancelled

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest, InferenceResponse
    from server.scheduling.stats import ModelStats

Completion = Callable[["InferenceResponse | TritonError"], None]
StreamSink = Callable[["InferenceResponse | TritonError | None", bool], None]


class ResponseStream:
    """Where the responses of one streamed request go, as the model sends them (a decoupled model may
    send any number; the others send one).

    `deliver(result, final)` may be called from any thread (the model's own ones included): a
    response, an error response, or None for a flags-only final; nothing is delivered after the final
    one. The consumer sets `cancelled` when its client went away, which the model sees through its
    response sender's `is_cancelled()`.
    """

    __slots__ = ("_lock", "_sink", "cancelled", "finished")

    def __init__(self, sink: StreamSink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self.finished = False
        self.cancelled = False

    def deliver(self, result: InferenceResponse | TritonError | None, final: bool) -> None:
        with self._lock:
            if self.finished:
                return
            if final:
                self.finished = True
        self._sink(result, final)


@dataclass(slots=True)
class WorkItem:
    """One request waiting for an instance. `complete` is called exactly once, from a worker thread or
    (for a request answered through its response sender) from the thread that sent its final response.

    A streamed request carries a `stream`: every response its model sends through the response sender
    goes there as it is sent, and `complete` follows the final one (its result then matters only to
    the schedulers that wrap `complete`). A request that ends otherwise (a failed execution, a queue
    timeout) gets its error through `complete` alone: the stream's consumer then ends the stream with
    it (InferenceService does)."""

    request: InferenceRequest
    rows: int  # batch rows it brings (1 for a non-batching model)
    complete: Completion
    enqueued_ns: int = field(default_factory=time.monotonic_ns)
    priority_level: int = 0  # 0 = the model's default level
    deadline_ns: int = 0  # 0 = no queue timeout
    started_ns: int = 0  # set when a worker takes it
    instance: int = -1  # the index of the instance that runs it, set with started_ns
    stream: ResponseStream | None = None  # streamed requests: where the responses go as they are sent


def drop_cancelled(batch: list[WorkItem], stats: ModelStats | None = None) -> list[WorkItem]:
    """The requests of `batch` whose clients still wait; the others (InferenceRequest.cancelled) are
    completed with a CANCELLED error, never executed (counted in `stats` as failed, CANCELED)."""
    if not any(item.request.cancelled for item in batch):
        return batch
    kept: list[WorkItem] = []
    cancelled: list[WorkItem] = []
    for item in batch:
        (cancelled if item.request.cancelled else kept).append(item)
    answer_cancelled(cancelled, stats)
    return kept


def answer_cancelled(items: list[WorkItem], stats: ModelStats | None) -> None:
    """Requests whose clients left while they waited in a queue, answered CANCELLED: as Triton's
    schedulers, each counts as a failed request, reason CANCELED (nv_inference_request_failure)."""
    now = time.monotonic_ns()
    for item in items:
        if stats is not None:
            stats.record_failure(now - item.enqueued_ns, "CANCELED")
        item.complete(client_cancelled())


class Scheduler(ABC):
    """Queues requests; instance worker threads call `next_batch` to take work. What the runner
    (runner.py) may use of a scheduler is declared here, with the defaults a scheduler gets by not
    overriding it: `pads_batches`, `prepare` and `reschedule`."""

    # whether the batches it hands out may hold padding (sequence.NullItem) that is no request: the
    # runner drops their results and leaves them out of the statistics
    pads_batches: bool = False
    # the model version's statistics, set by its runner: requests cancelled while queued count there
    stats: ModelStats | None = None

    def prepare(self, instance_count: int) -> None:  # noqa: B027 - most schedulers need nothing
        """Called once the model's instances are loaded, before any `next_batch`: schedulers that pin
        work to instances (sequences) size themselves."""

    def reschedule(self, item: WorkItem) -> bool:
        """Queue `item` again: its model released it with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE.
        False when this scheduler does not (only iterative sequences do, as in Triton)."""
        return False

    @abstractmethod
    def enqueue(self, item: WorkItem) -> None:
        """Add a request; raise TritonError (UNAVAILABLE) when the queue refuses it."""

    @abstractmethod
    def next_batch(self, worker: int = 0) -> list[WorkItem] | None:
        """Block until a batch is ready for instance `worker` (0..N-1); None once the scheduler is closed
        and drained. Only schedulers that pin work to an instance (sequences) look at `worker`."""

    @abstractmethod
    def close(self) -> None:
        """Stop accepting; wake waiting workers. Queued work is still handed out until drained."""

    @abstractmethod
    def pending(self) -> int:
        """Requests waiting in the queue (nv_inference_pending_request_count)."""


def stopping(request: InferenceRequest) -> TritonError:
    """Triton's answer to a request a stopping scheduler no longer takes (its request-id prefix too)."""
    return TritonError(
        ErrorCode.UNAVAILABLE,
        f"[request id: {request.id or '<id_unknown>'}] Server is stopping, scheduler for model has stopped "
        "accepting new inference requests",
    )


class DefaultScheduler(Scheduler):
    """Triton's default scheduler: first come first served, one request per execution."""

    def __init__(self) -> None:
        self._queue: deque[WorkItem] = deque()
        self._ready = threading.Condition()
        self._closed = False
        # requests the runner queues outside (its event loop's, see dispatch.py): they count as pending
        self.elsewhere: Callable[[], int] | None = None

    def enqueue(self, item: WorkItem) -> None:
        with self._ready:
            if self._closed:
                raise stopping(item.request)
            self._queue.append(item)
            self._ready.notify()

    def next_batch(self, worker: int = 0) -> list[WorkItem] | None:
        with self._ready:
            while not self._queue:
                if self._closed:
                    return None
                self._ready.wait()
            return [self._queue.popleft()]

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def pending(self) -> int:
        return len(self._queue) + (0 if self.elsewhere is None else self.elsewhere())
