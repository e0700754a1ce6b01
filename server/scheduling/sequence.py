"""Triton's sequence batcher: correlation IDs, START/END flags, sequence slots, the `direct` and `oldest`
strategies, the control tensors, idle sequences and implicit state (core `SequenceBatchScheduler`).

Admission (`enqueue`), in Triton's order and with its messages:

- a batching model's request must have batch size 1, then the correlation ID (`sequence_id`, uint64
  or string) must be non-zero / non-empty, then a sequence that holds no slot and has no backlog must
  start with START. A START for a sequence that is still active continues it where it is (Triton
  logs a warning and does the same). After `close()` only new sequences are refused.
- END stops the correlation ID from being tracked as soon as the END request is queued: a later
  request of that ID needs START again.

Slots: every instance has `max_batch_size` slots (1 without batching), or `max_candidate_sequences`
with `oldest`. A starting sequence takes the free slot Triton would give it (`sequence_slots` keeps
the free slots in Triton's order; which instance Triton counts as the first follows the order its
instances finished loading, tcli's is the instance_group order). With no free slot the sequence goes
to the backlog; its later requests join it there, in order. A freed slot goes to the oldest
backlogged sequence (all its requests move into the slot) or back to the heap.

`direct` (the default): the worker of instance i asks `next_batch(i)`; a batch holds one request
per slot, for slots 0 .. the highest slot that has a request now; slots below it without a request,
or whose next request cannot share the batch (input shapes), get a null request (`NullItem`): the
inputs of the batch's first request zeroed (garbage in Triton), READY/START/END false, CORRID 0, no
correlation ID, flags 0. Its output is dropped and it counts only in the execution's batch size
(batch_stats), as in Triton. A slot is released as soon as its END request is taken into a batch.
With `minimum_slot_utilization` > 0 and `max_queue_delay_microseconds` > 0 a batch waits until that
share of the instance's slots has a request or the oldest waiting request is older than the delay.

`oldest`: each instance runs a dynamic batcher (preferred_batch_size, max_queue_delay_microseconds,
preserve_ordering) over its candidate sequences. A sequence has at most one request in that batcher
at a time: its next request is issued when the previous one completes, so a batch holds at most one
request per sequence. An END request releases the slot when it is issued; a backlogged sequence
that takes the slot over starts once that END request has completed.

Iterative sequences (`iterative_sequence: true`): a request without a correlation ID gets the next
one of the model's own (from 1) and START; the model may release a request with RESCHEDULE
(`reschedule`), which queues it again in its slot without START or END; its final release ends the
sequence.

The control tensors (START, END, READY, CORRID) are built in `sequence_controls`, the implicit state
(`state`) in `sequence_state`.

Idle sequences: every request refreshes its sequence's timestamp. One reaper thread per scheduler
sleeps until the oldest timestamp is `max_sequence_idle_microseconds` old (default 1 s), then
force-ends the sequence: its correlation ID is forgotten (a later request without START gets the
START error) and its slot is released once the requests it already queued have run. The model sees
nothing of this. A sequence still in the backlog is not ended; it is looked at again every 50 ms.

Cancelled requests: a client that goes away while its request waits (in its slot's queue or the
backlog) cancels the whole sequence, as Triton does: every request of it still waiting is answered
CANCELLED, its correlation ID is forgotten and its slot frees.

Long: the slots, their queues, the backlog and the idle reaper are one protocol under one lock
(admission, batching, release, cancellation and idle ends each move requests between them); the
pieces that stand alone live beside it (sequence_slots, sequence_controls, sequence_state).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from server.protocol.errors import invalid_arg, unavailable
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.batch import batch_key
from server.scheduling.delay_knobs import backlog_delay_count, delay_count
from server.scheduling.sequence_controls import Array, CorrelationId, add_controls, flag_controls
from server.scheduling.sequence_slots import RELEASE, Backlog, Entry, Instance, SlotRef, heap_pop, heap_push
from server.scheduling.sequence_state import StateSpec, attach_state, state_specs
from server.scheduling.work import Scheduler, WorkItem, answer_cancelled

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.errors import TritonError

KeyFn = Callable[[InferenceRequest], Hashable]

DEFAULT_IDLE_US = 1_000_000
_BACKLOG_RECHECK_NS = 50_000_000  # Triton's reaper looks at idle backlogged sequences every 50 ms
_STRATEGY_DIRECT = "direct"
_STRATEGY_OLDEST = "oldest"
_HOLD_POLL_S = 0.01  # how often a batch held by the delay knobs looks at the queues again


class NullItem(WorkItem):
    """A padding request for an empty slot of a direct batch; the runner drops its result and counts it
    only in the execution's batch size."""

    __slots__ = ()


def _no_completion(result: InferenceResponse | TritonError) -> None:
    """Null requests have nobody to answer."""


class SequenceScheduler(Scheduler):
    """The sequence batcher for one model version. `prepare(instance_count)` must be called (by the
    runner, at load) before requests are queued; `next_batch(i)` serves instance i only."""

    pads_batches = True  # direct batches may hold NullItems

    def __init__(self, config: ModelConfig, model_dir: Path | None = None) -> None:
        sequence_batching = config.sequence_batching
        self._model = config.name
        self._model_dir = model_dir
        self.batched = config.max_batch_size > 0
        self.strategy = (
            _STRATEGY_OLDEST
            if sequence_batching.WhichOneof("strategy_choice") == "oldest"
            else _STRATEGY_DIRECT
        )
        self._config = config
        slots = max(1, config.max_batch_size)
        if self.strategy == _STRATEGY_OLDEST and sequence_batching.oldest.max_candidate_sequences > 0:
            slots = int(sequence_batching.oldest.max_candidate_sequences)
        self.slots_per_instance = slots
        self._max_slots = max(1, config.max_batch_size)  # direct: the utilization denominator
        self._delay_ns = int(sequence_batching.direct.max_queue_delay_microseconds) * 1000
        self._min_utilization = float(sequence_batching.direct.minimum_slot_utilization)
        idle_us = int(sequence_batching.max_sequence_idle_microseconds) or DEFAULT_IDLE_US
        self._idle_ns = idle_us * 1000
        self._shape = (1, 1) if self.batched else (1,)
        self._flags, self._corrid = flag_controls(sequence_batching)
        # iterative sequences: a request without a correlation ID starts a sequence of its own, and
        # the model may reschedule it (Triton's IterativeSequencer)
        self.iterative = bool(sequence_batching.iterative_sequence)
        self._next_correlation_id = itertools.count(1)
        self._control_names = frozenset(
            [f.name for f in self._flags] + ([self._corrid.name] if self._corrid else [])
        )
        self._key: KeyFn = self._python_key if config.backend == "python" else self._tensor_key
        self._declared_outputs = [o.name for o in config.output]
        self._states: list[StateSpec] = []
        self._state_outputs: dict[str, StateSpec] = {}

        self._lock = threading.Lock()
        self._instances: list[Instance] = []
        self._free: list[SlotRef] = []
        self._slots: dict[CorrelationId, SlotRef] = {}
        self._backlog: dict[CorrelationId, Backlog] = {}
        self._backlogs: deque[Backlog] = deque()
        self._seen: OrderedDict[CorrelationId, int] = OrderedDict()  # last request time, oldest first
        self._queued = 0  # requests in slot queues and the backlog (not yet in a batch / batcher)
        # Triton's test knobs (direct strategy): no batch until this many requests are queued in the
        # slots, and this many in the backlog
        hold = (delay_count(), backlog_delay_count())
        self._hold: tuple[int, int] | None = hold if self.strategy == _STRATEGY_DIRECT and any(hold) else None
        self._closed = False
        self._reaper: threading.Thread | None = None
        self._reaper_wake = threading.Condition(self._lock)
        self._reaper_sleeping_until = 0  # 0: not waiting for a deadline

    # set-up ----------------------------------------------------------------------------------------
    def prepare(self, instance_count: int) -> None:
        """Create the slots of `instance_count` instances and read the initial states (raising
        TritonError as Triton fails the load)."""
        self._states = state_specs(self._config, self._model_dir)
        self._state_outputs = {spec.output_name: spec for spec in self._states}
        count = max(1, instance_count)
        self._instances = [Instance(self.slots_per_instance, self._lock) for _ in range(count)]
        self._free = []
        for index in range(count):
            for slot in range(self.slots_per_instance):
                heap_push(self._free, (index, slot))
        if self.strategy == _STRATEGY_OLDEST:
            from server.config.parse import model_config_pb2
            from server.scheduling.dynamic_batcher import DynamicBatcher

            oldest = self._config.sequence_batching.oldest
            dynamic = model_config_pb2().ModelDynamicBatching(
                preferred_batch_size=list(oldest.preferred_batch_size),
                max_queue_delay_microseconds=oldest.max_queue_delay_microseconds,
                preserve_ordering=oldest.preserve_ordering,
            )
            for instance in self._instances:
                instance.batcher = DynamicBatcher(dynamic, self._config.max_batch_size, self._key)

    # Scheduler -------------------------------------------------------------------------------------
    def enqueue(self, item: WorkItem) -> None:
        if not self._instances:
            self.prepare(1)
        request = item.request
        model = self._model
        if self.batched and request.batch_size(True) > 1:
            raise invalid_arg(
                f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            )
        correlation_id = request.correlation_id
        if correlation_id == 0 or correlation_id == "":
            if not self.iterative:
                raise invalid_arg(
                    f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
                )
            correlation_id = next(self._next_correlation_id)
            request.parameters.update(sequence_id=correlation_id, sequence_start=True, sequence_end=False)
        if self.iterative:  # the request's release ends its sequence
            item.complete = self._ending(correlation_id, item.complete)
        start, end = request.sequence_start, request.sequence_end
        entry: Entry = (item, self._key(request))
        add_controls(request, self._flags, self._corrid, self._shape, True)
        now = time.monotonic_ns()
        with self._lock:
            ref = self._slots.get(correlation_id)
            backlog = self._backlog.get(correlation_id) if ref is None else None
            if self._closed and (
                start
                or (self._instances[ref[0]].done if ref is not None else all(i.done for i in self._instances))
            ):
                raise unavailable(
                    "Server is stopping, scheduler for model has stopped accepting new inference requests"
                )
            if not start and ref is None and backlog is None:
                raise invalid_arg(
                    f"inference request for sequence {correlation_id} to model '{model}' must specify the START "
                    "flag on the first request of the sequence"
                )
            self._touch(correlation_id, now)
            self._queued += 1
            backlogged = False
            if ref is None:
                if backlog is None and self._free:
                    ref = heap_pop(self._free)
                    self._slots[correlation_id] = ref
                else:
                    if backlog is None:
                        backlog = Backlog(correlation_id)
                        self._backlogs.append(backlog)
                        if not end:
                            self._backlog[correlation_id] = backlog
                    elif end:
                        del self._backlog[correlation_id]
                    backlog.entries.append(entry)
                    if end:
                        self._seen.pop(correlation_id, None)
                    backlogged = True
            if not backlogged:
                assert ref is not None
                if end:
                    del self._slots[correlation_id]
                    self._seen.pop(correlation_id, None)
                self._to_slot(ref, correlation_id, entry)
        # outside the lock: a request cancelled already is answered at once
        request.when_cancelled(lambda: self._cancelled(correlation_id, item))

    def reschedule(self, item: WorkItem) -> bool:
        """Iterative sequences: the request goes back to its sequence's slot, without START or END (as
        Triton's IterativeSequencer::RescheduleRequest)."""
        if not self.iterative:
            return False
        request = item.request
        request.parameters.update(sequence_start=False, sequence_end=False)
        added = self._control_names.union(spec.input_name for spec in self._states)  # given again when taken
        request.inputs[:] = [t for t in request.inputs if t.name not in added]
        add_controls(request, self._flags, self._corrid, self._shape, True)
        correlation_id = request.correlation_id
        with self._lock:
            ref = self._slots.get(correlation_id)
            if ref is None:  # the sequence ended meanwhile (idle too long)
                raise invalid_arg(
                    f"inference request for sequence {correlation_id} to model '{self._model}' must specify "
                    "the START flag on the first request of the sequence"
                )
            self._touch(correlation_id, time.monotonic_ns())
            index = ref[0]
            instance = self._instances[index]
            if instance.batcher is not None:  # oldest: it is still its slot's request in flight
                instance.batcher.enqueue(item)
            else:
                self._queued += 1
                self._to_slot(ref, correlation_id, (item, self._key(request)))
        return True

    def next_batch(self, worker: int = 0) -> list[WorkItem] | None:
        if not self._instances:
            self.prepare(worker + 1)
        instance = self._instances[worker]
        if instance.batcher is not None:
            return instance.batcher.next_batch(0)
        with self._lock:
            return self._next_direct(worker, instance)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._reaper_wake.notify_all()
            for index, instance in enumerate(self._instances):
                if instance.batcher is not None:
                    self._oldest_maybe_done(index, instance)
                else:
                    instance.ready.notify_all()

    def pending(self) -> int:
        return self._queued + sum(i.batcher.pending() for i in self._instances if i.batcher is not None)

    # admission helpers (outside the lock) ----------------------------------------------------------
    def _python_key(self, request: InferenceRequest) -> Hashable:
        skip = 1 if self.batched else 0
        return tuple(
            sorted(
                (t.name, t.datatype, tuple(t.shape[skip:]))
                for t in request.inputs
                if t.name not in self._control_names
            )
        )

    def _tensor_key(self, request: InferenceRequest) -> Hashable:
        return batch_key(request, self.batched)

    # bookkeeping (under the lock) ------------------------------------------------------------------
    def _touch(self, correlation_id: CorrelationId, now: int) -> None:
        seen = self._seen
        was_empty = not seen
        seen[correlation_id] = now
        seen.move_to_end(correlation_id)
        if self._reaper is None:
            self._reaper = threading.Thread(
                target=self._reap, name=f"{self._model}-sequence-reaper", daemon=True
            )
            self._reaper.start()
        elif was_empty and not self._reaper_sleeping_until:
            self._reaper_wake.notify()

    def _to_slot(self, ref: SlotRef, correlation_id: CorrelationId, entry: Entry) -> None:
        index, slot = ref
        instance = self._instances[index]
        instance.queues[slot].append(entry)
        instance.occupant[slot] = correlation_id
        if instance.batcher is not None:
            if not instance.in_flight[slot]:
                self._oldest_issue(index, instance, slot)
            return
        if slot > instance.max_active:
            instance.max_active = slot
        instance.ready.notify()

    def _release(self, index: int, slot: int) -> bool:
        """Free a slot: hand it to the oldest backlogged sequence (its requests move into the slot's
        queue; True) or put it back with the free slots (False)."""
        instance = self._instances[index]
        if self._backlogs:
            backlog = self._backlogs.popleft()
            last = backlog.entries[-1][0]
            assert last is not None
            if not last.request.sequence_end:
                self._backlog.pop(backlog.correlation_id, None)
                self._slots[backlog.correlation_id] = (index, slot)
            instance.queues[slot].extend(backlog.entries)
            instance.occupant[slot] = backlog.correlation_id
            if instance.batcher is None and slot > instance.max_active:
                instance.max_active = slot
            return True
        instance.occupant[slot] = None
        heap_push(self._free, (index, slot))
        return False

    def _drain_backlog(self, index: int, instance: Instance) -> None:
        """After close: give the backlog this instance's slots that have nothing left to do, so that
        every queued request still runs."""
        for slot in range(self.slots_per_instance):
            if not self._backlogs:
                return
            correlation_id = instance.occupant[slot]
            if correlation_id is not None and not instance.queues[slot] and not instance.in_flight[slot]:
                if self._slots.get(correlation_id) == (index, slot):
                    del self._slots[correlation_id]
                    self._seen.pop(correlation_id, None)
                self._release(index, slot)

    def _attach_state(self, instance: Instance, slot: int, item: WorkItem) -> None:
        """The slot's implicit state in and out of the request (see sequence_state)."""
        attach_state(self._states, self._state_outputs, self._declared_outputs, instance.states, slot, item)

    # direct ----------------------------------------------------------------------------------------
    def _held(self) -> bool:
        """Whether Triton's delay knobs still hold every batch back (cleared for good once met)."""
        assert self._hold is not None
        queued, backlogged = self._hold
        if self._closed:
            return False
        in_slots = sum(len(queue) for instance in self._instances for queue in instance.queues)
        in_backlog = sum(len(backlog.entries) for backlog in self._backlogs)
        if in_slots < queued or in_backlog < backlogged:
            return True
        self._hold = None
        return False

    def _next_direct(self, index: int, instance: Instance) -> list[WorkItem] | None:
        while True:
            if self._hold is not None and self._held():
                instance.ready.wait(_HOLD_POLL_S)  # as Triton, look again every 10 ms
                continue
            ready = 0
            top = -1
            earliest = 0
            queues = instance.queues
            for slot in range(instance.max_active + 1):
                queue = queues[slot]
                if queue and queue[0][0] is None:  # the reaper force-ended this slot's sequence
                    queue.popleft()
                    self._release(index, slot)
                if queue:
                    enqueued = queue[0][0].enqueued_ns  # type: ignore[union-attr]
                    if not ready or enqueued < earliest:
                        earliest = enqueued
                    ready += 1
                    top = slot
            timeout: float | None = None
            if top >= 0 and self._delay_ns and self._min_utilization and not self._closed:
                age = time.monotonic_ns() - earliest
                if age <= self._delay_ns and ready / self._max_slots < self._min_utilization:
                    timeout = (self._delay_ns - age) / 1e9
                    top = -1
            batch = self._take_direct(index, instance, top) if top >= 0 else None
            while instance.max_active >= 0 and instance.occupant[instance.max_active] is None:
                instance.max_active -= 1
            if batch:
                return batch
            if self._closed and timeout is None:
                self._drain_backlog(index, instance)
                if not any(queues):
                    instance.done = True
                    return None
                continue
            instance.ready.wait(timeout)

    def _take_direct(self, index: int, instance: Instance, top: int) -> list[WorkItem]:
        """One request per slot 0..top, null requests where a slot has none (or one that cannot join)."""
        items: list[WorkItem | None] = [None] * (top + 1)
        first: WorkItem | None = None
        first_key: Hashable = None
        now = time.monotonic_ns()
        for slot in range(top + 1):
            queue = instance.queues[slot]
            if not queue:
                continue
            item, key = queue[0]
            assert item is not None
            if first is None:
                first, first_key = item, key
            elif key != first_key:
                continue
            queue.popleft()
            self._queued -= 1
            item.started_ns = now
            request = item.request
            if self._states:
                self._attach_state(instance, slot, item)
            items[slot] = item
            if request.sequence_end:
                self._release(index, slot)
        assert first is not None
        if all(items):
            return items  # type: ignore[return-value]
        null = self._null_item(first.request, now)  # one null request serves every empty slot
        return [null if item is None else item for item in items]

    def _null_item(self, like: InferenceRequest, now: int) -> NullItem:
        inputs = [
            Tensor(t.name, t.datatype, t.shape, _zeros_like(t.data))
            for t in like.inputs
            if t.name not in self._control_names
        ]
        request = InferenceRequest(
            like.model_name, like.model_version, inputs=inputs, outputs=list(like.outputs)
        )
        add_controls(request, self._flags, self._corrid, self._shape, False)
        item = NullItem(request, 1, _no_completion)
        item.started_ns = now
        return item

    # oldest ----------------------------------------------------------------------------------------
    def _oldest_issue(self, index: int, instance: Instance, slot: int) -> None:
        """Send the slot's next request to the instance's dynamic batcher (Triton's CompleteAndNext)."""
        queue = instance.queues[slot]
        while True:
            instance.in_flight[slot] = False
            release = False
            if queue:
                item, _key = queue.popleft()
                if item is None:  # force-ended by the reaper
                    release = True
                else:
                    self._queued -= 1
                    request = item.request
                    release = request.sequence_end
                    if self._states:
                        self._attach_state(instance, slot, item)
                    item.complete = self._oldest_completion(index, instance, slot, item.complete)
                    instance.in_flight[slot] = True
                    assert instance.batcher is not None
                    instance.batcher.enqueue(item)
            if release and self._release(index, slot) and not instance.in_flight[slot]:
                continue
            break
        if self._closed:
            self._oldest_maybe_done(index, instance)

    def _oldest_completion(
        self,
        index: int,
        instance: Instance,
        slot: int,
        original: Callable[[InferenceResponse | TritonError], None],
    ) -> Callable[[InferenceResponse | TritonError], None]:
        def complete(result: InferenceResponse | TritonError) -> None:
            original(result)
            with self._lock:
                self._oldest_issue(index, instance, slot)

        return complete

    def _oldest_maybe_done(self, index: int, instance: Instance) -> None:
        if instance.done:
            return
        self._drain_backlog(index, instance)
        for slot in range(self.slots_per_instance):
            if instance.queues[slot] and not instance.in_flight[slot]:
                self._oldest_issue(index, instance, slot)
        if any(instance.in_flight) or any(instance.queues):
            return
        instance.done = True
        assert instance.batcher is not None
        instance.batcher.close()

    # cancelled requests ----------------------------------------------------------------------------
    def _cancelled(self, correlation_id: CorrelationId, item: WorkItem) -> None:
        """A request's client went away while it waited (in its slot's queue or the backlog): as in
        Triton, the whole sequence is cancelled, every request of it still waiting is answered
        CANCELLED and its slot is freed. A request already taken into a batch runs on (a python model
        sees is_cancelled())."""
        with self._lock:
            waiting = self._cancel_backlogged(correlation_id, item) or self._cancel_queued(
                correlation_id, item
            )
            self._queued -= len(waiting)
        answer_cancelled(waiting, self.stats)

    def _cancel_backlogged(self, correlation_id: CorrelationId, item: WorkItem) -> list[WorkItem]:
        for backlog in self._backlogs:
            if backlog.correlation_id == correlation_id and any(e[0] is item for e in backlog.entries):
                self._backlogs.remove(backlog)
                if self._backlog.get(correlation_id) is backlog:
                    del self._backlog[correlation_id]
                self._seen.pop(correlation_id, None)
                return [e[0] for e in backlog.entries if e[0] is not None]
        return []

    def _cancel_queued(self, correlation_id: CorrelationId, item: WorkItem) -> list[WorkItem]:
        for index, instance in enumerate(self._instances):
            for slot, occupant in enumerate(instance.occupant):
                queue = instance.queues[slot]
                if occupant != correlation_id or not any(e[0] is item for e in queue):
                    continue
                waiting = [e[0] for e in queue if e[0] is not None]
                queue.clear()
                if self._slots.get(correlation_id) == (index, slot):
                    del self._slots[correlation_id]
                self._seen.pop(correlation_id, None)
                queue.append(RELEASE)  # the slot frees once nothing of the sequence runs
                if instance.batcher is not None:
                    if not instance.in_flight[slot]:
                        self._oldest_issue(index, instance, slot)
                else:
                    instance.ready.notify()
                return waiting
        return []

    # sequences that end without END --------------------------------------------------------------
    def _force_end(self, correlation_id: CorrelationId, ref: SlotRef) -> None:
        """Forget the sequence; its slot frees once its queued requests have run (under the lock)."""
        del self._slots[correlation_id]
        self._seen.pop(correlation_id, None)
        index, slot = ref
        instance = self._instances[index]
        instance.queues[slot].append(RELEASE)
        if instance.batcher is not None:
            if not instance.in_flight[slot]:
                self._oldest_issue(index, instance, slot)
        else:
            instance.ready.notify()

    def _ending(
        self, correlation_id: CorrelationId, original: Callable[[InferenceResponse | TritonError], None]
    ) -> Callable[[InferenceResponse | TritonError], None]:
        """An iterative sequence ends when its request completes (Triton: a cancelled null END)."""

        def complete(result: InferenceResponse | TritonError) -> None:
            original(result)
            with self._lock:
                ref = self._slots.get(correlation_id)
                if ref is not None:
                    self._force_end(correlation_id, ref)

        return complete

    # idle sequences --------------------------------------------------------------------------------
    def _reap(self) -> None:
        """Force-end sequences idle for longer than max_sequence_idle_microseconds (Triton's reaper)."""
        with self._lock:
            while not self._closed:
                now = time.monotonic_ns()
                wake = 0
                expired: list[tuple[CorrelationId, SlotRef]] = []
                stale: list[CorrelationId] = []
                for correlation_id, seen in self._seen.items():
                    deadline = seen + self._idle_ns
                    if deadline > now:
                        wake = deadline if not wake else min(wake, deadline)
                        break
                    ref = self._slots.get(correlation_id)
                    if ref is not None:
                        expired.append((correlation_id, ref))
                    elif correlation_id in self._backlog:
                        recheck = now + _BACKLOG_RECHECK_NS
                        wake = recheck if not wake else min(wake, recheck)
                    else:
                        stale.append(correlation_id)
                for correlation_id in stale:
                    del self._seen[correlation_id]
                for correlation_id, ref in expired:
                    self._force_end(correlation_id, ref)
                if expired:
                    continue
                self._reaper_sleeping_until = wake
                self._reaper_wake.wait((wake - now) / 1e9 if wake else None)
                self._reaper_sleeping_until = 0

    # introspection (tests, debugging) --------------------------------------------------------------
    def sequences(self) -> dict[CorrelationId, SlotRef]:
        """Active sequences and their (instance, slot)."""
        with self._lock:
            return dict(self._slots)

    def backlogged(self) -> list[CorrelationId]:
        """Backlogged sequences, oldest first (ended ones included until they get a slot)."""
        with self._lock:
            return [backlog.correlation_id for backlog in self._backlogs]

    def free_slots(self) -> int:
        with self._lock:
            return len(self._free)


def _zeros_like(array: Array) -> Array:
    if array.dtype == object:
        return np.full(array.shape, b"", dtype=object)
    return np.zeros_like(array)
