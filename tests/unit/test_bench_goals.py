"""The issue-15 goal rows of benchmarks/run.py: each row's verdict from its measured figures."""

from __future__ import annotations

import pytest

from benchmarks import digits_batching, frontend, instances
from benchmarks.context import Summary
from benchmarks.observe import Counts


def summary(throughput: float, p99_us: float) -> Summary:
    return Summary(throughput, 0, p99_us, [throughput])


@pytest.mark.parametrize(
    ("protocol", "speed", "p99", "expected"),
    [
        ("http", 1.35, 900, True),
        ("http", 1.25, 900, False),  # met the old >= 1.00, not 1.3
        ("http", 1.35, 1000, False),  # p99 equal to Triton's: the goal says lower
        ("grpc", 1.9, 900, False),
        ("grpc", 2.1, 900, True),
        ("grpc", 2.1, 1100, False),
    ],
)
def test_front_end_rows_need_the_protocol_target_and_a_lower_p99(
    protocol: str, speed: float, p99: float, expected: bool
) -> None:
    triton = summary(1000, 1000)
    tcli = summary(1000 * speed, p99)
    assert frontend.verdict(speed, tcli, triton, frontend.TARGETS[protocol]) is expected


def test_front_end_row_without_a_side_is_not_judged() -> None:
    assert frontend.verdict(None, None, summary(1000, 1000), 1.3) is None


def test_mean_batch_is_the_difference_of_the_counters() -> None:
    before, after = Counts(inferences=100, executions=40), Counts(inferences=420, executions=80)
    assert (after - before).mean_batch == pytest.approx(8.0)
    assert (Counts(0, 0) + (after - before)) == Counts(320, 40)
    assert (after - after).mean_batch is None  # nothing executed: no batch size


@pytest.mark.parametrize(
    ("speed", "batch", "expected"),
    [(0.95, 4.0, True), (0.95, 1.0, False), (0.85, 4.0, False), (None, 4.0, None), (0.95, None, None)],
)
def test_digits_row_needs_the_rate_and_batches_above_one(
    speed: float | None, batch: float | None, expected: bool | None
) -> None:
    assert digits_batching.passed(speed, batch) is expected


def test_python_instances_row_is_held_to_tritons_own_ratio() -> None:
    assert instances.python_passed(1.8, 1.75) is True
    assert instances.python_passed(1.75, 1.8) is False  # above the old fixed 1.7, below Triton
    assert instances.python_passed(1.8, None) is None  # --quick: no Triton, n/a
