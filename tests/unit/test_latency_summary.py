"""Latency summaries (`--metrics-config summary_latencies=true`): the settings as Triton 2.51 reads
them, quantiles over a one-minute window that slides by age buckets, cumulative count and sum."""

from __future__ import annotations

import math

import pytest

from server.protocol.errors import TritonError
from server.scheduling.latency_summary import (
    AGE_BUCKETS,
    DEFAULT_QUANTILES,
    KEPT,
    MAX_AGE_S,
    LatencySummaries,
    LatencySummary,
    MetricsConfig,
    parse_metrics_config,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_settings_and_tritons_defaults() -> None:
    assert parse_metrics_config([]) == MetricsConfig(True, False, DEFAULT_QUANTILES)
    config = parse_metrics_config(
        ["summary_latencies=true", "counter_latencies=false", "summary_quantiles=0.5:0.05,0.99:0.001"]
    )
    assert config == MetricsConfig(False, True, ((0.5, 0.05), (0.99, 0.001)))
    assert parse_metrics_config(["histogram_latencies=true"]) == MetricsConfig()  # 2.51 has none


def test_a_malformed_setting_names_the_fix() -> None:
    with pytest.raises(TritonError) as caught:
        parse_metrics_config(["summary_quantiles=0.5:x"])
    assert caught.value.message.startswith("--metrics-config=summary_quantiles=0.5:x: summary_quantiles is")


def test_quantiles_come_from_the_last_minute_count_and_sum_from_the_start() -> None:
    clock = Clock()
    summary = LatencySummary(clock)
    assert all(math.isnan(q) for q in summary.quantiles([0.5]))
    for value in range(1, 101):
        summary.observe(float(value))
    assert summary.quantiles([0.5, 0.9, 0.99]) == [50.0, 90.0, 99.0]
    clock.now += MAX_AGE_S / AGE_BUCKETS  # one age bucket later: the minute still holds them
    summary.observe(1000.0)
    assert summary.quantiles([0.5, 1.0]) == [51.0, 1000.0]
    clock.now += MAX_AGE_S  # a minute on: only what came since counts
    summary.observe(7.0)
    assert summary.quantiles([0.5, 0.99]) == [7.0, 7.0]
    assert (summary.count, summary.sum) == (102, 5050.0 + 1000.0 + 7.0)


def test_a_busy_window_keeps_a_bounded_sample() -> None:
    summary = LatencySummary(Clock())
    for value in range(KEPT * 3):
        summary.observe(float(value))
    median = summary.quantiles([0.5])[0]
    assert abs(median - KEPT * 1.5) < KEPT * 0.15  # a uniform sample's median, near the true one
    assert summary.count == KEPT * 3


def test_summaries_observe_each_stage_in_microseconds() -> None:
    summaries = LatencySummaries(DEFAULT_QUANTILES)
    summaries.observe(5_000_000, 1_000, 2_000, 3_000_000, 4_000)
    assert {stage: s.sum for stage, s in summaries.by_stage.items()} == {
        "request": 5000.0,
        "queue": 1.0,
        "compute_input": 2.0,
        "compute_infer": 3000.0,
        "compute_output": 4.0,
    }
