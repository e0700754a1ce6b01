"""Triton's dynamic batcher: queues requests per priority level and hands instance workers batches
formed the way Triton forms them (core `DynamicBatchScheduler::GetDynamicBatch`).

How a batch is formed, each time a worker asks (`next_batch`):

- The queue is walked in order: priority level 1 first (1 is the highest), and within a level first the
  requests in arrival order, then the requests whose DELAY timeout expired. A batch may span levels.
- Each request adds max(1, rows). The walk stops before the request that would exceed max_batch_size,
  or before a request whose batch key (input names, datatypes, shapes beyond dim 0 except of
  allow_ragged_batch inputs; never the requested outputs, as in Triton) differs from the batch's
  first request; in both cases the batch is sent now. Requests are never
  split or reordered: whatever the walk stopped at waits for the next batch, in order.
- When the pending rows equal a preferred_batch_size, that point is remembered; the largest one wins.
  When the next request would take the batch beyond the largest preferred size, the rows so far are
  remembered too (Triton does this even when they are not a preferred size).
- Decision: a remembered (preferred) batch is sent while the oldest pending request is younger than
  max_queue_delay_microseconds (always when the delay is 0). Otherwise everything pending is sent when
  the walk was cut short, or the pending rows reach the largest preferred size, or the delay is 0 or has
  passed. Otherwise the worker waits until the delay passes or more requests arrive.
  So with preferred [4], max 8, delay 0 and 6 single-row requests queued, the batches are 4 then 2
  (checked against real Triton 2.51); with a delay that has already passed when the worker asks, all 6
  go at once (also what Triton 2.51 does).
- No preferred_batch_size configured means [max_batch_size] (Triton's config normalisation), i.e.:
  send as soon as max_batch_size rows are queued, or, once the delay has passed since the oldest
  pending request, whatever is queued (delay 0: whatever is queued now).

Queue policies (per level: priority_queue_policy[level], else default_queue_policy):

- max_queue_size: `enqueue` raises UNAVAILABLE "[request id: <id>] Exceeds maximum queue size" (Triton's
  wording; `<id_unknown>` when the request has no id) when the level already holds that many.
- default_timeout_microseconds (0 = none); with allow_timeout_override a request's `timeout` parameter
  may lower it, never raise it (so with no default timeout a request timeout has no effect; Triton
  2.51 behaves the same). On expiry REJECT completes the request with UNAVAILABLE "Request timeout
  expired"; DELAY moves it behind the level's unexpired requests, still to be served, with no timeout.
- Expiry is enforced when the deadline passes, by a small timer thread the batcher starts on the first
  request that has a deadline (so it happens even while every worker is busy; the thread ends after a
  second without deadlines, or at close), and in any case before a batch is formed. Real Triton 2.51
  is lazier: it rejects expired requests only when its batcher next walks the queue, which is after
  an instance frees up.

preserve_ordering: the batcher hands each dispatched request a sequence number and re-binds
`item.complete` so that responses are delivered in dispatch order: a completion that arrives early is
held until every earlier request has completed, then delivered from the thread that completed the
earliest one. Workers need do nothing special, but they must call `item.complete` exactly once for
every item they are given, errors included, or later responses stay held. (Config validation allows
preserve_ordering only with one priority level and no DELAY, so dispatch order is arrival order.)
Requests rejected in the queue (full, timed out) never enter that order and are answered at once.

WorkItem fields the batcher sets: `deadline_ns` (from the queue policy at enqueue; back to 0 when a
DELAY timeout moved the request), `priority_level` (the resolved level, when priority_levels > 0) and
`started_ns` (when the request is handed to a worker).
"""

from __future__ import annotations

import heapq
import sys
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Hashable
from itertools import chain
from typing import TYPE_CHECKING

from server.protocol.errors import ErrorCode, TritonError, unavailable
from server.scheduling.batch import batch_key
from server.scheduling.delay_knobs import delay_count
from server.scheduling.work import Scheduler, WorkItem

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching, ModelQueuePolicy

    from server.protocol.types import InferenceRequest, InferenceResponse
    from server.scheduling.work import Completion

BatchKeyFn = Callable[["InferenceRequest"], Hashable]

_NEVER = sys.maxsize  # a wake threshold no queue reaches
_DELAY = 1  # ModelQueuePolicy.TimeoutAction.DELAY
_EXPIRY_IDLE_S = 1.0  # the expiry thread exits after this long without deadlines


def _log_request(request: InferenceRequest) -> str:
    """Triton's `InferenceRequest::LogRequest()` prefix of request-scoped error messages."""
    return f"[request id: {request.id or '<id_unknown>'}] "


def _timeout_error() -> TritonError:
    return TritonError(ErrorCode.UNAVAILABLE, "Request timeout expired")


class _Level:
    """One priority level: its queue policy, its queue and its delayed (timed-out, DELAY) queue."""

    __slots__ = ("allow_override", "delay_on_timeout", "delayed", "max_queue_size", "queue", "timeout_us")

    def __init__(self, policy: ModelQueuePolicy) -> None:
        self.max_queue_size = int(policy.max_queue_size)
        self.timeout_us = int(policy.default_timeout_microseconds)
        self.allow_override = bool(policy.allow_timeout_override)
        self.delay_on_timeout = int(policy.timeout_action) == _DELAY
        # entries are (item, batch key): the key is computed once, at enqueue, outside the lock
        self.queue: deque[tuple[WorkItem, Hashable]] = deque()
        self.delayed: deque[tuple[WorkItem, Hashable]] = deque()


class _ResponseOrder:
    """Delivers completions in dispatch order (preserve_ordering)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # held while delivering, so deliveries never interleave; reentrant in case a completion
        # completes another request of this model on the same thread
        self._deliver = threading.RLock()
        self._issued = 0
        self._next = 0
        self._held: dict[int, tuple[Completion, InferenceResponse | TritonError]] = {}

    def bind(self, item: WorkItem) -> None:
        """Give `item` the next sequence number; called in dispatch order (under the batcher lock)."""
        seq = self._issued
        self._issued = seq + 1
        original = item.complete

        def complete(result: InferenceResponse | TritonError) -> None:
            self._done(seq, original, result)

        item.complete = complete

    def _done(self, seq: int, complete: Completion, result: InferenceResponse | TritonError) -> None:
        with self._lock:
            self._held[seq] = (complete, result)
        with self._deliver:
            while True:
                with self._lock:
                    ready = self._held.pop(self._next, None)
                    if ready is None:
                        return
                    self._next += 1
                ready[0](ready[1])


class DynamicBatcher(Scheduler):
    """Triton's dynamic batching scheduler for a model with max_batch_size > 0.

    `batched_key(request)` says which requests may share a batch (equal keys); None means
    `batch_key(request, batched=True)`; a model with ragged inputs passes one that ignores their
    shapes (`make_scheduler` in runner.py).

    `next_batch` may be called by any number of worker threads at once (one per model instance); each
    call blocks until it can return a batch (a non-empty list of WorkItems, in queue order, at most
    max_batch_size rows) and returns None once `close()` was called and the queue is drained.
    """

    def __init__(
        self,
        dynamic_batching: ModelDynamicBatching,
        max_batch_size: int,
        batched_key: BatchKeyFn | None = None,
    ) -> None:
        self.max_batch_size = max(1, int(max_batch_size))
        sizes = sorted(
            {int(s) for s in dynamic_batching.preferred_batch_size if 0 < s <= self.max_batch_size}
        )
        self.preferred_batch_sizes: tuple[int, ...] = tuple(sizes) or (self.max_batch_size,)
        self._preferred = frozenset(self.preferred_batch_sizes)
        self._max_preferred = self.preferred_batch_sizes[-1]
        self.max_queue_delay_ns = int(dynamic_batching.max_queue_delay_microseconds) * 1000
        self.preserve_ordering = bool(dynamic_batching.preserve_ordering)
        self._key: BatchKeyFn = batched_key or _batched_key

        # levels by number (1 is the highest priority; the only level is 1 when priority_levels is 0),
        # made when a request first uses one: a config may count 2**64 - 1 levels (Triton's qa loads
        # such a model), so memory follows the levels used, never the levels counted
        self.priority_levels = int(dynamic_batching.priority_levels)
        count = max(1, self.priority_levels)
        default = int(dynamic_batching.default_priority_level)
        self.default_priority_level = default if 1 <= default <= count else count
        self._policies = dynamic_batching.priority_queue_policy if self.priority_levels else {}
        self._default_policy = dynamic_batching.default_queue_policy
        self._levels: dict[int, _Level] = {}
        # the walk order: each used level's queue, then its delayed queue, highest priority first
        # (deques are never replaced; the list is rebuilt when a level is first used)
        self._queues: list[deque[tuple[WorkItem, Hashable]]] = []
        self._timed_levels: list[_Level] = []

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # workers wait here
        self._timer = threading.Condition(self._lock)  # the expiry thread waits here
        self._closed = False
        self._size = 0  # queued requests
        self._rows = 0  # queued rows
        # enqueue wakes a worker only when that may let a batch go sooner: the queue was empty, the
        # queued rows reach the next preferred size, or a request with another key arrives
        self._wake_rows = 1
        self._wake_key: Hashable = None
        self._timer_deadline = 0  # the delay deadline some worker is already waiting for (0: none)
        # deadlines: a heap of (deadline_ns, id(item)) with the live ones in _timed (lazy deletion)
        self._deadlines: list[tuple[int, int]] = []
        self._timed: dict[int, WorkItem] = {}
        self._expiry_thread: threading.Thread | None = None
        self._expiry_target = 0  # the deadline the expiry thread sleeps until (0: none)
        self._order = _ResponseOrder() if self.preserve_ordering else None
        self._hold = delay_count()  # Triton's test knob: no batch until this many are queued

    # Scheduler -------------------------------------------------------------------------------------
    def enqueue(self, item: WorkItem) -> None:
        request = item.request
        key = self._key(request)
        level_no = item.priority_level or request.priority
        if not 1 <= level_no <= self.priority_levels:  # 0 or out of range: the default level
            level_no = self.default_priority_level
        level = self._levels.get(level_no) or self._new_level(level_no)
        if self.priority_levels:
            item.priority_level = level_no  # resolved, for statistics
        timeout_us = level.timeout_us
        if timeout_us and level.allow_override:
            override = request.timeout_us
            if 0 < override < timeout_us:
                timeout_us = override
        with self._lock:
            if self._closed:
                raise unavailable(
                    _log_request(request) + "Server is stopping, scheduler for model has stopped accepting "
                    "new inference requests"
                )
            if level.max_queue_size and len(level.queue) + len(level.delayed) >= level.max_queue_size:
                raise unavailable(_log_request(request) + "Exceeds maximum queue size")
            level.queue.append((item, key))
            self._size += 1
            self._rows += item.rows or 1
            if timeout_us:
                self._add_deadline(item, time.monotonic_ns() + timeout_us * 1000)
            if self._hold and self._size >= self._hold:
                self._work.notify_all()  # the held first batch may form now
            elif self._rows >= self._wake_rows or key != self._wake_key:
                # one wake-up per change: the woken worker re-evaluates and sets the next threshold
                self._wake_rows = _NEVER
                self._wake_key = key
                self._work.notify()

    def _new_level(self, number: int) -> _Level:
        """The level `number`, made on its first use, and its place in the walk order."""
        with self._lock:
            level = self._levels.get(number)
            if level is None:
                policy = self._policies.get(number, self._default_policy)  # (.get never inserts)
                level = self._levels[number] = _Level(policy)
                ordered = [self._levels[n] for n in sorted(self._levels)]
                self._queues = [q for each in ordered for q in (each.queue, each.delayed)]
                self._timed_levels = [each for each in ordered if each.timeout_us > 0]
            return level

    def next_batch(self, worker: int = 0) -> list[WorkItem] | None:
        while True:
            with self._lock:
                batch, expired = self._next_locked()
            if expired:  # completed outside the lock: a completion may call back into the server
                _reject(expired)
            if not isinstance(batch, _Again):
                return batch

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._timer.notify_all()

    def pending(self) -> int:
        return self._size

    # batch formation -------------------------------------------------------------------------------
    def _next_locked(self) -> tuple[list[WorkItem] | _Again | None, list[WorkItem]]:
        """Under the lock: a batch, None (closed and drained), or _AGAIN with expired requests to reject."""
        while True:
            now = time.monotonic_ns()
            if self._deadlines and self._deadlines[0][0] <= now:
                expired = self._expire(now)
                if expired:
                    return _AGAIN, expired
            if not self._size:
                if self._closed:
                    return None, []
                self._wake_rows = 1
                self._work.wait()
                continue
            if self._hold:
                if self._size < self._hold and not self._closed:
                    self._work.wait()
                    continue
                self._hold = 0
            count, wait_ns = self._plan(now)
            if count:
                return self._take(count, now), []
            deadline = now + wait_ns
            if self._timer_deadline and self._timer_deadline <= deadline:
                # another worker wakes no later than this one would: wait to be woken instead
                self._work.wait()
            else:
                self._timer_deadline = deadline
                self._work.wait(wait_ns / 1e9)
                if self._timer_deadline == deadline:
                    self._timer_deadline = 0

    def _plan(self, now: int) -> tuple[int, int]:
        """Walk the queue as Triton does; return (requests to take now, 0) or (0, ns to wait)."""
        max_batch = self.max_batch_size
        max_preferred = self._max_preferred
        preferred = self._preferred
        delay = self.max_queue_delay_ns
        pending = 0  # rows in the pending batch
        count = 0  # requests in the pending batch
        best = 0  # requests in the remembered (preferred) batch
        send_now = False
        oldest = now
        first_key: Hashable = None
        for item, key in chain.from_iterable(self._queues):
            rows = item.rows or 1
            if count:
                if pending + rows > max_preferred and not best:
                    best = count
                if pending + rows > max_batch or key != first_key:
                    send_now = True
                    break
            else:
                first_key = key
            pending += rows
            count += 1
            if item.enqueued_ns < oldest:
                oldest = item.enqueued_ns
            if pending in preferred:
                best = count
            if pending >= max_batch or (best and not delay and pending >= max_preferred):
                # nothing more can change the decision: the next request would only close the batch
                send_now = True
                break
        exceeded = self._closed or (delay != 0 and now - oldest >= delay)
        if best and not exceeded:
            return best, 0
        if send_now or pending >= max_preferred or exceeded or not delay:
            return count, 0
        # wait for the delay, or for enough rows to reach the next preferred size
        self._wake_rows = self._rows - pending + self._next_preferred(pending)
        self._wake_key = first_key
        return 0, delay - (now - oldest)

    def _next_preferred(self, rows: int) -> int:
        sizes = self.preferred_batch_sizes
        index = bisect_right(sizes, rows)
        return sizes[index] if index < len(sizes) else sizes[-1]

    def _take(self, count: int, now: int) -> list[WorkItem]:
        """Remove the first `count` requests in walk order and hand them out."""
        batch: list[WorkItem] = []
        rows = 0
        for queue in self._queues:
            while queue and len(batch) < count:
                item = queue.popleft()[0]
                batch.append(item)
                rows += item.rows or 1
            if len(batch) == count:
                break
        self._size -= count
        self._rows -= rows
        timed = self._timed
        if timed:
            for item in batch:
                timed.pop(id(item), None)
            self._drop_stale_deadlines()
        order = self._order
        for item in batch:
            item.started_ns = now
            if order is not None:
                order.bind(item)
        if self._size:
            # more work queued: let another idle worker look at it (it sets the next threshold)
            self._wake_rows = _NEVER
            self._work.notify()
        else:
            self._wake_rows = 1
        return batch

    # queue timeouts --------------------------------------------------------------------------------
    def _add_deadline(self, item: WorkItem, deadline: int) -> None:
        item.deadline_ns = deadline
        self._timed[id(item)] = item
        heapq.heappush(self._deadlines, (deadline, id(item)))
        if self._expiry_thread is None:
            self._expiry_thread = threading.Thread(
                target=self._expiry_loop, name="dynamic-batcher-timeouts", daemon=True
            )
            self._expiry_thread.start()
        elif not self._expiry_target or deadline < self._expiry_target:
            self._timer.notify()

    def _drop_stale_deadlines(self) -> None:
        heap = self._deadlines
        timed = self._timed
        while heap:
            deadline, ident = heap[0]
            item = timed.get(ident)
            if item is not None and item.deadline_ns == deadline:
                return
            heapq.heappop(heap)

    def _expire(self, now: int) -> list[WorkItem]:
        """Apply the timeout action to every queued request whose deadline has passed; return the
        ones to reject (the caller completes them outside the lock)."""
        heap = self._deadlines
        timed = self._timed
        due = 0
        while heap and heap[0][0] <= now:
            deadline, ident = heapq.heappop(heap)
            item = timed.get(ident)
            if item is not None and item.deadline_ns == deadline:
                due += 1
        if not due:
            return []
        rejected: list[WorkItem] = []
        rows = 0
        for level in self._timed_levels:
            queue = level.queue
            # constant timeouts expire in arrival order, so most expired requests are at the front
            while queue and 0 < queue[0][0].deadline_ns <= now:
                entry = queue.popleft()
                rows += self._expire_one(level, entry, rejected)
                due -= 1
            if due > 0 and queue:  # shorter per-request timeouts: some expired ones sit further back
                keep = [e for e in queue if not 0 < e[0].deadline_ns <= now]
                if len(keep) != len(queue):
                    expired = [e for e in queue if 0 < e[0].deadline_ns <= now]
                    queue.clear()
                    queue.extend(keep)
                    for entry in expired:
                        rows += self._expire_one(level, entry, rejected)
                        due -= 1
        self._size -= len(rejected)
        self._rows -= rows
        # the pending batch changed (its oldest request may be gone): a waiting worker re-evaluates
        self._wake_rows = _NEVER
        self._work.notify()
        return rejected

    def _expire_one(self, level: _Level, entry: tuple[WorkItem, Hashable], rejected: list[WorkItem]) -> int:
        """Delay or reject one expired request; return the rows it took out of the queue."""
        item = entry[0]
        self._timed.pop(id(item), None)
        item.deadline_ns = 0  # no queue timeout any more
        if level.delay_on_timeout:
            level.delayed.append(entry)
            return 0
        rejected.append(item)
        return item.rows or 1

    def _expiry_loop(self) -> None:
        """Enforce deadlines while no worker asks (all busy): sleep until the closest one."""
        with self._lock:
            while True:
                self._drop_stale_deadlines()
                if self._closed and not self._timed:
                    self._expiry_thread = None
                    return
                now = time.monotonic_ns()
                if self._deadlines and self._deadlines[0][0] <= now:
                    expired = self._expire(now)
                    if expired:
                        self._lock.release()
                        try:
                            _reject(expired)
                        finally:
                            self._lock.acquire()
                    continue
                if self._deadlines:
                    self._expiry_target = self._deadlines[0][0]
                    self._timer.wait((self._expiry_target - now) / 1e9)
                    self._expiry_target = 0
                elif not self._timer.wait(_EXPIRY_IDLE_S) and not self._deadlines:
                    # idle: stop; the next request with a deadline starts a new thread
                    self._expiry_thread = None
                    return

    # introspection ---------------------------------------------------------------------------------
    def queued(self) -> list[WorkItem]:
        """The queued requests in walk order (a snapshot; for tests and debugging)."""
        with self._lock:
            return [entry[0] for entry in chain.from_iterable(self._queues)]


class _Again:
    """Sentinel type: no batch yet, expired requests must be rejected outside the lock first."""


_AGAIN = _Again()


def _batched_key(request: InferenceRequest) -> Hashable:
    return batch_key(request, True)


def _reject(items: list[WorkItem]) -> None:
    for item in items:
        item.complete(_timeout_error())
