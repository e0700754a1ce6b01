"""The figures of one concurrency level from its requests' timings, defined as AIPerf defines them:

- time to first token: from sending the request to the first response with text;
- request latency: from sending to the last response (the final flag, or `[DONE]`);
- inter-token latency, per request: (request latency - time to first token) / (output tokens - 1);
- output token throughput: all output tokens / the level's duration (first send to last response);
  per user: 1 / inter-token latency, per request;
- request throughput: requests / the level's duration.

Each per-request figure is summarised as avg, min, max, p50, p90, p99 and std."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tcli.perf.llm.clients import RequestRecord

STATS = ("avg", "min", "max", "p50", "p90", "p99", "std")
# (tag, title, unit) in the order the report shows them; the tags are AIPerf's
DISTRIBUTIONS = (
    ("time_to_first_token", "Time to First Token", "ms"),
    ("inter_token_latency", "Inter Token Latency", "ms"),
    ("request_latency", "Request Latency", "ms"),
    ("output_token_throughput_per_user", "Output Token Throughput Per User", "tokens/sec/user"),
    ("output_sequence_length", "Output Sequence Length", "tokens"),
    ("input_sequence_length", "Input Sequence Length", "tokens"),
)
TOTALS = (
    ("output_token_throughput", "Output Token Throughput", "tokens/sec"),
    ("request_throughput", "Request Throughput", "requests/sec"),
    ("request_count", "Request Count", "requests"),
    ("error_request_count", "Error Request Count", "requests"),
)


@dataclass
class LevelMetrics:
    concurrency: int
    distributions: dict[str, dict[str, float]] = field(default_factory=dict)
    totals: dict[str, float] = field(default_factory=dict)
    first_error: str = ""

    def value(self, tag: str, stat: str = "avg") -> float:
        if tag in self.totals:
            return self.totals[tag]
        return self.distributions.get(tag, {}).get(stat, float("nan"))


def summarise(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    array = np.asarray(values, dtype=np.float64)
    return {
        "avg": float(array.mean()),
        "min": float(array.min()),
        "max": float(array.max()),
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
        "p99": float(np.percentile(array, 99)),
        "std": float(array.std()),
    }


def level_metrics(concurrency: int, records: Sequence[RequestRecord]) -> LevelMetrics:
    good = [r for r in records if not r.error]
    failed = [r for r in records if r.error]
    result = LevelMetrics(concurrency)
    if failed:
        result.first_error = failed[0].error
    ms = 1e-6
    # an answer without text (end of sequence at once) counts, but has no first token
    texts = [r for r in good if r.token_ns]
    ttft = [(r.token_ns[0] - r.start_ns) * ms for r in texts]
    latency = [(r.end_ns - r.start_ns) * ms for r in good]
    itl = [
        ((r.end_ns - r.start_ns) * ms - first) / (r.output_tokens - 1)
        for r, first in zip(texts, ttft, strict=True)
        if r.output_tokens > 1
    ]
    result.distributions = {
        "time_to_first_token": summarise(ttft),
        "inter_token_latency": summarise(itl),
        "request_latency": summarise(latency),
        "output_token_throughput_per_user": summarise([1000.0 / v for v in itl if v > 0]),
        "output_sequence_length": summarise([r.output_tokens for r in good]),
        "input_sequence_length": summarise([r.input_tokens for r in good]),
    }
    duration_s = 0.0
    if good:
        duration_s = (max(r.end_ns for r in good) - min(r.start_ns for r in good)) / 1e9
    tokens = sum(r.output_tokens for r in good)
    result.totals = {
        "output_token_throughput": tokens / duration_s if duration_s > 0 else 0.0,
        "request_throughput": len(good) / duration_s if duration_s > 0 else 0.0,
        "request_count": float(len(good)),
        "error_request_count": float(len(failed)),
    }
    return result
