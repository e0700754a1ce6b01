"""The dynamic batcher with real worker threads: batch formation as Triton does it (preferred sizes,
max_batch_size, delay, shapes), priorities, queue policies, timeouts, ordering and shutdown.

No test asserts an upper time bound. Where a delay or timeout must really elapse it is 50 ms and
the test waits on events (bounded only by a generous failure timeout)."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.batch import batch_key
from server.scheduling.dynamic_batcher import DynamicBatcher
from server.scheduling.work import WorkItem

WAIT = 10.0  # failure timeout for events and joins; never reached when things work
LONG_DELAY_US = 60_000_000  # a queue delay that never elapses during a test
TIMEOUT_US = 50_000  # a queue timeout that must elapse


class Item:
    """A WorkItem plus the result its completion received."""

    def __init__(
        self,
        tag: Any,
        rows: int = 1,
        width: int = 2,
        priority: int = 0,
        timeout_us: int = 0,
        log: list[Any] | None = None,
    ) -> None:
        data = np.full((rows, width), 1.0, np.float32)
        parameters: dict[str, Any] = {}
        if priority:
            parameters["priority"] = priority
        if timeout_us:
            parameters["timeout"] = timeout_us
        request = InferenceRequest(
            "m", id=f"r{tag}", inputs=[Tensor("IN", "FP32", data.shape, data)], parameters=parameters
        )
        self.tag = tag
        self.log = log  # completions append their tag here, in delivery order
        self.done = threading.Event()
        self.result: InferenceResponse | TritonError | None = None
        self.calls = 0
        self.work = WorkItem(request, rows, self._complete)

    def _complete(self, result: InferenceResponse | TritonError) -> None:
        self.calls += 1
        self.result = result
        if self.log is not None:
            self.log.append(self.tag)
        self.done.set()


def batcher(max_batch_size: int = 8, **fields: Any) -> DynamicBatcher:
    return DynamicBatcher(mc.ModelDynamicBatching(**fields), max_batch_size)


def tags(batch: list[WorkItem] | None) -> list[Any]:
    assert batch is not None
    return [item.request.id[1:] for item in batch]


def enqueue(b: DynamicBatcher, *items: Item) -> None:
    for item in items:
        b.enqueue(item.work)


def items(n: int, **kwargs: Any) -> list[Item]:
    return [Item(i, **kwargs) for i in range(n)]


class Worker(threading.Thread):
    """An instance worker: takes batches until the batcher is closed and drained."""

    def __init__(self, b: DynamicBatcher, complete: bool = True, pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.b = b
        self.complete = complete
        self.pause = pause  # simulated execution time per batch
        self.batches: list[list[WorkItem]] = []
        self.got_batch = threading.Event()
        self.finished = threading.Event()

    def run(self) -> None:
        while (batch := self.b.next_batch()) is not None:
            self.batches.append(batch)
            if self.pause:
                time.sleep(self.pause)
            if self.complete:
                for item in batch:
                    item.complete(InferenceResponse("m", "1", id=item.request.id))
            self.got_batch.set()
        self.finished.set()


def stop(b: DynamicBatcher, *workers: Worker) -> None:
    b.close()
    for worker in workers:
        worker.join(WAIT)
        assert not worker.is_alive()


# batch formation --------------------------------------------------------------------------------
def test_preferred_size_is_sent_first_then_the_rest() -> None:
    """6 queued, preferred [4], max 8, delay 0: 4 then 2 (what Triton 2.51 does)."""
    b = batcher(8, preferred_batch_size=[4])
    enqueue(b, *items(6))
    assert tags(b.next_batch()) == ["0", "1", "2", "3"]
    assert tags(b.next_batch()) == ["4", "5"]
    assert b.pending() == 0


def test_the_largest_preferred_size_reachable_wins() -> None:
    b = batcher(8, preferred_batch_size=[2, 4, 6])
    enqueue(b, *items(7))
    assert tags(b.next_batch()) == ["0", "1", "2", "3", "4", "5"]
    assert tags(b.next_batch()) == ["6"]


def test_requests_are_never_split_to_reach_a_preferred_size() -> None:
    """Rows [3, 3, 2, 1], preferred [4]: batches [3], [3], [2, 1] (as Triton 2.51 forms them)."""
    b = batcher(8, preferred_batch_size=[4])
    enqueue(b, *(Item(i, rows=r) for i, r in enumerate([3, 3, 2, 1])))
    assert tags(b.next_batch()) == ["0"]
    assert tags(b.next_batch()) == ["1"]
    assert tags(b.next_batch()) == ["2", "3"]


def test_without_preferred_sizes_delay_zero_takes_everything_up_to_max() -> None:
    b = batcher(8)
    enqueue(b, *(Item(i, rows=3) for i in range(4)))
    assert tags(b.next_batch()) == ["0", "1"]  # a third would make 9 > 8
    assert tags(b.next_batch()) == ["2", "3"]


def test_a_different_shape_closes_the_batch_and_waits_in_order() -> None:
    b = batcher(8, max_queue_delay_microseconds=LONG_DELAY_US)
    enqueue(b, Item("a"), Item("b"), Item("c", width=3), Item("d"), Item("e"))
    # the odd request cuts the batch short: sent now despite the long delay
    assert tags(b.next_batch()) == ["a", "b"]
    assert tags(b.next_batch()) == ["c"]
    b.close()  # no more requests: the rest goes without waiting for the delay
    assert tags(b.next_batch()) == ["d", "e"]
    assert b.next_batch() is None


def test_a_custom_batch_key_decides_what_shares_a_batch() -> None:
    b = DynamicBatcher(mc.ModelDynamicBatching(), 8, batched_key=lambda request: None)
    enqueue(b, Item("a"), Item("b", width=3))
    assert tags(b.next_batch()) == ["a", "b"]


def test_max_batch_size_is_never_exceeded_with_concurrent_workers_and_producers() -> None:
    b = batcher(8, preferred_batch_size=[4, 6], max_queue_delay_microseconds=1000)
    workers = [Worker(b) for _ in range(4)]
    for worker in workers:
        worker.start()
    rng = random.Random(7)
    all_items = [Item(i, rows=rng.randint(1, 4), width=rng.choice([2, 2, 2, 3])) for i in range(600)]

    def produce(chunk: list[Item]) -> None:
        for item in chunk:
            b.enqueue(item.work)

    producers = [threading.Thread(target=produce, args=(all_items[k::3],)) for k in range(3)]
    for producer in producers:
        producer.start()
    for producer in producers:
        producer.join(WAIT)
    for item in all_items:
        assert item.done.wait(WAIT), f"request {item.tag} never completed"
    stop(b, *workers)

    batches = [batch for worker in workers for batch in worker.batches]
    assert sorted(int(t) for batch in batches for t in tags(batch)) == list(range(600))
    for batch in batches:
        assert sum(item.rows for item in batch) <= 8
        assert len({batch_key(item.request) for item in batch}) == 1
    assert all(item.calls == 1 for item in all_items)


def test_every_request_completes_once_under_priorities_timeouts_and_delays() -> None:
    """A random mix with concurrent workers: nothing is lost, duplicated or stuck."""
    b = batcher(
        6,
        preferred_batch_size=[3, 6],
        max_queue_delay_microseconds=2000,
        priority_levels=2,
        default_priority_level=2,
        default_queue_policy=mc.ModelQueuePolicy(
            default_timeout_microseconds=LONG_DELAY_US, allow_timeout_override=True
        ),
        priority_queue_policy={
            1: mc.ModelQueuePolicy(
                timeout_action=mc.ModelQueuePolicy.DELAY,
                default_timeout_microseconds=LONG_DELAY_US,
                allow_timeout_override=True,
            )
        },
    )
    workers = [Worker(b, pause=0.002) for _ in range(3)]  # slow enough for queues to build up
    for worker in workers:
        worker.start()
    rng = random.Random(11)
    all_items = [
        Item(
            i,
            rows=rng.randint(1, 3),
            width=rng.choice([2, 2, 3]),
            priority=rng.choice([0, 1, 2]),
            timeout_us=rng.choice([0, 0, 0, 1000, 20_000]),
        )
        for i in range(400)
    ]
    for index, item in enumerate(all_items):
        b.enqueue(item.work)
        if index % 50 == 0:
            time.sleep(0.002)  # let batches form while requests keep coming
    for item in all_items:
        assert item.done.wait(WAIT), f"request {item.tag} never completed"
    stop(b, *workers)

    assert all(item.calls == 1 for item in all_items)
    assert b.pending() == 0
    served = [int(t) for worker in workers for batch in worker.batches for t in tags(batch)]
    rejected = [item.tag for item in all_items if isinstance(item.result, TritonError)]
    assert sorted(served + rejected) == list(range(400))
    for item in all_items:
        if isinstance(item.result, TritonError):
            assert item.result.message == "Request timeout expired"
            assert item.work.priority_level == 2  # level 1 delays instead of rejecting
    for worker in workers:
        for batch in worker.batches:
            assert sum(item.rows for item in batch) <= 6
            assert len({batch_key(item.request) for item in batch}) == 1
            levels = [item.priority_level for item in batch]
            assert levels == sorted(levels)


# delay --------------------------------------------------------------------------------------------
# TRITONSERVER_DELAY_SCHEDULER unset, or set to what atoi reads as 0: nothing is held
@pytest.mark.parametrize("delay", [None, "", "0", "x", "-2"])
def test_a_waiting_worker_is_woken_by_the_first_request(
    monkeypatch: pytest.MonkeyPatch, delay: str | None
) -> None:
    if delay is not None:
        monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", delay)
    b = batcher(8)
    worker = Worker(b)
    worker.start()
    item = Item("x")
    enqueue(b, item)
    assert item.done.wait(WAIT)
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [["x"]]


def test_within_the_delay_the_batch_grows_to_max_batch_size() -> None:
    b = batcher(8, max_queue_delay_microseconds=LONG_DELAY_US)
    worker = Worker(b)
    worker.start()
    first, rest = items(3), [Item(i, rows=1) for i in range(3, 8)]
    enqueue(b, *first)
    enqueue(b, *rest)  # 8 rows: max batch reached, no need to wait for the delay
    assert worker.got_batch.wait(WAIT)
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [[str(i) for i in range(8)]]


def test_within_the_delay_a_preferred_size_goes_at_once() -> None:
    b = batcher(8, preferred_batch_size=[4], max_queue_delay_microseconds=LONG_DELAY_US)
    worker = Worker(b)
    worker.start()
    enqueue(b, *items(3))
    enqueue(b, Item(3))
    assert worker.got_batch.wait(WAIT)
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [["0", "1", "2", "3"]]


def test_when_the_delay_passes_the_queue_is_sent_as_it_is() -> None:
    b = batcher(8, max_queue_delay_microseconds=50_000)
    worker = Worker(b)
    worker.start()
    item = Item("x")
    enqueue(b, item)
    assert item.done.wait(WAIT)
    returned = time.monotonic_ns()
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [["x"]]
    assert returned - item.work.enqueued_ns >= 50_000_000  # it did wait for the delay


def test_a_passed_delay_sends_everything_pending_not_just_the_preferred_size() -> None:
    """Triton 2.51: once the oldest request waited longer than the delay, the whole pending batch goes."""
    b = batcher(8, preferred_batch_size=[4], max_queue_delay_microseconds=50_000)
    queued = items(6)
    enqueue(b, *queued)
    time.sleep(0.06)  # the delay must have passed when the worker asks
    assert tags(b.next_batch()) == ["0", "1", "2", "3", "4", "5"]


# priorities and queue policies ------------------------------------------------------------------
def test_higher_priority_requests_go_first_and_a_batch_may_span_levels() -> None:
    b = batcher(8, priority_levels=2, default_priority_level=2)
    enqueue(b, Item("low0"), Item("high0", priority=1), Item("low1", priority=2), Item("high1", priority=1))
    enqueue(b, Item("dflt", priority=7))  # out of range: the default level
    assert tags(b.next_batch()) == ["high0", "high1", "low0", "low1", "dflt"]

    small = batcher(2, priority_levels=2, default_priority_level=2)
    enqueue(small, Item("low0"), Item("low1"), Item("high0", priority=1))
    assert tags(small.next_batch()) == ["high0", "low0"]
    assert tags(small.next_batch()) == ["low1"]


def test_a_config_counting_every_priority_level_costs_only_the_levels_used() -> None:
    # Triton's qa loads priority_levels 2**64 - 1: a queue per level counted would never fit in memory
    most = 2**64 - 1
    b = batcher(
        8,
        priority_levels=most,
        default_priority_level=most,
        priority_queue_policy={2**40: mc.ModelQueuePolicy(max_queue_size=1)},
    )
    enqueue(
        b, Item("dflt"), Item("top", priority=1), Item("mid", priority=2**40), Item("low", priority=2**63)
    )
    with pytest.raises(TritonError, match="Exceeds maximum queue size"):  # that level's own policy
        enqueue(b, Item("mid2", priority=2**40))
    assert tags(b.next_batch()) == ["top", "mid", "low", "dflt"]  # highest priority first
    assert b.pending() == 0


def test_a_full_level_rejects_new_requests() -> None:
    b = batcher(
        8,
        priority_levels=2,
        default_priority_level=2,
        default_queue_policy=mc.ModelQueuePolicy(max_queue_size=2),
        priority_queue_policy={1: mc.ModelQueuePolicy(max_queue_size=1)},
    )
    enqueue(b, Item("a"), Item("b"), Item("h", priority=1))
    with pytest.raises(TritonError) as caught:
        enqueue(b, Item("c"))
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert caught.value.message == "[request id: rc] Exceeds maximum queue size"
    with pytest.raises(TritonError):
        enqueue(b, Item("h2", priority=1))

    assert tags(b.next_batch()) == ["h", "a", "b"]
    enqueue(b, Item("c"))  # room again
    assert b.pending() == 1


def test_a_request_without_id_is_named_as_triton_names_it() -> None:
    b = batcher(8, default_queue_policy=mc.ModelQueuePolicy(max_queue_size=1))
    enqueue(b, Item("a"))
    anonymous = Item("b")
    anonymous.work.request.id = ""
    with pytest.raises(TritonError) as caught:
        enqueue(b, anonymous)
    assert caught.value.message == "[request id: <id_unknown>] Exceeds maximum queue size"


def test_an_expired_request_is_rejected_even_while_no_worker_asks() -> None:
    b = batcher(8, default_queue_policy=mc.ModelQueuePolicy(default_timeout_microseconds=TIMEOUT_US))
    item = Item("x")
    enqueue(b, item)
    assert item.done.wait(WAIT)
    assert isinstance(item.result, TritonError)
    assert item.result.code is ErrorCode.UNAVAILABLE
    assert item.result.message == "Request timeout expired"
    assert item.calls == 1
    assert b.pending() == 0
    b.close()
    assert b.next_batch() is None


def test_a_request_timeout_may_only_lower_the_default() -> None:
    policy = mc.ModelQueuePolicy(default_timeout_microseconds=LONG_DELAY_US, allow_timeout_override=True)
    b = batcher(8, default_queue_policy=policy)
    short, longer, plain = (
        Item("s", timeout_us=TIMEOUT_US),
        Item("l", timeout_us=10 * LONG_DELAY_US),
        Item("p"),
    )
    enqueue(b, short, longer, plain)
    assert short.done.wait(WAIT)
    assert isinstance(short.result, TritonError)
    assert short.result.message == "Request timeout expired"
    # the longer request timeout was ignored: both keep the default deadline
    assert longer.work.deadline_ns - longer.work.enqueued_ns <= LONG_DELAY_US * 1000 + 1_000_000_000
    assert tags(b.next_batch()) == ["l", "p"]

    # a shorter request timeout behind longer ones expires from the middle of the queue
    middle = Item("m", timeout_us=TIMEOUT_US)
    enqueue(b, Item("before"), middle, Item("after"))
    assert middle.done.wait(WAIT)
    assert isinstance(middle.result, TritonError)
    assert tags(b.next_batch()) == ["before", "after"]

    no_override = batcher(
        8, default_queue_policy=mc.ModelQueuePolicy(default_timeout_microseconds=LONG_DELAY_US)
    )
    ignored = Item("i", timeout_us=TIMEOUT_US)
    enqueue(no_override, ignored)
    assert ignored.work.deadline_ns - ignored.work.enqueued_ns >= LONG_DELAY_US * 1000

    no_default = batcher(8, default_queue_policy=mc.ModelQueuePolicy(allow_timeout_override=True))
    untimed = Item("u", timeout_us=TIMEOUT_US)
    enqueue(no_default, untimed)
    assert untimed.work.deadline_ns == 0  # Triton 2.51 too: without a default there is no timeout


def test_a_delayed_request_moves_behind_and_is_still_served() -> None:
    policy = mc.ModelQueuePolicy(
        timeout_action=mc.ModelQueuePolicy.DELAY,
        default_timeout_microseconds=LONG_DELAY_US,
        allow_timeout_override=True,
    )
    b = batcher(8, default_queue_policy=policy)
    late, on_time = Item("late", timeout_us=TIMEOUT_US), Item("on_time")
    enqueue(b, late, on_time)
    give_up = time.monotonic() + WAIT
    while late.work.deadline_ns and time.monotonic() < give_up:  # the expiry moves it and clears it
        time.sleep(0.01)
    assert late.work.deadline_ns == 0
    assert not late.done.is_set()
    assert tags(b.next_batch()) == ["on_time", "late"]


def test_an_expired_request_never_reaches_a_batch() -> None:
    policy = mc.ModelQueuePolicy(default_timeout_microseconds=LONG_DELAY_US, allow_timeout_override=True)
    b = batcher(8, default_queue_policy=policy)
    expire, keep = Item("expire", timeout_us=TIMEOUT_US), Item("keep")
    enqueue(b, expire, keep)
    time.sleep(0.06)  # past the deadline: whichever comes first, the timer or this worker, rejects it
    assert tags(b.next_batch()) == ["keep"]
    assert expire.done.wait(WAIT)
    assert isinstance(expire.result, TritonError)


# ordering and shutdown ----------------------------------------------------------------------------
def test_preserve_ordering_holds_early_responses_until_earlier_ones_complete() -> None:
    b = batcher(1, preserve_ordering=True)
    delivered: list[Any] = []
    second = Item("2", log=delivered)
    enqueue(b, Item("1", log=delivered), second, Item("3", log=delivered))
    batches = [b.next_batch() or [] for _ in range(3)]
    assert [tags(batch) for batch in batches] == [["1"], ["2"], ["3"]]

    batches[2][0].complete(InferenceResponse("m", "1"))
    batches[1][0].complete(TritonError(ErrorCode.INTERNAL, "boom"))
    assert delivered == []  # held: request 1 has not completed
    batches[0][0].complete(InferenceResponse("m", "1"))
    assert delivered == ["1", "2", "3"]
    assert isinstance(second.result, TritonError)


def test_preserve_ordering_across_concurrent_workers() -> None:
    b = batcher(2, preserve_ordering=True)
    delivered: list[Any] = []
    all_items = items(60, log=delivered)
    rng = random.Random(3)

    def work() -> None:
        while (batch := b.next_batch()) is not None:
            for item in reversed(batch):  # complete out of order on purpose
                if rng.random() < 0.3:
                    time.sleep(0.001)
                item.complete(InferenceResponse("m", "1"))

    threads = [threading.Thread(target=work, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    enqueue(b, *all_items)
    for item in all_items:
        assert item.done.wait(WAIT)
    b.close()
    for thread in threads:
        thread.join(WAIT)
    assert delivered == list(range(60))


def test_close_releases_waiting_workers() -> None:
    b = batcher(8)
    workers = [Worker(b) for _ in range(3)]
    for worker in workers:
        worker.start()
    stop(b, *workers)
    assert all(worker.finished.is_set() and not worker.batches for worker in workers)


def test_close_drains_the_queue_without_waiting_for_the_delay() -> None:
    b = batcher(8, max_queue_delay_microseconds=LONG_DELAY_US)
    worker = Worker(b)
    worker.start()
    queued = items(3)
    enqueue(b, *queued)
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [["0", "1", "2"]]
    with pytest.raises(TritonError) as caught:
        enqueue(b, Item("late"))
    assert caught.value.code is ErrorCode.UNAVAILABLE


def test_a_busy_worker_gets_the_next_batch_when_it_returns() -> None:
    """One instance busy, requests pile up; when it asks again it takes them as one batch."""
    b = batcher(8)
    enqueue(b, Item("first"))
    busy = b.next_batch()
    assert tags(busy) == ["first"]
    enqueue(b, *items(5))
    assert tags(b.next_batch()) == ["0", "1", "2", "3", "4"]


# Triton's test knob ------------------------------------------------------------------------------
def test_delay_scheduler_holds_the_first_batch_until_n_are_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=3 (Triton's L0_batcher knob): the first batch waits for three
    requests, even with no queue delay; from then on batches form as usual."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    b = batcher(8)
    worker = Worker(b)
    worker.start()
    first, second, third, later = items(4)
    for item in (first, second):
        enqueue(b, item)
        # nothing may happen here: a bounded look, the only way to see that the batch is held
        assert not first.done.wait(0.2)
    enqueue(b, third)
    assert third.done.wait(WAIT)
    enqueue(b, later)  # the knob is spent: a lone request goes at once
    assert later.done.wait(WAIT)
    stop(b, worker)
    assert [tags(batch) for batch in worker.batches] == [["0", "1", "2"], ["3"]]
