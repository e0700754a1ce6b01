"""tcli perf's language-model figures from requests' timings, as AIPerf defines them: time to first
token, inter-token latency = (request latency - TTFT) / (output tokens - 1), throughputs over the
level's duration; failed requests counted apart, an answer without text counted without a TTFT."""

from __future__ import annotations

import pytest

from tcli.perf.llm.clients import RequestRecord
from tcli.perf.llm.metrics import level_metrics

MS = 1_000_000  # ns


def record(
    start_ms: float, token_ms: list[float], end_ms: float, tokens: int, error: str = ""
) -> RequestRecord:
    made = RequestRecord(int(start_ms * MS), input_tokens=10, error=error)
    made.token_ns = [int(t * MS) for t in token_ms]
    made.chunks = ["x"] * len(token_ms)
    made.end_ns = int(end_ms * MS)
    made.output_tokens = tokens
    return made


def test_figures_follow_aiperfs_definitions() -> None:
    records = [
        record(0, [100, 110, 120, 130, 140], 150, 5),  # TTFT 100, latency 150, ITL (150-100)/4
        record(0, [200, 220, 240], 260, 3),  # TTFT 200, latency 260, ITL (260-200)/2
    ]
    level = level_metrics(2, records)
    assert level.distributions["time_to_first_token"]["avg"] == pytest.approx(150)
    assert level.distributions["inter_token_latency"]["min"] == pytest.approx(12.5)
    assert level.distributions["inter_token_latency"]["max"] == pytest.approx(30)
    assert level.distributions["request_latency"]["max"] == pytest.approx(260)
    assert level.distributions["output_sequence_length"]["avg"] == pytest.approx(4)
    # 8 tokens and 2 requests over the level's 260 ms
    assert level.totals["output_token_throughput"] == pytest.approx(8 / 0.26)
    assert level.totals["request_throughput"] == pytest.approx(2 / 0.26)
    assert level.distributions["output_token_throughput_per_user"]["max"] == pytest.approx(1000 / 12.5)


def test_failures_are_counted_apart_and_an_empty_answer_is_not_one() -> None:
    records = [
        record(0, [10, 20], 30, 2),
        record(0, [], 5, 0),  # the model ended at once: a request served, no first token
        record(0, [], 1, 0, error="HTTP 500: boom"),
    ]
    level = level_metrics(1, records)
    assert level.totals["request_count"] == 2 and level.totals["error_request_count"] == 1
    assert level.first_error == "HTTP 500: boom"
    assert level.distributions["time_to_first_token"]["max"] == pytest.approx(10)
