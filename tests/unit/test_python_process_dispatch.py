"""Python instances in processes, handed requests from the event loop (server/scheduling/dispatch.py):
the real ModelRunner and instance processes, driven from a real uvloop loop the way the service
drives them (run_inline first, submit when it declines). More requests than instances all complete,
in the loop's own thread; statistics count each; submitted requests join the loop's queue; a crash
fails the request in flight and the next one gets a new process; unloading waits for what the loop
queued; stopping after the loop stopped (server shutdown) still ends the processes cleanly; small and
large tensors both make the trip."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvloop

from server.backends.python.shm import INLINE_LIMIT
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.runner import ModelRunner
from tests.unit.test_python_process import MODEL, WAIT, make_runner, outputs, request, submit
from tests.waiting import wait_until


class Loop:
    """A uvloop loop on a thread of its own, as the server runs its front ends."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def infer(
        self, runner: ModelRunner, requests: list[InferenceRequest], then: Callable[[], None] | None = None
    ) -> list[tuple[Any, bool]]:
        """Each request as the service sends it; its result and whether it completed on the loop.
        `then` is called once every request is in."""
        coroutine = self._infer(runner, requests, then)
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(WAIT)

    async def _infer(
        self, runner: ModelRunner, requests: list[InferenceRequest], then: Callable[[], None] | None
    ) -> list[tuple[Any, bool]]:
        loop = asyncio.get_running_loop()
        futures = []
        for req in requests:
            future: asyncio.Future[tuple[Any, bool]] = loop.create_future()

            def complete(result: Any, future: asyncio.Future[tuple[Any, bool]] = future) -> None:
                on_loop = threading.current_thread() is self.thread
                loop.call_soon_threadsafe(future.set_result, (result, on_loop))

            if not runner.run_inline(req, complete):
                runner.submit(req, complete)
            futures.append(future)
        if then is not None:
            then()
        return list(await asyncio.gather(*futures))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    if running.thread.is_alive():
        running.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[ModelRunner]:
    runner = make_runner(tmp_path, "pp", MODEL, count=2)
    yield runner
    runner.stop(10)


def values(result: Any) -> list[int]:
    return [int(v) for v in outputs(result)["OUT"]]


def test_more_requests_than_instances_all_complete_on_the_loop(loop: Loop, pair: ModelRunner) -> None:
    answers = loop.infer(pair, [request([i]) for i in range(8)])
    assert [values(result) for result, _ in answers] == [[2 * i] for i in range(8)]
    assert all(on_loop for _, on_loop in answers)  # no worker thread on the way back
    pids = {int(outputs(result)["PID"][0]) for result, _ in answers}
    assert len(pids) == 2 and os.getpid() not in pids  # both instances served
    stats = pair.stats
    assert stats.execution_count == 8 and stats.success.count == 8
    assert pair.scheduler.pending() == 0


def test_submitted_requests_join_the_loops_queue(loop: Loop, pair: ModelRunner) -> None:
    loop.infer(pair, [request([1])])  # the loop takes the instances over
    waiters = [submit(pair, request([i])) for i in range(4)]  # e.g. streams: through the worker threads
    assert [values(w.wait()) for w in waiters] == [[2 * i] for i in range(4)]
    assert pair.stats.execution_count == 5


def test_crash_fails_the_request_and_the_next_gets_a_new_process(loop: Loop, tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "pp", MODEL, count=1, parameter="true")
    try:
        ((first, _),) = loop.infer(runner, [request([1])])
        ((crashed, _),) = loop.infer(runner, [request([1], mode="exit")])
        assert isinstance(crashed, TritonError) and crashed.code == ErrorCode.INTERNAL
        assert crashed.message == (
            "python model 'pp' instance 'pp_0': its process exited unexpectedly (exit code 3); "
            "the instance restarts for later requests"
        )
        answers = loop.infer(runner, [request([i]) for i in range(3)])
        assert [values(result) for result, _ in answers] == [[0], [2], [4]]
        pids = {int(outputs(result)["PID"][0]) for result, _ in answers}
        assert len(pids) == 1 and pids.isdisjoint({int(outputs(first)["PID"][0]), os.getpid()})
    finally:
        runner.stop(10)


def test_unload_waits_for_the_requests_the_loop_queued(loop: Loop, tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "pp", MODEL, count=2)
    pids = [i.pid for i in runner._instances]  # type: ignore[attr-defined]
    # unloading starts once all six are in: two running, four waiting in the loop's queue
    stopper = threading.Thread(target=runner.stop, args=(10,))
    answers = loop.infer(runner, [request([i], mode="big", n=200_000) for i in range(6)], stopper.start)
    stopper.join(WAIT)
    assert all(isinstance(result, InferenceResponse) for result, _ in answers), answers
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_stop_after_the_loop_stopped_ends_the_processes_cleanly(
    loop: Loop, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner = make_runner(tmp_path, "pp", MODEL, count=2)
    pids = [i.pid for i in runner._instances]  # type: ignore[attr-defined]
    loop.infer(runner, [request([i]) for i in range(4)])
    loop.stop()  # server shutdown: the loop ends first, then the models unload
    with caplog.at_level(logging.WARNING, logger="tcli.python_process"):
        runner.stop(10)
    assert "terminating" not in caplog.text  # finalize() ran and the processes left by themselves
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("count", [1, INLINE_LIMIT // 4, INLINE_LIMIT // 4 + 1, 100_000])
def test_small_and_large_tensors_both_ways(loop: Loop, pair: ModelRunner, count: int) -> None:
    data = np.arange(count, dtype=np.int32)
    small_out = request([1], mode="big", n=count)  # the model makes `count` values
    (echoed, _), (made, _) = loop.infer(
        pair, [InferenceRequest("pp", "", "x", [Tensor("IN", "INT32", (count,), data)]), small_out]
    )
    assert np.array_equal(outputs(echoed)["OUT"], data * 2)
    assert np.array_equal(outputs(made)["OUT"], np.arange(count, dtype=np.int32) * 2)


# each execute() sleeps PARAMETER ms and says which process ran it and when it began
SLEEPER = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            began = time.monotonic()
            time.sleep(json.loads(request.parameters())["ms"] / 1000)
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", (data * 2).astype(np.int32)),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
                pb_utils.Tensor("BEGAN", np.array([began], dtype=np.float64)),
            ]))
        return responses
"""


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[ModelRunner]:
    extra = 'output [{ name: "BEGAN" data_type: TYPE_FP64 dims: [ 1 ] }]'
    runner = make_runner(tmp_path, "pp", SLEEPER, count=2, extra=extra)
    yield runner
    runner.stop(10)


def test_batches_sent_behind_busy_instances_count_only_their_own_time(
    loop: Loop, sleepers: ModelRunner
) -> None:
    """Six 100 ms requests on two instances: each instance runs three back to back (the ones behind
    were sent while it was busy), and the statistics give each its own ~100 ms of compute and the
    rest as queue time, as when the loop hands a batch over only once the instance is free."""
    milliseconds = 100
    dispatcher = sleepers._dispatcher
    assert dispatcher is not None
    waiting: list[int] = []
    answers = loop.infer(
        sleepers,
        [request([i], ms=milliseconds) for i in range(6)],
        then=lambda: waiting.append(len(dispatcher.waiting)),
    )
    assert waiting == [2]  # two running, one sent behind each, two left on the loop
    assert [values(result) for result, _ in answers] == [[2 * i] for i in range(6)]
    runs: dict[int, list[float]] = {}
    for result, _ in answers:
        runs.setdefault(int(outputs(result)["PID"][0]), []).append(float(outputs(result)["BEGAN"][0]))
    assert sorted(len(began) for began in runs.values()) == [3, 3]
    for began in runs.values():  # back to back: each began as the one before it ended
        gaps = [later - earlier for earlier, later in zip(sorted(began), sorted(began)[1:], strict=False)]
        assert all(milliseconds / 1000 <= gap < 2 * milliseconds / 1000 for gap in gaps), gaps
    stats = sleepers.stats
    compute_ms = stats.compute_infer.ns / stats.compute_infer.count / 1e6
    queue_ms = stats.queue.ns / stats.queue.count / 1e6
    assert stats.success.count == 6
    assert milliseconds <= compute_ms < 1.5 * milliseconds, compute_ms
    assert queue_ms > 0.5 * milliseconds, queue_ms  # four of six waited for an instance


def test_large_inputs_wait_for_a_free_instance(loop: Loop, sleepers: ModelRunner) -> None:
    """A batch whose inputs go through the instance's shared-memory arena is never sent behind
    another: the arena holds one batch. Four such requests still all complete, right."""
    count = INLINE_LIMIT // 4 + 1
    data = np.arange(count, dtype=np.int32)
    big = [
        InferenceRequest(
            "pp", "", f"b{i}", [Tensor("IN", "INT32", (count,), data + i)], parameters={"ms": 50}
        )
        for i in range(4)
    ]
    seen: list[int] = []
    dispatcher = sleepers._dispatcher
    assert dispatcher is not None

    def after_all_in() -> None:
        seen.append(len(dispatcher.waiting))

    answers = loop.infer(sleepers, big, then=after_all_in)
    assert seen == [2]  # two running, two waiting on the loop (none sent behind)
    for i, (result, _) in enumerate(answers):
        assert np.array_equal(outputs(result)["OUT"], (data + i) * 2)


def test_a_batch_sent_behind_a_crashing_one_runs_on_the_restarted_instance(
    loop: Loop, tmp_path: Path
) -> None:
    """One instance: the request sent behind the one that kills the process had not started, so it
    is not failed with it: it runs once the instance is back."""
    runner = make_runner(tmp_path, "pp", MODEL, count=1, parameter="true")
    dispatcher = runner._dispatcher
    assert dispatcher is not None
    try:
        ((first, _),) = loop.infer(runner, [request([1])])  # the loop takes the instance over
        waiting: list[int] = []
        (crashed, _), (behind, _) = loop.infer(
            runner,
            [request([1], mode="exit"), request([5])],
            then=lambda: waiting.append(len(dispatcher.waiting)),
        )
        assert waiting == [0]  # the second was sent to the instance behind the first
        assert isinstance(crashed, TritonError) and "its process exited unexpectedly" in crashed.message
        assert values(behind) == [10]
        assert int(outputs(behind)["PID"][0]) != int(outputs(first)["PID"][0])
    finally:
        runner.stop(10)


# the model's initialize() fails while a file "no_start" is in its folder
FRAGILE = MODEL.replace(
    '        self.instance = args["model_instance_name"]',
    '        if os.path.exists(os.path.join(args["model_repository"], "no_start")):\n'
    '            raise RuntimeError("cannot start now")\n'
    '        self.instance = args["model_instance_name"]',
)


def _pids(answers: list[tuple[Any, bool]]) -> set[int]:
    return {int(outputs(result)["PID"][0]) for result, _ in answers}


def test_requests_go_to_the_live_instance_while_the_other_fails_to_start(loop: Loop, tmp_path: Path) -> None:
    """Issue 14: a crashed instance whose new process cannot start leaves the model's requests to the
    other instance, instead of failing them one by one; it is tried again and rejoins once it starts."""
    runner = make_runner(tmp_path, "pp", FRAGILE, count=2)
    instances = runner._instances
    try:
        both = _pids(loop.infer(runner, [request([i]) for i in range(4)]))
        assert len(both) == 2
        (tmp_path / "pp" / "no_start").touch()
        ((crashed, _),) = loop.infer(runner, [request([1], mode="exit")])
        assert isinstance(crashed, TritonError) and "its process exited unexpectedly" in crashed.message
        for _ in range(3):  # each round finds the crashed instance down (and its start failing)
            answers = loop.infer(runner, [request([i]) for i in range(8)])
            assert [values(result) for result, _ in answers] == [[2 * i] for i in range(8)]
            assert len(_pids(answers)) == 1
        assert [i.pid is None for i in instances].count(True) == 1  # type: ignore[attr-defined]
        (tmp_path / "pp" / "no_start").unlink()
        wait_until(
            lambda: all(i.pid is not None for i in instances),  # type: ignore[attr-defined]
            "the crashed instance to start again",
        )
        answers = loop.infer(runner, [request([i]) for i in range(8)])
        assert len(_pids(answers)) == 2 and all(isinstance(r, InferenceResponse) for r, _ in answers)
    finally:
        runner.stop(10)


def test_with_no_instance_left_requests_fail_with_the_start_error_until_it_starts(
    loop: Loop, tmp_path: Path
) -> None:
    runner = make_runner(tmp_path, "pp", FRAGILE, count=1)
    try:
        loop.infer(runner, [request([1])])
        (tmp_path / "pp" / "no_start").touch()
        loop.infer(runner, [request([1], mode="exit")])
        answers = loop.infer(runner, [request([i]) for i in range(3)])
        for result, _ in answers:
            assert isinstance(result, TritonError) and result.code == ErrorCode.INTERNAL
            assert result.message == (
                "python model 'pp' instance 'pp_0' did not start again: model 'pp' initialize() failed: "
                "RuntimeError: cannot start now"
            )
        assert runner.stats.failures["BACKEND"] >= 4  # the crash and the three
        (tmp_path / "pp" / "no_start").unlink()

        def serves() -> bool:
            ((result, _),) = loop.infer(runner, [request([7])])
            return isinstance(result, InferenceResponse) and values(result) == [14]

        wait_until(serves, "the instance to start again")
    finally:
        runner.stop(10)
