"""Per model-version counters and durations: the statistics extension and the Prometheus metrics read
them. Updated from instance worker threads under one lock per model version."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from server.protocol.messages import InferBatchStatistics, InferStatistics, ModelStatistics, StatisticDuration
from server.scheduling.latency_summary import LatencySummaries


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def snapshot(self) -> StatisticDuration:
        return StatisticDuration(self.count, self.ns)


@dataclass
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    """Triton's InferStatistics for one model version, plus what Prometheus needs."""

    name: str
    version: str
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(
        default_factory=Duration
    )  # the response cache (server/scheduling/response_cache.py)
    cache_miss: Duration = field(default_factory=Duration)
    inference_count: int = 0  # rows inferred (a batch-8 request counts 8)
    execution_count: int = 0  # model executions (a batch of requests counts 1)
    last_inference_ms: int = 0
    batches: dict[int, BatchStats] = field(default_factory=dict)
    failures: dict[str, int] = field(
        default_factory=dict
    )  # reason -> count, for nv_inference_request_failure
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # --metrics-config summary_latencies=true: each success observed (server/scheduling/latency_summary.py)
    summaries: LatencySummaries | None = field(default=None, repr=False)

    def record_execution(self, batch_rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        with self._lock:
            self.execution_count += 1
            stats = self.batches.get(batch_rows)
            if stats is None:
                stats = self.batches[batch_rows] = BatchStats()
            stats.compute_input.add(input_ns)
            stats.compute_infer.add(infer_ns)
            stats.compute_output.add(output_ns)

    def record_success(
        self, rows: int, total_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        with self._lock:
            self.success.add(total_ns)
            self.queue.add(queue_ns)
            self.compute_input.add(input_ns)
            self.compute_infer.add(infer_ns)
            self.compute_output.add(output_ns)
            self.inference_count += rows
            self.last_inference_ms = int(time.time() * 1000)
        if self.summaries is not None:
            self.summaries.observe(total_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_cache_hit(self, total_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success and a queue entry of no time, as in
        Triton, but no inference, execution or compute time."""
        with self._lock:
            self.success.add(total_ns)
            self.queue.add(0)
            self.cache_hit.add(lookup_ns)
            self.last_inference_ms = int(time.time() * 1000)

    def record_cache_miss(self, ns: int) -> None:
        """A request the response cache did not hold, answered by the model: its lookup and insert."""
        with self._lock:
            self.cache_miss.add(ns)

    def record_failure(self, total_ns: int, reason: str = "OTHER") -> None:
        with self._lock:
            self.fail.add(total_ns)
            self.failures[reason] = self.failures.get(reason, 0) + 1
            self.last_inference_ms = int(time.time() * 1000)

    def statistics(self) -> ModelStatistics:
        """Triton's ModelStatistics of this version, as they stand now."""
        with self._lock:
            return ModelStatistics(
                name=self.name,
                version=self.version,
                last_inference=self.last_inference_ms,
                inference_count=self.inference_count,
                execution_count=self.execution_count,
                inference_stats=InferStatistics(
                    success=self.success.snapshot(),
                    fail=self.fail.snapshot(),
                    queue=self.queue.snapshot(),
                    compute_input=self.compute_input.snapshot(),
                    compute_infer=self.compute_infer.snapshot(),
                    compute_output=self.compute_output.snapshot(),
                    cache_hit=self.cache_hit.snapshot(),
                    cache_miss=self.cache_miss.snapshot(),
                ),
                batch_stats=[
                    InferBatchStatistics(
                        batch_size=size,
                        compute_input=stats.compute_input.snapshot(),
                        compute_infer=stats.compute_infer.snapshot(),
                        compute_output=stats.compute_output.snapshot(),
                    )
                    for size, stats in sorted(self.batches.items())
                ],
            )

    def as_dict(self) -> dict[str, Any]:
        """Triton's model statistics JSON for this version."""
        return asdict(self.statistics())
