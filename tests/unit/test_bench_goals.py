"""The goal rows of benchmarks/run.py (issues 15 and 27): each row's verdict from its measured figures."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks import digits_batching, frontend, hop_breakdown, instances, process_hop_cost, scale, startup
from benchmarks.context import Summary
from benchmarks.harness import Load
from benchmarks.observe import Counts
from benchmarks.process_hop_cost import Hop, Pass
from benchmarks.repos import IN_SERVER
from benchmarks.scale import Launch
from server.backends.python import hop_frames
from server.protocol.types import InferenceResponse


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
def test_in_server_rows_need_the_protocol_target_and_a_lower_p99(
    protocol: str, speed: float, p99: float, expected: bool
) -> None:
    triton = summary(1000, 1000)
    tcli = summary(1000 * speed, p99)
    assert frontend.verdict(speed, tcli, triton, frontend.target(IN_SERVER, protocol)) is expected


@pytest.mark.parametrize(
    ("protocol", "speed", "p99", "expected"),
    [
        ("http", 1.05, 900, True),  # below the in-server 1.3, enough for the default path
        ("grpc", 1.0, 900, True),
        ("grpc", 0.97, 900, False),
        ("http", 1.2, 1000, False),  # p99 equal to Triton's: the goal says lower
    ],
)
def test_default_path_rows_need_tritons_throughput_and_a_lower_p99(
    protocol: str, speed: float, p99: float, expected: bool
) -> None:
    triton, tcli = summary(1000, 1000), summary(1000 * speed, p99)
    assert frontend.verdict(speed, tcli, triton, frontend.target("add_sub", protocol)) is expected


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


def test_example_repository_is_ready_within_two_seconds() -> None:
    assert startup.ready_passed(1.9) is True
    assert startup.ready_passed(2.5) is False  # within the old 3 s, not issue 27's 2 s


def hop(default_server: float, in_server_total: float, instance: float, stub: float) -> Hop:
    triton, default = Pass(2800, 160, stub), Pass(2100, default_server, instance)
    in_server = Pass(3500, in_server_total, 0)
    passes = {"triton": [triton], "tcli": [default], "in server": [in_server]}
    return Hop(Load("add_sub", "http", 1), triton, default, in_server, passes)


@pytest.mark.parametrize(
    ("default_server", "in_server_total", "instance", "stub", "expected"),
    [
        (160, 170, 100, 95, (True, True)),
        (170, 170, 114, 95, (True, True)),  # at both limits
        (175, 170, 100, 95, (False, True)),  # the server's share above the in-server path's whole request
        (160, 170, 115, 95, (True, False)),  # above 1.2x the stub
        (237, 169, 147, 95, (False, False)),  # issue 33's measurement before the work
    ],
)
def test_hop_rows_hold_the_servers_share_and_the_instance_against_tritons_stub(
    default_server: float, in_server_total: float, instance: float, stub: float, expected: tuple[bool, bool]
) -> None:
    assert process_hop_cost.verdicts(hop(default_server, in_server_total, instance, stub)) == expected


def test_hop_row_shows_both_servers_figures_and_the_throughput_ratio() -> None:
    row = process_hop_cost.row(hop(237, 169, 147, 95), "setup")
    assert row.tcli == "237 + 147 = 384 µs · 2,100/s"
    assert row.reference == "160 + 95 = 255 µs · 2,800/s (Triton)"
    assert row.ratio == pytest.approx(0.75)
    assert row.passed is False


def launch(ready_s: float, pss_mb: float) -> Launch:
    return Launch(ready_s, cpu_s=1.0, rss_mb=2 * pss_mb, pss_mb=pss_mb, processes=102)


@pytest.mark.parametrize(
    ("ours", "expected"),
    [
        (launch(4.0, 800), True),
        (launch(5.5, 800), False),  # too slow to ready
        (launch(4.0, 900), False),  # more than half of Triton's 1,767 MB
        (launch(18.4, 2290), False),  # issue 27's measurement before the work
    ],
)
def test_isolated_copies_row_needs_ready_in_time_and_half_of_tritons_pss(
    ours: Launch, expected: bool
) -> None:
    assert scale.isolated_passed(ours, launch(44.3, 1767)) is expected


def test_isolated_copies_sides_are_each_figures_median() -> None:
    runs = [launch(4.0, 700), launch(6.0, 900), launch(5.0, 800)]
    middle = scale.median_launch(runs)
    assert (middle.ready_s, middle.pss_mb, middle.processes) == (5.0, 800, 102)


def test_hop_breakdown_times_a_real_add_sub_request_woken_and_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    # hosted as in its own process, the model registers itself as `model`: gone again after the test
    monkeypatch.setitem(sys.modules, "model", None)
    model = hop_breakdown._add_sub()
    try:
        *steps_ns, done = hop_breakdown._handle(model, bytearray(hop_breakdown._frame()))
        (response,) = hop_frames.decode_results(bytearray(done), lambda: None, "add_sub", "1").results
        assert isinstance(response, InferenceResponse)
        outputs = {t.name: np.asarray(t.data) for t in response.outputs}
        assert outputs["OUTPUT0"].tolist() == [2.0] * 4 and outputs["OUTPUT1"].tolist() == [0.0] * 4
        assert all(ns >= 0 for ns in steps_ns)
    finally:
        model.unload()
    result = hop_breakdown.measure(40, 50.0)  # a pacer process wakes it 40 times (after a warm-up)
    assert set(result.woken) == set(result.hot) == set(hop_breakdown.STEPS)
    assert result.woken["execute"] > 0 and result.hot["execute"] > 0
