"""benchmarks/observe.py: the steady part of a watched run gives the served rate and each side's CPU."""

from __future__ import annotations

import pytest

from benchmarks.observe import Sample, steady


def run(rate: float, tool_share: float, server_share: float) -> list[Sample]:
    """1 s idle, 3 s of load at `rate`/s, 1 s idle, sampled every 0.1 s; CPU accrues only under load."""
    samples, count, tool, server = [], 0.0, 0.0, 0.0
    for step in range(51):
        at = step / 10
        loaded = 1.0 < at <= 4.0
        if loaded:
            count, tool, server = count + rate / 10, tool + tool_share / 10, server + server_share / 10
        samples.append(Sample(at, tool, server, int(count)))
    return samples


def test_steady_part_gives_served_rate_and_cpu_per_inference() -> None:
    seen = steady(run(rate=1000, tool_share=0.25, server_share=0.9))
    assert seen is not None
    assert seen.served == pytest.approx(1000, rel=0.02)
    assert seen.tool_pct == pytest.approx(25, rel=0.02) and seen.server_pct == pytest.approx(90, rel=0.02)
    assert seen.tool_us == pytest.approx(250, rel=0.02) and seen.server_us == pytest.approx(900, rel=0.02)


def test_no_load_or_too_short_gives_nothing() -> None:
    assert steady(run(rate=0, tool_share=0, server_share=0)) is None
    assert steady(run(rate=1000, tool_share=0.1, server_share=0.5)[:13]) is None


def test_paired_ratio_is_the_median_of_back_to_back_pairs() -> None:
    from benchmarks.harness import Measurement
    from benchmarks.perf_tools import paired_ratio

    def runs(*throughputs: float | None) -> list[Measurement | None]:
        return [None if t is None else Measurement(t, 0, 0) for t in throughputs]

    # the machine slowed down in round 3 for one side only: the pairs still agree
    assert paired_ratio(runs(106, 99, 69), runs(100, 100, 100)) == pytest.approx(0.99)
    assert paired_ratio(runs(100, None), runs(None, 100)) is None  # no pair measured both
