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
with `oldest`. A starting sequence takes the free slot Triton would give it: free slots sit in a
binary heap ordered by slot number only, exactly as libstdc++'s std::priority_queue keeps them, so
ties between instances break the way they do in Triton (2 instances x 4 slots hand out (0,0), (1,0),
(1,1), (0,1), (0,2) ... -- checked against Triton 2.51; which instance Triton counts as the first
follows the order its instances finished loading, tcli's is the instance_group order). With no free slot the sequence goes to the
backlog; its later requests join it there, in order. A freed slot goes to the oldest backlogged
sequence (all its requests move into the slot) or back to the heap.

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

Control tensors (never sent by clients): START, END, READY from `int32_false_true`, `fp32_false_true`
or `bool_false_true` ([false, true], dtype INT32 / FP32 / BOOL), CORRID with its `data_type`:
UINT64/INT64/UINT32/INT32 take the low 64/32 bits of the ID (two's complement for the signed ones);
a string ID gives the bytes Triton copies (its uint32 length, little-endian, then the UTF-8 bytes,
cut or zero-padded to the width). Shape [1, 1] per request with batching, [1] without.
TYPE_STRING gives the ID as one BYTES element (an integer ID in decimal). Real Triton 2.51 fails
every request of such a model with the python backend ("unexpected number of string elements 2 for
inference input 'CORRID', expecting 1"); tcli gives the value the documentation describes.

Idle sequences: every request refreshes its sequence's timestamp. One reaper thread per scheduler
sleeps until the oldest timestamp is `max_sequence_idle_microseconds` old (default 1 s), then
force-ends the sequence: its correlation ID is forgotten (a later request without START gets the
START error) and its slot is released once the requests it already queued have run. The model sees
nothing of this. A sequence still in the backlog is not ended; it is looked at again every 50 ms.

Implicit state (`state`): each slot keeps the sequence's state tensors. A request gets them as the
inputs `input_name`; START (or a slot that never had a state) starts from `initial_state`
(zero_data, or data_file under <model>/initial_state/; without one: zeros, a variable dimension
being 1). The output `output_name` of a successful response becomes the state of the sequence's
next request, and is dropped from the response unless the client asked for it (or, asking for no
output in particular, the config declares it). A failed request leaves the state as it was. Triton
2.51 does the same for ONNX models; its python backend receives the input state but never updates
it (every request sees the initial state) -- tcli updates it for python models too.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import invalid_arg, unavailable
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from server.scheduling.batch import batch_key
from server.scheduling.work import Scheduler, WorkItem

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelSequenceBatching

    from server.protocol.errors import TritonError
    from server.scheduling.dynamic_batcher import DynamicBatcher

CorrelationId = int | str
Array = np.ndarray[Any, Any]
KeyFn = Callable[[InferenceRequest], Hashable]

DEFAULT_IDLE_US = 1_000_000
_BACKLOG_RECHECK_NS = 50_000_000  # Triton's reaper looks at idle backlogged sequences every 50 ms
_STRATEGY_DIRECT = "direct"
_STRATEGY_OLDEST = "oldest"


class NullItem(WorkItem):
    """A padding request for an empty slot of a direct batch; the runner drops its result and counts it
    only in the execution's batch size."""

    __slots__ = ()


def _no_completion(result: InferenceResponse | TritonError) -> None:
    """Null requests have nobody to answer."""


# --- control tensors ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _FlagControl:
    name: str
    kind: str  # CONTROL_SEQUENCE_START | _END | _READY
    wire: str  # INT32 | FP32 | BOOL
    dtype: np.dtype[Any]
    values: tuple[Any, Any]  # (false, true)


@dataclass(frozen=True, slots=True)
class _CorridControl:
    name: str
    wire: str  # UINT64 | INT64 | UINT32 | INT32 | BYTES
    dtype: np.dtype[Any]


def _flag_controls(
    sequence_batching: ModelSequenceBatching,
) -> tuple[list[_FlagControl], _CorridControl | None]:
    flags: list[_FlagControl] = []
    corrid: _CorridControl | None = None
    for control_input in sequence_batching.control_input:
        for control in control_input.control:
            kind = enum_name(control, "kind")
            if kind == "CONTROL_SEQUENCE_CORRID":
                wire = datatypes.config_to_wire(enum_name(control, "data_type"))
                dtype = np.dtype(object) if wire == "BYTES" else np.dtype(datatypes.wire_to_numpy(wire))
                corrid = _CorridControl(control_input.name, wire, dtype)
                continue
            if len(control.int32_false_true):
                wire, values = "INT32", tuple(control.int32_false_true)
            elif len(control.fp32_false_true):
                wire, values = "FP32", tuple(control.fp32_false_true)
            else:
                wire, values = "BOOL", tuple(control.bool_false_true)
            dtype = np.dtype(datatypes.wire_to_numpy(wire))
            flags.append(_FlagControl(control_input.name, kind, wire, dtype, (values[0], values[1])))
    return flags, corrid


def corrid_array(correlation_id: CorrelationId, control: _CorridControl, shape: tuple[int, ...]) -> Array:
    """The CORRID control value for `correlation_id`, as Triton fills it for the control's data type."""
    if control.wire == "BYTES":
        return np.array([str(correlation_id).encode()], dtype=object).reshape(shape)
    width = control.dtype.itemsize
    if isinstance(correlation_id, str):
        encoded = correlation_id.encode()
        raw = (struct.pack("<I", len(encoded)) + encoded)[:width].ljust(width, b"\0")
    else:
        raw = (int(correlation_id) % (1 << (8 * width))).to_bytes(width, "little")
    return np.frombuffer(raw, dtype=control.dtype.newbyteorder("<")).astype(control.dtype).reshape(shape)


# --- implicit state -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _StateSpec:
    input_name: str
    output_name: str
    wire: str
    initial: Array  # with the batch dimension when the model batches


def _state_specs(config: ModelConfig, model_dir: Path | None) -> list[_StateSpec]:
    """The `state` entries with their initial values; raises Triton's load errors for bad ones."""
    batched = config.max_batch_size > 0
    specs = []
    for state in config.sequence_batching.state:
        wire = datatypes.config_to_wire(enum_name(state, "data_type"))
        if len(state.initial_state) > 1:
            raise invalid_arg(
                f"initial_state field for state input '{state.input_name}' must contain exactly one or zero "
                f"element. Found '{len(state.initial_state)}' elements."
            )
        if state.initial_state:
            initial = _initial_state(state, model_dir, wire)
        else:  # Triton leaves it uninitialized; a variable dimension is 1
            dims = tuple(1 if d < 0 else int(d) for d in state.dims)
            initial = _zeros(wire, dims)
        if batched:
            initial = initial.reshape((1, *initial.shape))
        initial.setflags(write=False)
        specs.append(_StateSpec(state.input_name, state.output_name, wire, initial))
    return specs


def _initial_state(state: Any, model_dir: Path | None, wire: str) -> Array:
    initial = state.initial_state[0]
    name = state.input_name
    if initial.data_type != state.data_type:
        raise invalid_arg(
            f"The data type used for 'initial_state' field of state '{name}' does not match the state data type."
        )
    if not initial.name:
        raise invalid_arg(f"Field 'name' must be set when using initial_state for state input '{name}'.")
    if len(initial.dims) != len(state.dims):
        raise invalid_arg(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state "
            f"input '{name}'. {len(initial.dims)} != {len(state.dims)}"
        )
    for dim, state_dim in zip(initial.dims, state.dims, strict=True):
        if dim < 0:
            raise invalid_arg(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if state_dim >= 0 and dim != state_dim:
            raise invalid_arg(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim description. "
                f"{dim} != {state_dim}"
            )
    dims = tuple(int(d) for d in initial.dims)
    which = initial.WhichOneof("state_data")
    if which == "zero_data":
        return _zeros(wire, dims)
    if which != "data_file":
        raise invalid_arg(f"initial_state setting expects state'{name}' to have state_data set")
    path = (model_dir or Path(".")) / "initial_state" / initial.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"failed to open text file for read {path}: {exc.strerror}") from None
    if wire == "BYTES":
        return _deserialize_bytes(raw, dims, name)
    dtype = np.dtype(datatypes.wire_to_numpy(wire))
    size = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if size > len(raw):
        raise invalid_arg(
            f"initial_state setting expects {size} bytes, but the data provided from {initial.data_file}only has "
            f"{len(raw)} bytes."
        )
    return np.frombuffer(raw[:size], dtype=dtype).reshape(dims).copy()


def _zeros(wire: str, dims: tuple[int, ...]) -> Array:
    if wire == "BYTES":
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype=datatypes.wire_to_numpy(wire))


def _deserialize_bytes(raw: bytes, dims: tuple[int, ...], name: str) -> Array:
    """Triton's serialized BYTES layout: per element a little-endian uint32 length, then the bytes."""
    values: list[bytes] = []
    offset = 0
    while offset + 4 <= len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        values.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    count = int(np.prod(dims, dtype=np.int64))
    if len(values) < count:
        raise invalid_arg(
            f"initial_state data for state input '{name}' holds {len(values)} of {count} strings"
        )
    return np.array(values[:count], dtype=object).reshape(dims)


# --- slot bookkeeping -----------------------------------------------------------------------------
SlotRef = tuple[int, int]  # (instance index, slot)


def _heap_sift_up(heap: list[SlotRef], hole: int, top: int, value: SlotRef) -> None:
    """libstdc++ __push_heap with Triton's comparator (a lower slot number is the higher priority)."""
    parent = (hole - 1) // 2
    while hole > top and heap[parent][1] > value[1]:
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = value


def heap_push(heap: list[SlotRef], value: SlotRef) -> None:
    heap.append(value)
    _heap_sift_up(heap, len(heap) - 1, 0, value)


def heap_pop(heap: list[SlotRef]) -> SlotRef:
    """std::priority_queue::pop as libstdc++ does it (pop_heap + __adjust_heap), so that slots with
    equal numbers come out in the order Triton hands them out."""
    top = heap[0]
    value = heap[-1]
    length = len(heap) - 1
    hole = child = 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if heap[child][1] > heap[child - 1][1]:  # comp(right, left): right has the higher slot number
            child -= 1
        heap[hole] = heap[child]
        hole = child
    if length % 2 == 0 and length >= 2 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        heap[hole] = heap[child - 1]
        hole = child - 1
    heap.pop()
    if length:
        _heap_sift_up(heap, hole, 0, value)
    return top


# A queued entry: the request and its batch key; (None, None) is the reaper's release marker.
_Entry = tuple[WorkItem | None, Hashable]
_RELEASE: _Entry = (None, None)


@dataclass(eq=False)
class _Backlog:
    correlation_id: CorrelationId
    entries: deque[_Entry] = field(default_factory=deque)


class _Instance:
    """One instance's slots: their queues, the sequence in each, and the per-slot state."""

    def __init__(self, slots: int, lock: threading.Lock) -> None:
        self.queues: list[deque[_Entry]] = [deque() for _ in range(slots)]
        self.occupant: list[CorrelationId | None] = [None] * slots
        self.states: list[dict[str, Array] | None] = [None] * slots
        self.in_flight = [False] * slots  # oldest: a request of the slot is in the dynamic batcher
        self.max_active = -1  # direct: the highest slot that may hold requests
        self.ready = threading.Condition(lock)  # direct: this instance's worker waits here
        self.batcher: DynamicBatcher | None = None  # oldest
        self.done = False  # its worker was told there is nothing more


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
        self._flags, self._corrid = _flag_controls(sequence_batching)
        self._control_names = frozenset(
            [f.name for f in self._flags] + ([self._corrid.name] if self._corrid else [])
        )
        self._key: KeyFn = self._python_key if config.backend == "python" else self._tensor_key
        self._declared_outputs = [o.name for o in config.output]
        self._states: list[_StateSpec] = []
        self._state_outputs: dict[str, _StateSpec] = {}

        self._lock = threading.Lock()
        self._instances: list[_Instance] = []
        self._free: list[SlotRef] = []
        self._slots: dict[CorrelationId, SlotRef] = {}
        self._backlog: dict[CorrelationId, _Backlog] = {}
        self._backlogs: deque[_Backlog] = deque()
        self._seen: OrderedDict[CorrelationId, int] = OrderedDict()  # last request time, oldest first
        self._queued = 0  # requests in slot queues and the backlog (not yet in a batch / batcher)
        self._closed = False
        self._reaper: threading.Thread | None = None
        self._reaper_wake = threading.Condition(self._lock)
        self._reaper_sleeping_until = 0  # 0: not waiting for a deadline

    # set-up ----------------------------------------------------------------------------------------
    def prepare(self, instance_count: int) -> None:
        """Create the slots of `instance_count` instances and read the initial states (raising
        TritonError as Triton fails the load)."""
        self._states = _state_specs(self._config, self._model_dir)
        self._state_outputs = {spec.output_name: spec for spec in self._states}
        count = max(1, instance_count)
        self._instances = [_Instance(self.slots_per_instance, self._lock) for _ in range(count)]
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
            raise invalid_arg(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )
        start, end = request.sequence_start, request.sequence_end
        entry: _Entry = (item, self._key(request))
        self._add_controls(request, True)
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
            if ref is None:
                if backlog is None and self._free:
                    ref = heap_pop(self._free)
                    self._slots[correlation_id] = ref
                else:
                    if backlog is None:
                        backlog = _Backlog(correlation_id)
                        self._backlogs.append(backlog)
                        if not end:
                            self._backlog[correlation_id] = backlog
                    elif end:
                        del self._backlog[correlation_id]
                    backlog.entries.append(entry)
                    if end:
                        self._seen.pop(correlation_id, None)
                    return
            if end:
                del self._slots[correlation_id]
                self._seen.pop(correlation_id, None)
            self._to_slot(ref, correlation_id, entry)

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

    def _add_controls(self, request: InferenceRequest, ready: bool) -> None:
        shape = self._shape
        inputs = request.inputs
        for control in self._flags:
            if control.kind == "CONTROL_SEQUENCE_READY":
                flag = ready
            elif control.kind == "CONTROL_SEQUENCE_START":
                flag = ready and request.sequence_start
            else:
                flag = ready and request.sequence_end
            data = np.full(shape, control.values[flag], dtype=control.dtype)
            inputs.append(Tensor(control.name, control.wire, shape, data))
        corrid = self._corrid
        if corrid is not None:
            if ready:
                data = corrid_array(request.correlation_id, corrid, shape)
            elif corrid.wire == "BYTES":
                data = np.full(shape, b"", dtype=object)
            else:
                data = np.zeros(shape, dtype=corrid.dtype)
            inputs.append(Tensor(corrid.name, corrid.wire, shape, data))

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

    def _to_slot(self, ref: SlotRef, correlation_id: CorrelationId, entry: _Entry) -> None:
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

    def _drain_backlog(self, index: int, instance: _Instance) -> None:
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

    def _attach_state(self, instance: _Instance, slot: int, item: WorkItem) -> None:
        """Give the request its sequence's state inputs, make the model produce the state outputs, and
        keep them (out of the response, unless the client asked for them) when it completes."""
        store = instance.states[slot]
        request = item.request
        if store is None or request.sequence_start:
            store = {spec.input_name: spec.initial for spec in self._states}
            instance.states[slot] = store
        for spec in self._states:
            value = store[spec.input_name]
            request.inputs.append(Tensor(spec.input_name, spec.wire, tuple(value.shape), value))
        asked = {o.name for o in request.outputs}
        if not asked:
            request.outputs = [RequestedOutput(name) for name in self._declared_outputs]
        wanted = asked or set(self._declared_outputs)
        for spec in self._states:
            if spec.output_name not in wanted:
                request.outputs.append(RequestedOutput(spec.output_name))
        state_outputs = self._state_outputs
        original = item.complete

        def complete(result: InferenceResponse | TritonError) -> None:
            if isinstance(result, InferenceResponse):
                kept = []
                for tensor in result.outputs:
                    spec = state_outputs.get(tensor.name)
                    if spec is not None:
                        store[spec.input_name] = np.array(tensor.data, copy=True)
                        if tensor.name not in wanted:
                            continue
                    kept.append(tensor)
                result.outputs = kept
            original(result)

        item.complete = complete

    # direct ----------------------------------------------------------------------------------------
    def _next_direct(self, index: int, instance: _Instance) -> list[WorkItem] | None:
        while True:
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

    def _take_direct(self, index: int, instance: _Instance, top: int) -> list[WorkItem]:
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
        self._add_controls(request, False)
        item = NullItem(request, 1, _no_completion)
        item.started_ns = now
        return item

    # oldest ----------------------------------------------------------------------------------------
    def _oldest_issue(self, index: int, instance: _Instance, slot: int) -> None:
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
        instance: _Instance,
        slot: int,
        original: Callable[[InferenceResponse | TritonError], None],
    ) -> Callable[[InferenceResponse | TritonError], None]:
        def complete(result: InferenceResponse | TritonError) -> None:
            original(result)
            with self._lock:
                self._oldest_issue(index, instance, slot)

        return complete

    def _oldest_maybe_done(self, index: int, instance: _Instance) -> None:
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
                for correlation_id, (index, slot) in expired:
                    del self._seen[correlation_id]
                    del self._slots[correlation_id]
                    instance = self._instances[index]
                    instance.queues[slot].append(_RELEASE)
                    if instance.batcher is not None:
                        if not instance.in_flight[slot]:
                            self._oldest_issue(index, instance, slot)
                    else:
                        instance.ready.notify()
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
