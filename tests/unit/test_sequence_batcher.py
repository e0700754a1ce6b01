"""The sequence batcher with real worker threads and a fake model instance: admission errors, slots and
the backlog, direct batches with null requests, the oldest strategy, control tensors, idle sequences,
implicit state and shutdown.

Expected batch compositions and control values are the ones real Triton 2.51 produced for the same
request order (python backend, logged in execute()). Requests are queued from the test thread and a
fake instance holds each batch until the test lets it go, so batches are deterministic. No test
asserts an upper time bound; idle timeouts that must elapse are 50 ms and waited for on the
scheduler's own state."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from server.scheduling.sequence import NullItem, SequenceScheduler
from server.scheduling.sequence_slots import heap_pop, heap_push
from server.scheduling.sequence_state import state_specs
from server.scheduling.work import WorkItem

STRATEGIES = pytest.mark.parametrize(
    "strategy", ["", " oldest { max_candidate_sequences: 3 }"], ids=["direct", "oldest"]
)
WAIT = 10.0  # failure timeout for events and joins; never reached when things work
CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]"""


def config(max_batch_size: int = 4, sequence: str = "", backend: str = "python") -> mc.ModelConfig:
    text = f"""
name: "m" backend: "{backend}" max_batch_size: {max_batch_size}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{ {sequence or CONTROLS} }}
"""
    return text_format.Parse(text, mc.ModelConfig())


def scheduler(instances: int = 1, model_dir: Path | None = None, **kwargs: Any) -> SequenceScheduler:
    s = SequenceScheduler(config(**kwargs), model_dir)
    s.prepare(instances)
    return s


class Call:
    """One request of a sequence and the result its completion received."""

    def __init__(
        self,
        cid: int | str,
        value: int = 0,
        start: bool = False,
        end: bool = False,
        batch: int = 1,
        outputs: tuple[str, ...] = (),
    ) -> None:
        data = np.full((batch, 1), value, np.int32)
        parameters: dict[str, Any] = {"sequence_start": start, "sequence_end": end}
        if cid != 0:
            parameters["sequence_id"] = cid
        self.request = InferenceRequest(
            "m",
            id=f"{cid}:{value}",
            inputs=[Tensor("INPUT", "INT32", data.shape, data)],
            outputs=[RequestedOutput(name) for name in outputs],
            parameters=parameters,
        )
        self.done = threading.Event()
        self.result: InferenceResponse | TritonError | None = None
        self.calls = 0
        self.work = WorkItem(self.request, batch, self._complete)

    def _complete(self, result: InferenceResponse | TritonError) -> None:
        self.calls += 1
        self.result = result
        self.done.set()

    def output(self, name: str = "OUTPUT") -> list[int]:
        assert self.done.wait(WAIT)
        assert isinstance(self.result, InferenceResponse), self.result
        return [int(v) for t in self.result.outputs if t.name == name for v in t.data.reshape(-1)]

    def names(self) -> list[str]:
        assert self.done.wait(WAIT) and isinstance(self.result, InferenceResponse)
        return [t.name for t in self.result.outputs]


def send(s: SequenceScheduler, *calls: Call) -> list[Call]:
    for call in calls:
        s.enqueue(call.work)
    return list(calls)


def value(request: InferenceRequest, name: str) -> Any:
    for tensor in request.inputs:
        if tensor.name == name:
            flat = tensor.data.reshape(-1)
            return flat[0].item() if flat.dtype != object else flat[0]
    return None


Row = tuple[Any, ...]  # (correlation id, INPUT, START, END, READY, CORRID) as the model sees one request


def row(item: WorkItem) -> Row:
    r = item.request
    if isinstance(item, NullItem):
        assert r.correlation_id == 0 and not r.sequence_start and not r.sequence_end
        return ("null", value(r, "START"), value(r, "END"), value(r, "READY"), value(r, "CORRID"))
    return (
        r.correlation_id,
        value(r, "INPUT"),
        value(r, "START"),
        value(r, "END"),
        value(r, "READY"),
        value(r, "CORRID"),
    )


Respond = Callable[[WorkItem], "InferenceResponse | TritonError"]


def echo(item: WorkItem) -> InferenceResponse | TritonError:
    data = next(t.data for t in item.request.inputs if t.name == "INPUT")
    return InferenceResponse("m", "1", item.request.id, [Tensor("OUTPUT", "INT32", data.shape, data.copy())])


class Instance(threading.Thread):
    """A fake model instance: takes batches for its index, records what the model would see, and
    (when `hold` is set) waits for the test to `release()` each batch before answering it."""

    def __init__(
        self, s: SequenceScheduler, index: int = 0, hold: bool = False, respond: Respond = echo
    ) -> None:
        super().__init__(daemon=True)
        self.s = s
        self.index = index
        self.hold = hold
        self.respond = respond
        self.batches: list[list[Row]] = []
        self.items: list[list[WorkItem]] = []
        self._changed = threading.Condition()
        self._releases = threading.Semaphore(0)
        self.start()

    def run(self) -> None:
        while (batch := self.s.next_batch(self.index)) is not None:
            with self._changed:
                self.items.append(batch)
                self.batches.append([row(item) for item in batch])
                self._changed.notify_all()
            if self.hold:
                assert self._releases.acquire(timeout=WAIT)
            for item in batch:
                item.complete(self.respond(item))

    def wait_batches(self, count: int) -> list[list[Row]]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.batches) >= count, WAIT), self.batches
            return list(self.batches)

    def release(self, count: int = 1) -> None:
        for _ in range(count):
            self._releases.release()

    def stop(self) -> None:
        self.hold = False
        self.release(1000)
        self.s.close()
        self.join(WAIT)
        assert not self.is_alive()


def wait_until(predicate: Callable[[], bool]) -> None:
    """Wait for the scheduler's own state to change (the reaper runs on its own thread)."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)  # polling interval, not an assumed duration


def run_sequence(s: SequenceScheduler, cid: int | str, values: list[int]) -> list[Call]:
    return [send(s, Call(cid, v, start=i == 0, end=i == len(values) - 1))[0] for i, v in enumerate(values)]


# slots -------------------------------------------------------------------------------------------
def test_free_slots_come_out_in_tritons_order() -> None:
    """Slot number first; ties between instances broken as libstdc++'s heap does (seen in Triton 2.51:
    sequences 1..5 on 2 instances x 4 slots went to (0,0), (1,0), (1,1), (0,1), (0,2); which instance
    Triton counts first follows the order its instances finished loading)."""
    heap: list[tuple[int, int]] = []
    for instance in range(2):
        for slot in range(4):
            heap_push(heap, (instance, slot))
    assert [heap_pop(heap) for _ in range(8)] == [
        (0, 0),
        (1, 0),
        (1, 1),
        (0, 1),
        (0, 2),
        (1, 2),
        (0, 3),
        (1, 3),
    ]


def test_sequences_take_slots_across_instances_as_triton_does() -> None:
    s = scheduler(instances=2)
    workers = [Instance(s, 0), Instance(s, 1)]
    for cid in range(1, 6):
        send(s, Call(cid, cid, start=True))[0].output()
    assert s.sequences() == {1: (0, 0), 2: (1, 0), 3: (1, 1), 4: (0, 1), 5: (0, 2)}
    # Triton 2.51's execute() calls for the same requests, instance by instance
    assert workers[0].batches == [
        [(1, 1, 1, 0, 1, 1)],
        [("null", 0, 0, 0, 0), (4, 4, 1, 0, 1, 4)],
        [("null", 0, 0, 0, 0), ("null", 0, 0, 0, 0), (5, 5, 1, 0, 1, 5)],
    ]
    assert workers[1].batches == [[(2, 2, 1, 0, 1, 2)], [("null", 0, 0, 0, 0), (3, 3, 1, 0, 1, 3)]]
    send(s, Call(3, 30))[0].output()
    assert workers[1].batches[-1] == [("null", 0, 0, 0, 0), (3, 30, 0, 0, 1, 3)]
    for cid in range(1, 6):
        send(s, Call(cid, 0, end=True))[0].output()
    assert s.sequences() == {} and s.free_slots() == 8
    for worker in workers:
        worker.stop()


# admission ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            Call(0, start=True),
            "inference request to model 'm' must specify a non-zero or non-empty correlation ID",
        ),
        (
            Call("", start=True),
            "inference request to model 'm' must specify a non-zero or non-empty correlation ID",
        ),
        # batch size is checked first (Triton 2.51 answers this for a request without correlation ID too)
        (
            Call(0, start=True, batch=2),
            "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher",
        ),
        (
            Call(9, batch=2),
            "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher",
        ),
        (
            Call(9),
            "inference request for sequence 9 to model 'm' must specify the START flag on the first request of the sequence",
        ),
        (
            Call("zz"),
            "inference request for sequence zz to model 'm' must specify the START flag on the first request of the sequence",
        ),
    ],
)
def test_admission_errors(call: Call, message: str) -> None:
    s = scheduler()
    with pytest.raises(TritonError) as error:
        s.enqueue(call.work)
    assert error.value.code == ErrorCode.INVALID_ARG
    assert error.value.message == message
    assert s.sequences() == {} and s.pending() == 0 and s.free_slots() == 4
    s.close()


def test_end_forgets_the_sequence_at_once() -> None:
    s = scheduler()
    worker = Instance(s, hold=True)
    send(s, Call(1, 1, start=True), Call(1, 2, end=True))
    with pytest.raises(TritonError, match="must specify the START flag"):
        s.enqueue(Call(1, 3).work)
    worker.stop()


def test_start_on_an_active_sequence_continues_in_its_slot() -> None:
    s = scheduler()
    worker = Instance(s)
    send(s, Call(7, 1, start=True))[0].output()
    send(s, Call(8, 1, start=True))[0].output()
    send(s, Call(8, 2, start=True))[0].output()
    assert s.sequences() == {7: (0, 0), 8: (0, 1)}
    assert worker.batches[-1] == [("null", 0, 0, 0, 0), (8, 2, 1, 0, 1, 8)]
    worker.stop()


# direct ------------------------------------------------------------------------------------------
def test_direct_batches_take_one_request_per_slot_in_order() -> None:
    s = scheduler(max_batch_size=4)
    worker = Instance(s, hold=True)
    send(s, Call(1, 10, start=True))
    worker.wait_batches(1)  # the instance is busy with sequence 1's first request
    calls = send(
        s, Call(2, 20, start=True), Call(1, 11), Call(1, 12), Call(2, 21, end=True), Call(1, 13, end=True)
    )
    worker.release(4)
    batches = worker.wait_batches(4)
    assert [[r[:2] for r in b] for b in batches] == [
        [(1, 10)],
        [(1, 11), (2, 20)],
        [(1, 12), (2, 21)],
        [(1, 13)],
    ]
    assert [c.output() for c in calls] == [[20], [11], [12], [21], [13]]
    assert s.sequences() == {} and s.free_slots() == 4 and s.pending() == 0
    worker.stop()


def test_backlog_waits_for_a_slot_and_keeps_its_order() -> None:
    """1 instance, 2 slots: a third sequence waits in the backlog until END frees a slot; its requests
    then run in order in that slot (Triton 2.51 gave the same executions)."""
    s = scheduler(max_batch_size=2)
    worker = Instance(s)
    send(s, Call(1, 10, start=True))[0].output()
    send(s, Call(2, 20, start=True))[0].output()
    backlog = send(s, Call(3, 30, start=True), Call(3, 31))
    assert s.backlogged() == [3] and s.pending() == 2
    assert not backlog[0].done.is_set()
    send(s, Call(1, 11, end=True))[0].output()
    assert [c.output() for c in backlog] == [[30], [31]]
    assert s.sequences() == {2: (0, 1), 3: (0, 0)} and s.backlogged() == []
    assert worker.batches == [
        [(1, 10, 1, 0, 1, 1)],
        [("null", 0, 0, 0, 0), (2, 20, 1, 0, 1, 2)],
        [(1, 11, 0, 1, 1, 1)],
        [(3, 30, 1, 0, 1, 3)],
        [(3, 31, 0, 0, 1, 3)],
    ]
    worker.stop()


def test_an_ended_sequence_in_the_backlog_runs_and_leaves_no_slot_behind() -> None:
    s = scheduler(max_batch_size=0)
    worker = Instance(s)
    send(s, Call(1, 1, start=True))[0].output()
    queued = send(s, Call(2, 2, start=True), Call(2, 3, end=True), Call(3, 4, start=True, end=True))
    assert s.backlogged() == [2, 3]
    send(s, Call(1, 5, end=True))
    assert [c.output() for c in queued] == [[2], [3], [4]]
    assert s.sequences() == {} and s.free_slots() == 1 and s.backlogged() == []
    worker.stop()


def test_null_rows_copy_the_shape_of_the_batch() -> None:
    s = scheduler(max_batch_size=3)
    worker = Instance(s)
    for cid in (1, 2, 3):
        send(s, Call(cid, cid, start=True))[0].output()
    send(s, Call(3, 7))[0].output()
    batch = worker.items[-1]
    assert [type(item) for item in batch] == [NullItem, NullItem, WorkItem]
    null = batch[0].request
    assert [(t.name, t.datatype, t.shape) for t in null.inputs] == [
        ("INPUT", "INT32", (1, 1)),
        ("START", "INT32", (1, 1)),
        ("END", "INT32", (1, 1)),
        ("READY", "INT32", (1, 1)),
        ("CORRID", "UINT64", (1, 1)),
    ]
    worker.stop()


def test_minimum_slot_utilization_waits_for_enough_ready_slots() -> None:
    sequence = CONTROLS + " direct { max_queue_delay_microseconds: 60000000 minimum_slot_utilization: 1.0 }"
    s = scheduler(max_batch_size=2, sequence=sequence)
    worker = Instance(s)
    first = send(s, Call(1, 1, start=True))[0]
    second = send(s, Call(2, 2, start=True))[0]
    assert first.output() == [1] and second.output() == [2]
    assert worker.batches == [[(1, 1, 1, 0, 1, 1), (2, 2, 1, 0, 1, 2)]]
    worker.stop()


def test_minimum_slot_utilization_gives_up_after_the_delay() -> None:
    sequence = CONTROLS + " direct { max_queue_delay_microseconds: 50000 minimum_slot_utilization: 1.0 }"
    s = scheduler(max_batch_size=2, sequence=sequence)
    worker = Instance(s)
    assert send(s, Call(1, 1, start=True))[0].output() == [1]
    assert worker.batches == [[(1, 1, 1, 0, 1, 1)]]
    worker.stop()


@STRATEGIES
def test_a_failing_request_does_not_leak_its_slot(strategy: str) -> None:
    def fail_sevens(item: WorkItem) -> InferenceResponse | TritonError:
        if value(item.request, "INPUT") == 7:
            return TritonError(ErrorCode.INTERNAL, "boom")
        return echo(item)

    s = scheduler(max_batch_size=2, sequence=CONTROLS + strategy.replace("3", "2"))
    worker = Instance(s, respond=fail_sevens)
    calls = run_sequence(s, 1, [1, 7, 2, 7])
    assert isinstance(calls[1].result, TritonError) or calls[1].done.wait(WAIT)
    assert [c.done.wait(WAIT) for c in calls] == [True] * 4
    assert [type(c.result).__name__ for c in calls] == ["InferenceResponse", "TritonError"] * 2
    assert s.sequences() == {} and s.free_slots() == 2
    # the freed slots serve new sequences
    assert [c.output() for c in run_sequence(s, 2, [3, 4])] == [[3], [4]]
    worker.stop()


# oldest ------------------------------------------------------------------------------------------
def test_oldest_batches_at_most_one_request_per_sequence_oldest_first() -> None:
    """The same arrival order as a run against Triton 2.51 (1 instance, max_batch_size 4, 3 candidate
    sequences); the executions are the ones Triton's execute() logged."""
    s = scheduler(max_batch_size=4, sequence=CONTROLS + " oldest { max_candidate_sequences: 3 }")
    worker = Instance(s, hold=True)
    send(s, Call(1, 1300, start=True))
    worker.wait_batches(1)
    send(
        s, Call(2, 20, start=True), Call(3, 30, start=True), Call(1, 11), Call(1, 12), Call(4, 40, start=True)
    )
    send(
        s,
        Call(2, 21),
        Call(4, 41, end=True),
        Call(3, 31, end=True),
        Call(2, 22, end=True),
        Call(1, 13, end=True),
    )
    assert s.backlogged() == [4]
    worker.release(5)
    batches = worker.wait_batches(5)
    assert [[(r[0], r[1], r[2], r[3]) for r in b] for b in batches] == [
        [(1, 1300, 1, 0)],
        [(2, 20, 1, 0), (3, 30, 1, 0), (1, 11, 0, 0)],
        [(2, 21, 0, 0), (3, 31, 0, 1), (1, 12, 0, 0)],
        [(2, 22, 0, 1), (4, 40, 1, 0), (1, 13, 0, 1)],
        [(4, 41, 0, 1)],
    ]
    assert s.sequences() == {} and s.free_slots() == 3 and s.pending() == 0
    worker.stop()


def test_oldest_spreads_candidates_over_instances_and_respects_preferred_sizes() -> None:
    sequence = CONTROLS + " oldest { max_candidate_sequences: 2 preferred_batch_size: [ 2 ] }"
    s = scheduler(instances=2, max_batch_size=4, sequence=sequence)
    workers = [Instance(s, 0, hold=True), Instance(s, 1, hold=True)]
    send(s, Call(1, 1, start=True), Call(2, 2, start=True))
    workers[0].wait_batches(1)  # each instance busy with its first sequence
    workers[1].wait_batches(1)
    send(s, Call(3, 3, start=True))
    assert s.sequences() == {1: (0, 0), 2: (1, 0), 3: (0, 1)}
    send(s, Call(2, 20), Call(1, 10))
    workers[0].release(10)
    workers[1].release(10)
    assert workers[1].wait_batches(2) == [[(2, 2, 1, 0, 1, 2)], [(2, 20, 0, 0, 1, 2)]]
    # instance 0: 1 alone, then 3 with 1's next request (a preferred batch of 2)
    assert [[r[:2] for r in b] for b in workers[0].wait_batches(2)] == [[(1, 1)], [(3, 3), (1, 10)]]
    for worker in workers:
        worker.stop()


# control tensors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data_type", "cid", "expected"),
    [  # what Triton 2.51 gave the python backend
        ("TYPE_UINT64", 2**63 + 2**40 + 0x80000007, 9223373138513887239),
        ("TYPE_INT64", 2**63 + 2**40 + 0x80000007, -9223370935195664377),
        ("TYPE_UINT32", 2**63 + 2**40 + 0x80000007, 2147483655),
        ("TYPE_INT32", 2**63 + 2**40 + 0x80000007, -2147483641),
        ("TYPE_INT32", 2**31 + 5, -2147483643),
        ("TYPE_UINT64", "abc", 27974191445704707),
        ("TYPE_UINT64", "abcdefghijk", 7233733595238498315),
        ("TYPE_UINT64", "é", 186654983716866),
        ("TYPE_INT32", "abcdefghijk", 11),
        ("TYPE_UINT32", "abc", 3),
    ],
)
def test_corrid_values(data_type: str, cid: int | str, expected: int) -> None:
    sequence = f'control_input [ {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {data_type} }} ] }} ]'
    s = scheduler(max_batch_size=2, sequence=sequence)
    worker = Instance(s)
    send(s, Call(cid, 1, start=True, end=True))[0].output()
    tensor = next(t for t in worker.items[0][0].request.inputs if t.name == "CORRID")
    assert tensor.shape == (1, 1) and tensor.data.shape == (1, 1)
    assert tensor.datatype == data_type[5:]
    assert tensor.data.dtype == np.dtype(data_type[5:].lower())
    assert tensor.data.item() == expected
    worker.stop()


def test_string_corrid_gives_the_id_as_bytes() -> None:
    s = scheduler(
        max_batch_size=2,
        sequence='control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]',
    )
    worker = Instance(s)
    send(s, Call("abc", 1, start=True))[0].output()
    send(s, Call(42, 1, start=True))[0].output()
    values = [value(item.request, "CORRID") for batch in worker.items for item in batch]
    assert values == [b"abc", b"", b"42"]  # the second batch has a null row first
    worker.stop()


def test_flag_controls_fp32_and_bool_without_batching() -> None:
    """max_batch_size 0: shape [1]; FP32 and BOOL values from their false_true pairs (as Triton 2.51)."""
    sequence = """control_input [
      { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
      { name: "E" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
      { name: "R" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ -1, 2.5 ] } ] },
      { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 } ] } ]"""
    s = scheduler(max_batch_size=0, sequence=sequence)
    worker = Instance(s)
    run_sequence(s, 2**32 + 9, [5, 6])[-1].output()
    seen = [
        [(t.name, t.datatype, t.shape, t.data.tolist()) for t in batch[0].request.inputs]
        for batch in worker.items
    ]
    assert seen == [
        [
            ("INPUT", "INT32", (1, 1), [[5]]),
            ("S", "FP32", (1,), [1.0]),
            ("E", "BOOL", (1,), [False]),
            ("R", "FP32", (1,), [2.5]),
            ("C", "INT32", (1,), [9]),
        ],
        [
            ("INPUT", "INT32", (1, 1), [[6]]),
            ("S", "FP32", (1,), [0.0]),
            ("E", "BOOL", (1,), [True]),
            ("R", "FP32", (1,), [2.5]),
            ("C", "INT32", (1,), [9]),
        ],
    ]
    worker.stop()


# idle sequences ----------------------------------------------------------------------------------
def test_idle_sequences_are_released_and_must_start_again() -> None:
    s = scheduler(max_batch_size=2, sequence=CONTROLS + " max_sequence_idle_microseconds: 50000")
    worker = Instance(s)
    send(s, Call(1, 1, start=True))[0].output()
    send(s, Call(2, 2, start=True))[0].output()
    wait_until(lambda: s.sequences() == {})
    wait_until(lambda: s.free_slots() == 2)  # released by the instance, which the reaper woke
    with pytest.raises(TritonError, match="for sequence 2 to model 'm' must specify the START flag"):
        s.enqueue(Call(2, 3).work)
    executions = len(worker.batches)
    assert send(s, Call(2, 4, start=True))[0].output() == [4]
    assert len(worker.batches) == executions + 1  # the model never saw the release
    worker.stop()


@STRATEGIES
def test_idle_sequence_releases_its_slot_to_the_backlog(strategy: str) -> None:
    """Triton 2.51: a sequence waiting in the backlog is not timed out; it gets the slot the idle one
    held once the reaper releases it."""
    strategy = strategy.replace("3", "1")
    s = scheduler(max_batch_size=1, sequence=CONTROLS + " max_sequence_idle_microseconds: 50000" + strategy)
    worker = Instance(s)
    send(s, Call(1, 1, start=True))[0].output()
    waiting = send(s, Call(2, 2, start=True))[0]
    assert waiting.output() == [2]
    assert list(s.sequences()) in ([2], [])  # 2 may itself have idled out by now
    worker.stop()


def test_idle_release_waits_for_queued_requests_of_the_sequence() -> None:
    s = scheduler(max_batch_size=1, sequence=CONTROLS + " max_sequence_idle_microseconds: 50000")
    worker = Instance(s, hold=True)
    calls = send(s, Call(1, 1, start=True), Call(1, 2), Call(1, 3))
    worker.wait_batches(1)
    wait_until(lambda: s.sequences() == {})  # idle: forgotten while its requests are still queued
    worker.release(3)
    assert [c.output() for c in calls] == [[1], [2], [3]]
    wait_until(lambda: s.free_slots() == 1)
    worker.stop()


# implicit state ----------------------------------------------------------------------------------
def accumulate(item: WorkItem) -> InferenceResponse | TritonError:
    """OUTPUT_STATE = INPUT (START) or INPUT_STATE + INPUT; OUTPUT = the new state."""
    request = item.request
    data = next(t.data for t in request.inputs if t.name == "INPUT")
    state = next((t.data for t in request.inputs if t.name == "INPUT_STATE"), None)
    assert state is not None and state.shape == data.shape
    new = data.copy() if value(request, "START") else (state + data).astype(np.int32)
    outputs = [o.name for o in request.outputs]
    assert outputs and "OUTPUT_STATE" in outputs  # the scheduler asks for the state output
    tensors = [Tensor(name, "INT32", new.shape, new) for name in outputs]
    return InferenceResponse("m", "1", request.id, tensors)


STATE = (
    CONTROLS
    + """
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]"""
)


@STRATEGIES
def test_implicit_state_feeds_each_output_state_to_the_next_request(strategy: str) -> None:
    s = scheduler(max_batch_size=4, sequence=STATE + strategy)
    worker = Instance(s, respond=accumulate)
    threads = [
        threading.Thread(target=lambda c=c: run_sequence(s, c, [c * 100, 1, 2, 3])[-1].output())
        for c in (1, 2, 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    outs = [c.output() for c in run_sequence(s, 9, [5, 1, 1])]
    assert outs == [[5], [6], [7]]
    # the client asked for no output: only declared outputs come back, the state stays inside
    assert run_sequence(s, 10, [1])[0].names() == ["OUTPUT"]
    # asked for explicitly, the state output is returned
    call = send(s, Call(11, 4, start=True, end=True, outputs=("OUTPUT_STATE",)))[0]
    assert call.names() == ["OUTPUT_STATE"] and call.output("OUTPUT_STATE") == [4]
    worker.stop()


def test_a_failed_request_leaves_the_state_unchanged() -> None:
    def flaky(item: WorkItem) -> InferenceResponse | TritonError:
        if value(item.request, "INPUT") == 7:
            return TritonError(ErrorCode.INTERNAL, "boom")
        return accumulate(item)

    s = scheduler(max_batch_size=2, sequence=STATE)
    worker = Instance(s, respond=flaky)
    calls = run_sequence(s, 1, [1, 7, 2, 3])
    assert [c.output() for c in (calls[0], calls[2], calls[3])] == [[1], [3], [6]]
    worker.stop()


def test_initial_state_from_a_data_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "ten").write_bytes(np.array([10], np.int32).tobytes())
    sequence = STATE.replace("zero_data: true", 'data_file: "ten"')
    s = scheduler(max_batch_size=2, sequence=sequence, model_dir=tmp_path)
    worker = Instance(s, respond=lambda item: accumulate_from_state(item))
    assert [c.output() for c in run_sequence(s, 1, [1, 2])] == [[11], [13]]
    worker.stop()


def accumulate_from_state(item: WorkItem) -> InferenceResponse | TritonError:
    """Always INPUT_STATE + INPUT (START included), to see the initial state."""
    request = item.request
    data = next(t.data for t in request.inputs if t.name == "INPUT")
    state = next(t.data for t in request.inputs if t.name == "INPUT_STATE")
    new = (state + data).astype(np.int32)
    tensors = [Tensor(o.name, "INT32", new.shape, new) for o in request.outputs]
    return InferenceResponse("m", "1", request.id, tensors)


@pytest.mark.parametrize(
    ("initial", "message"),
    [
        ('data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z"', "does not match the state data type"),
        ("data_type: TYPE_INT32 dims: [ 1 ] zero_data: true", "Field 'name' must be set"),
        (
            'data_type: TYPE_INT32 dims: [ 1, 1 ] zero_data: true name: "z"',
            "Number of dimensions in 'initial_state'",
        ),
        (
            'data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "z"',
            "doesn't match 'state' dim description. 2 != 1",
        ),
        (
            'data_type: TYPE_INT32 dims: [ 1 ] data_file: "missing" name: "z"',
            "failed to open text file for read",
        ),
    ],
)
def test_initial_state_errors_fail_the_load(tmp_path: Path, initial: str, message: str) -> None:
    sequence = f"""state [ {{ input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ]
                    initial_state: {{ {initial} }} }} ]"""
    s = SequenceScheduler(config(sequence=sequence), tmp_path)
    with pytest.raises(TritonError, match=message):
        s.prepare(1)


STRING_STATE = """state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_STRING dims: [ 2 ]
    initial_state: { data_type: TYPE_STRING dims: [ 2 ] data_file: "words" name: "w" } } ]"""


def test_a_string_initial_state_is_read_as_serialized_bytes(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    words = b"\x02\x00\x00\x00hi\x05\x00\x00\x00there"
    (tmp_path / "initial_state" / "words").write_bytes(words + b"\x01\x00\x00\x00!")  # a third is not read
    (spec,) = state_specs(config(sequence=STRING_STATE), tmp_path)
    assert spec.initial.dtype == object and spec.initial.tolist() == [[b"hi", b"there"]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"\x02\x00\x00\x00hi\x05\x00\x00\x00the",
            "incomplete string data for initial_state file words of state input 'S_IN', expecting string of "
            "length 5 but only 3 bytes available",
        ),
        (b"\x02\x00\x00\x00hi", "initial_state data for state input 'S_IN' holds 1 of 2 strings"),
    ],
)
def test_a_malformed_string_initial_state_fails_the_load(tmp_path: Path, data: bytes, message: str) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "words").write_bytes(data)
    with pytest.raises(TritonError, match=re.escape(message)) as error:
        state_specs(config(sequence=STRING_STATE), tmp_path)
    assert error.value.code == ErrorCode.INVALID_ARG


# shutdown and concurrency ------------------------------------------------------------------------
def test_close_serves_what_is_queued_and_refuses_new_sequences() -> None:
    s = scheduler(max_batch_size=1)
    worker = Instance(s, hold=True)
    calls = send(s, Call(1, 1, start=True), Call(1, 2), Call(2, 3, start=True))  # 2 is backlogged
    worker.wait_batches(1)
    s.close()
    with pytest.raises(TritonError) as error:
        s.enqueue(Call(3, 1, start=True).work)
    assert error.value.code == ErrorCode.UNAVAILABLE
    worker.release(3)
    assert [c.output() for c in calls] == [[1], [2], [3]]
    worker.join(WAIT)
    assert not worker.is_alive()


@STRATEGIES
def test_concurrent_sequences_keep_their_order_on_every_strategy(strategy: str) -> None:
    rng = random.Random(4)
    instances = 2
    s = scheduler(instances=instances, max_batch_size=3, sequence=CONTROLS + strategy)
    workers = [Instance(s, i) for i in range(instances)]
    results: dict[int, list[int]] = {}

    def client(cid: int, length: int) -> None:
        calls = run_sequence(s, cid, list(range(length)))
        results[cid] = [c.output()[0] for c in calls]

    threads = [threading.Thread(target=client, args=(cid, rng.randint(1, 6))) for cid in range(1, 21)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert all(results[cid] == list(range(len(results[cid]))) for cid in results) and len(results) == 20
    for worker in workers:
        for batch in worker.batches:
            real = [r[0] for r in batch if r[0] != "null"]
            assert len(real) == len(set(real))  # never two requests of one sequence in a batch
    assert s.sequences() == {} and s.free_slots() == 6 and s.pending() == 0
    for worker in workers:
        worker.stop()


# Triton's test knobs -----------------------------------------------------------------------------
def test_delay_scheduler_holds_direct_batches_until_n_are_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=4 (L0_sequence_batcher): nothing runs until four requests are
    queued, so two sequences' requests are seen batched together from the first batch on."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    s = scheduler(max_batch_size=2)
    worker = Instance(s)
    calls = send(s, Call(1, 10, start=True), Call(2, 20, start=True), Call(1, 11, end=True))
    assert not calls[0].done.wait(0.2)  # held: a bounded look, the only way to see nothing happens
    calls += send(s, Call(2, 21, end=True))
    assert [c.output() for c in calls] == [[10], [20], [11], [21]]
    assert [[r[:2] for r in b] for b in worker.batches] == [[(1, 10), (2, 20)], [(1, 11), (2, 21)]]
    worker.stop()


def test_backlog_delay_scheduler_waits_for_a_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1: the one slot's sequence waits until a second sequence
    is backlogged behind it."""
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "1")
    s = scheduler(max_batch_size=1)
    worker = Instance(s)
    (first,) = send(s, Call(1, 10, start=True, end=True))
    assert not first.done.wait(0.2)  # held: a bounded look, the only way to see nothing happens
    (second,) = send(s, Call(2, 20, start=True, end=True))
    assert first.output() == [10] and second.output() == [20]
    worker.stop()
