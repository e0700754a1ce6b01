"""perf_analyzer's arithmetic, as pure functions: latency summaries, the stability rule, and the
server-side breakdown from deltas of the statistics extension.

Everything follows `perf_analyzer:src/inference_profiler.cc` and `report_writer.cc` (2.51): integer
nanoseconds, integer microseconds where perf_analyzer truncates, the same percentile index, the same
sample standard deviation, and the same sums when the last three windows are merged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STABILITY_WINDOW = 3  # perf_analyzer's load_parameters_.stability_window
DEFAULT_PERCENTILES = (50, 90, 95, 99)

ModelId = tuple[str, str]  # (name, version); version "" = not specified


# --- client side ----------------------------------------------------------------------------------
def percentile_index(percentile: float, count: int) -> int:
    """The index perf_analyzer reads in the sorted latencies: (p / 100) * (n - 1) + 0.5, truncated."""
    return int((percentile / 100.0) * (count - 1) + 0.5)


def reported_percentiles(percentile: int) -> list[int]:
    """p50, p90, p95 and p99, plus --percentile when it is another one; in increasing order."""
    chosen = set(DEFAULT_PERCENTILES)
    if percentile != -1:
        chosen.add(percentile)
    return sorted(chosen)


def mean_and_std(latencies_ns: Sequence[int]) -> tuple[int, int]:
    """Mean in ns (integer division) and sample standard deviation in whole µs, as perf_analyzer."""
    count = len(latencies_ns)
    if count == 0:
        raise ValueError("no latencies")
    mean = sum(latencies_ns) // count
    if count == 1:
        return mean, 2**64 - 1  # perf_analyzer: UINT64_MAX, "sample standard deviation will be infinity"
    squares = sum((value - mean) * (value - mean) for value in latencies_ns)
    return mean, int(math.sqrt(squares // (count - 1)) / 1000)


@dataclass
class LatencySummary:
    avg_ns: int
    std_us: int
    percentiles_ns: dict[int, int]  # percentile -> latency in ns

    def stabilizing_ns(self, percentile: int) -> int:
        """The latency perf_analyzer stabilises on and prints in its summary: average or pNN."""
        return self.avg_ns if percentile == -1 else self.percentiles_ns[percentile]


def summarize_latencies(sorted_ns: Sequence[int], percentile: int = -1) -> LatencySummary:
    """Average, standard deviation and percentiles of latencies already sorted ascending."""
    avg, std = mean_and_std(sorted_ns)
    count = len(sorted_ns)
    return LatencySummary(
        avg,
        std,
        {p: int(sorted_ns[percentile_index(p, count)]) for p in reported_percentiles(percentile)},
    )


@dataclass
class ClientWindow:
    """What the load generator recorded in one measurement window (or several merged)."""

    duration_ns: int
    latencies_ns: list[int]  # sorted; one per request that ended inside the window
    batch_size: int = 1
    sequence_count: int = 0  # requests inside the window that ended a sequence
    delayed_count: int = 0  # request-rate mode: requests sent late
    completed_count: int = 0  # client library counters (all completed requests, as perf_analyzer)
    request_time_ns: int = 0
    send_time_ns: int = 0
    receive_time_ns: int = 0

    @property
    def request_count(self) -> int:
        return len(self.latencies_ns)

    @property
    def seconds(self) -> float:
        return self.duration_ns / 1e9

    @property
    def infer_per_sec(self) -> float:
        return self.request_count * self.batch_size / self.seconds if self.duration_ns else 0.0

    @property
    def sequence_per_sec(self) -> float:
        return self.sequence_count / self.seconds if self.duration_ns else 0.0

    @property
    def avg_request_time_ns(self) -> int:
        return self.request_time_ns // self.completed_count if self.completed_count else 0

    @property
    def avg_send_time_ns(self) -> int:
        return self.send_time_ns // self.completed_count if self.completed_count else 0

    @property
    def avg_receive_time_ns(self) -> int:
        return self.receive_time_ns // self.completed_count if self.completed_count else 0


def merge_client_windows(windows: Iterable[ClientWindow]) -> ClientWindow:
    """perf_analyzer's MergePerfStatusReports: counts, durations and latencies are summed."""
    windows = list(windows)
    latencies: list[int] = []
    for window in windows:
        latencies.extend(window.latencies_ns)
    latencies.sort()
    return ClientWindow(
        duration_ns=sum(w.duration_ns for w in windows),
        latencies_ns=latencies,
        batch_size=windows[0].batch_size if windows else 1,
        sequence_count=sum(w.sequence_count for w in windows),
        delayed_count=sum(w.delayed_count for w in windows),
        completed_count=sum(w.completed_count for w in windows),
        request_time_ns=sum(w.request_time_ns for w in windows),
        send_time_ns=sum(w.send_time_ns for w in windows),
        receive_time_ns=sum(w.receive_time_ns for w in windows),
    )


# --- the stability rule ---------------------------------------------------------------------------
def within(values: Sequence[float], threshold: float) -> bool:
    """max / min <= 1 + threshold (threshold as a fraction: -s 10 is 0.10)."""
    low, high = min(values), max(values)
    if low <= 0:
        return False
    return high / low <= 1 + threshold


def is_stable(
    infer_per_sec: Sequence[float],
    latencies: Sequence[float],
    threshold: float,
    check_latency: bool = True,
    window: int = STABILITY_WINDOW,
) -> bool:
    """perf_analyzer's DetermineStability: the last `window` measurements all produced requests, and
    their throughput (and, unless told otherwise, their stabilizing latency) agree within the
    threshold (max / min <= 1 + threshold)."""
    if len(infer_per_sec) < window:
        return False
    recent_ips = list(infer_per_sec[-window:])
    if any(value == 0 for value in recent_ips):
        return False
    if not within(recent_ips, threshold):
        return False
    return not check_latency or within(list(latencies[-window:]), threshold)


# --- server side ----------------------------------------------------------------------------------
_DURATIONS = (
    "success",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


@dataclass
class ServerStats:
    """Counters from the statistics extension for one model version, or a delta between two reads."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    cumm_time_ns: int = 0  # success.ns: end-to-end time in the server
    queue_count: int = 0
    queue_time_ns: int = 0
    compute_input_count: int = 0
    compute_input_time_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_time_ns: int = 0
    compute_output_count: int = 0
    compute_output_time_ns: int = 0
    cache_hit_count: int = 0
    cache_hit_time_ns: int = 0
    cache_miss_count: int = 0
    cache_miss_time_ns: int = 0
    composing: dict[ModelId, ServerStats] = field(default_factory=dict)

    _COUNTERS = (
        "inference_count",
        "execution_count",
        "success_count",
        "cumm_time_ns",
        "queue_count",
        "queue_time_ns",
        "compute_input_count",
        "compute_input_time_ns",
        "compute_infer_count",
        "compute_infer_time_ns",
        "compute_output_count",
        "compute_output_time_ns",
        "cache_hit_count",
        "cache_hit_time_ns",
        "cache_miss_count",
        "cache_miss_time_ns",
    )

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> ServerStats:
        """One `model_stats` entry of the statistics extension (HTTP numbers or gRPC strings)."""
        inference = entry.get("inference_stats", {}) or {}

        def duration(name: str) -> tuple[int, int]:
            value = inference.get(name) or {}
            return int(value.get("count", 0) or 0), int(value.get("ns", 0) or 0)

        stats = cls(
            inference_count=int(entry.get("inference_count", 0) or 0),
            execution_count=int(entry.get("execution_count", 0) or 0),
        )
        stats.success_count, stats.cumm_time_ns = duration("success")
        stats.queue_count, stats.queue_time_ns = duration("queue")
        stats.compute_input_count, stats.compute_input_time_ns = duration("compute_input")
        stats.compute_infer_count, stats.compute_infer_time_ns = duration("compute_infer")
        stats.compute_output_count, stats.compute_output_time_ns = duration("compute_output")
        stats.cache_hit_count, stats.cache_hit_time_ns = duration("cache_hit")
        stats.cache_miss_count, stats.cache_miss_time_ns = duration("cache_miss")
        return stats

    def minus(self, start: ServerStats | None) -> ServerStats:
        if start is None:
            return ServerStats(**{name: getattr(self, name) for name in self._COUNTERS})
        return ServerStats(**{name: getattr(self, name) - getattr(start, name) for name in self._COUNTERS})

    @property
    def compute_time_ns(self) -> int:
        return self.compute_input_time_ns + self.compute_infer_time_ns + self.compute_output_time_ns


def parse_statistics(answer: Mapping[str, Any]) -> dict[ModelId, ServerStats]:
    """The statistics extension's answer, keyed by (model name, version)."""
    return {
        (str(entry.get("name", "")), str(entry.get("version", ""))): ServerStats.from_json(entry)
        for entry in answer.get("model_stats", []) or []
    }


def stats_version(
    model: ModelId, start: Mapping[ModelId, ServerStats], end: Mapping[ModelId, ServerStats]
) -> str | None:
    """perf_analyzer's DetermineStatsModelVersion: the given version, or else the highest version of
    the model whose queue count grew during the window. None when there is none."""
    name, version = model
    if version:
        return version if (name, version) in end else None
    grown = [
        int(v)
        for (n, v), stats in end.items()
        if n == name and v.isdigit() and stats.queue_count > (start.get((n, v)) or ServerStats()).queue_count
    ]
    if grown:
        return str(max(grown))
    # nothing ran in the window: use the highest version the server reported, with a zero delta
    present = [int(v) for (n, v) in end if n == name and v.isdigit()]
    return str(max(present)) if present else None


def server_delta(
    model: ModelId,
    start: Mapping[ModelId, ServerStats],
    end: Mapping[ModelId, ServerStats],
    composing: Mapping[str, Sequence[ModelId]] | None = None,
) -> ServerStats:
    """The statistics of `model` between two reads, with its ensemble steps' statistics nested
    (recursively, for ensembles of ensembles). `composing` maps an ensemble's name to its steps."""
    version = stats_version(model, start, end)
    if version is None:
        delta = ServerStats()
    else:
        identity = (model[0], version)
        delta = end[identity].minus(start.get(identity))
    for step in (composing or {}).get(model[0], ()):
        step_version = stats_version(step, start, end) or step[1]
        delta.composing[(step[0], step_version)] = server_delta(
            (step[0], step_version), start, end, composing
        )
    return delta


def merge_server_stats(windows: Sequence[ServerStats]) -> ServerStats:
    """Sum of the windows' deltas, composing models included (MergeServerSideStats)."""
    merged = ServerStats()
    for name in ServerStats._COUNTERS:
        setattr(merged, name, sum(getattr(w, name) for w in windows))
    if windows:
        for identity in windows[0].composing:
            merged.composing[identity] = merge_server_stats(
                [w.composing.get(identity, ServerStats()) for w in windows]
            )
    return merged


def average_us(total_ns: int, count: int) -> int:
    """AverageDurationInUs: total / (count * 1000), truncated; 0 when nothing was counted."""
    return total_ns // (count * 1000) if count else 0


@dataclass
class ServerBreakdown:
    """The `Avg request latency` line of the Server block, in whole microseconds."""

    request_us: int
    overhead_us: int
    queue_us: int
    compute_input_us: int = 0
    compute_infer_us: int = 0
    compute_output_us: int = 0
    compute_us: int = 0  # ensembles: the sum over composing models


def _ensemble_totals(stats: ServerStats) -> tuple[int, int]:
    """GetTotalEnsembleDurations: per-step average queue and compute, summed over the steps."""
    queue_us = compute_us = 0
    for step in stats.composing.values():
        if step.composing:
            step_queue, step_compute = _ensemble_totals(step)
        else:
            step_queue = average_us(step.queue_time_ns, step.queue_count)
            step_compute = average_us(step.compute_time_ns, step.compute_input_count)
        queue_us += step_queue
        compute_us += step_compute
    return queue_us, compute_us


def server_breakdown(stats: ServerStats) -> ServerBreakdown:
    """Average request latency split into overhead, queue and compute, as perf_analyzer prints it."""
    request_us = average_us(stats.cumm_time_ns, stats.success_count)
    if stats.composing:
        queue_us, compute_us = _ensemble_totals(stats)
        overhead = max(request_us - queue_us - compute_us, 0)
        return ServerBreakdown(request_us, overhead, queue_us, compute_us=compute_us)
    queue_us = average_us(stats.queue_time_ns, stats.queue_count)
    compute_us = average_us(stats.compute_time_ns, stats.compute_input_count)
    return ServerBreakdown(
        request_us,
        max(request_us - queue_us - compute_us, 0),
        queue_us,
        compute_input_us=average_us(stats.compute_input_time_ns, stats.compute_input_count),
        compute_infer_us=average_us(stats.compute_infer_time_ns, stats.compute_infer_count),
        compute_output_us=average_us(stats.compute_output_time_ns, stats.compute_output_count),
        compute_us=compute_us,
    )


def _avg_ns(total: int, count: int) -> int:
    return total // count if count else 0


@dataclass
class CsvServerColumns:
    """The server columns of one CSV row (report_writer.cc), in µs."""

    network_misc_us: int
    queue_us: int
    compute_input_us: int
    compute_infer_us: int
    compute_output_us: int
    cache_hit_us: int = 0
    cache_miss_us: int = 0


def csv_server_columns(stats: ServerStats, client: ClientWindow, avg_latency_ns: int) -> CsvServerColumns:
    """Network+Server Send/Recv is the client's wait (latency − send − receive) less the server's
    queue and compute; it is capped at 0 because it subtracts measurements taken on both sides."""
    queue = _avg_ns(stats.queue_time_ns, stats.queue_count)
    compute = _avg_ns(stats.compute_time_ns, stats.compute_input_count)
    cache_hit = _avg_ns(stats.cache_hit_time_ns, stats.cache_hit_count)
    cache_miss = _avg_ns(stats.cache_miss_time_ns, stats.cache_miss_count)
    wait = avg_latency_ns - client.avg_send_time_ns - client.avg_receive_time_ns
    accounted = queue + compute + cache_hit + cache_miss
    return CsvServerColumns(
        network_misc_us=max(wait - accounted, 0) // 1000,
        queue_us=queue // 1000,
        compute_input_us=_avg_ns(stats.compute_input_time_ns, stats.compute_input_count) // 1000,
        compute_infer_us=_avg_ns(stats.compute_infer_time_ns, stats.compute_infer_count) // 1000,
        compute_output_us=_avg_ns(stats.compute_output_time_ns, stats.compute_output_count) // 1000,
        cache_hit_us=cache_hit // 1000,
        cache_miss_us=cache_miss // 1000,
    )


def composing_csv_columns(stats: ServerStats) -> CsvServerColumns:
    """A composing model's row in `<name>_v<version>.<file>.csv`: the overhead column holds the
    server time not spent in queue or compute."""
    queue = _avg_ns(stats.queue_time_ns, stats.queue_count)
    compute = _avg_ns(stats.compute_time_ns, stats.compute_input_count)
    cache_hit = _avg_ns(stats.cache_hit_time_ns, stats.cache_hit_count)
    cache_miss = _avg_ns(stats.cache_miss_time_ns, stats.cache_miss_count)
    overhead = _avg_ns(stats.cumm_time_ns, stats.success_count)
    return CsvServerColumns(
        network_misc_us=max(overhead - (queue + compute + cache_hit + cache_miss), 0) // 1000,
        queue_us=queue // 1000,
        compute_input_us=_avg_ns(stats.compute_input_time_ns, stats.compute_input_count) // 1000,
        compute_infer_us=_avg_ns(stats.compute_infer_time_ns, stats.compute_infer_count) // 1000,
        compute_output_us=_avg_ns(stats.compute_output_time_ns, stats.compute_output_count) // 1000,
        cache_hit_us=cache_hit // 1000,
        cache_miss_us=cache_miss // 1000,
    )


def cpp_double(value: float) -> str:
    """A double as C++'s default ostream prints it (6 significant digits): 2192.26, 199.819, 200."""
    if value != value or value in (math.inf, -math.inf):
        return {True: "inf", False: "-inf"}[value > 0] if value == value else "nan"
    return format(value, ".6g")
