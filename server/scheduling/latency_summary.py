"""Latency summaries, tritonserver's `--metrics-config` (Triton 2.51's settings):

    counter_latencies=true|false   the cumulative *_duration_us counters (default true)
    summary_latencies=true|false   the *_summary_us summaries with quantiles (default false)
    summary_quantiles=<q>:<error>,...   which quantiles, each with its allowed rank error
                                   (default 0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001)

Triton 2.51 has no latency histograms: `histogram_latencies` (a later Triton's) is accepted and has
no effect there, so here too (with a warning). A malformed value is refused at start-up with the
fix; Triton 2.51 starts anyway and ignores it.

A summary observes each successful request's five durations in microseconds (end to end, queue,
compute input, infer, output), as Triton's do. Its count and sum are cumulative; its quantiles are
over a sliding window of the last minute, as prometheus-cpp's (Triton's) summaries: the window is
5 age buckets, each observation goes into every bucket, the oldest answers and is emptied every 12 s.
Quantiles are exact over the observations a bucket kept: past `KEPT` per bucket it keeps a uniform
sample (reservoir sampling), which stays within the allowed errors far more often than not.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from server.protocol.errors import ErrorCode, TritonError

Quantiles = tuple[tuple[float, float], ...]
DEFAULT_QUANTILES: Quantiles = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
MAX_AGE_S = 60.0  # prometheus-cpp's default window, which Triton keeps
AGE_BUCKETS = 5
KEPT = 4096  # observations one age bucket keeps (a uniform sample beyond)
# the five durations of a request, in the order LatencySummaries.observe takes them
STAGES = ("request", "queue", "compute_input", "compute_infer", "compute_output")
_LOG = logging.getLogger("tcli.metrics")
_BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class MetricsConfig:
    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: Quantiles = DEFAULT_QUANTILES


def parse_metrics_config(values: Sequence[str]) -> MetricsConfig:
    """`--metrics-config <setting>=<value>` flags (repeatable), Triton's settings and defaults."""
    settings: dict[str, object] = {}
    for value in values:
        key, equals, item = value.partition("=")
        if not equals or not key:
            raise _bad(value, "the format is <setting>=<value>, e.g. summary_latencies=true")
        if key in ("counter_latencies", "summary_latencies"):
            if item.lower() not in _BOOLEANS:
                raise _bad(value, f'{key} is "true" or "false"')
            settings[key] = _BOOLEANS[item.lower()]
        elif key == "summary_quantiles":
            settings[key] = _quantiles(value, item)
        elif key == "histogram_latencies":
            _LOG.warning("--metrics-config=%s: Triton 2.51 has no latency histograms; no effect", value)
        else:
            raise _bad(value, "settings: counter_latencies, summary_latencies, summary_quantiles")
    return MetricsConfig(**settings)  # type: ignore[arg-type]


def _quantiles(flag: str, text: str) -> Quantiles:
    pairs = []
    for entry in text.split(","):
        quantile, colon, error = entry.partition(":")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            pair = (math.nan, math.nan)
        if not colon or not (0.0 <= pair[0] <= 1.0 and 0.0 <= pair[1] <= 1.0):
            raise _bad(
                flag,
                "summary_quantiles is <quantile>:<error>,... with both in [0, 1], e.g. 0.5:0.05,0.9:0.01",
            )
        pairs.append(pair)
    return tuple(pairs)


def _bad(flag: str, fix: str) -> TritonError:
    return TritonError(ErrorCode.INVALID_ARG, f"--metrics-config={flag}: {fix}")


class LatencySummary:
    """One summary series: cumulative count and sum, quantiles over the last minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: list[list[float]] = [[] for _ in range(AGE_BUCKETS)]
        self._seen = [0] * AGE_BUCKETS  # observations each bucket was offered
        self._head = 0  # the oldest bucket: the one that answers
        self._rotated_at = clock()
        self._random = random.Random(0)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            self._rotate()
            self.count += 1
            self.sum += value
            for index, bucket in enumerate(self._buckets):
                self._seen[index] += 1
                if len(bucket) < KEPT:
                    bucket.append(value)
                else:
                    slot = self._random.randrange(self._seen[index])
                    if slot < KEPT:
                        bucket[slot] = value

    def quantiles(self, wanted: Sequence[float]) -> list[float]:
        """The value at each wanted quantile over the window (NaN without observations)."""
        with self._lock:
            self._rotate()
            values = sorted(self._buckets[self._head])
        if not values:
            return [math.nan] * len(wanted)
        return [values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))] for q in wanted]

    def _rotate(self) -> None:
        step = MAX_AGE_S / AGE_BUCKETS
        now = self._clock()
        while now - self._rotated_at >= step:
            self._buckets[self._head], self._seen[self._head] = [], 0
            self._head = (self._head + 1) % AGE_BUCKETS
            self._rotated_at += step
            if now - self._rotated_at > MAX_AGE_S:  # idle for long: every bucket is stale
                self._buckets = [[] for _ in range(AGE_BUCKETS)]
                self._seen = [0] * AGE_BUCKETS
                self._rotated_at = now


@dataclass
class LatencySummaries:
    """The five summaries of one model version, fed by its statistics."""

    quantiles: Quantiles
    by_stage: dict[str, LatencySummary] = field(
        default_factory=lambda: {stage: LatencySummary() for stage in STAGES}
    )

    def observe(self, *durations_ns: int) -> None:
        """One successful request's durations, in STAGES order, in nanoseconds."""
        for stage, ns in zip(STAGES, durations_ns, strict=True):
            self.by_stage[stage].observe(ns // 1000)
