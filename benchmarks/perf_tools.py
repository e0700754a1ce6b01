"""Scenario 5 (issue 5), `tcli perf` against real perf_analyzer 2.51: the same server and model
(`add_sub`), the same measurement settings (window, stability percentage, max trials, average
latency for stability), concurrency 1, 4 and 8 over HTTP and gRPC, the two tools run alternately.
Target: tcli perf's throughput within 0.90-1.10 of perf_analyzer's."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from benchmarks.context import Context, Summary, interleaved, round_ratios, summarize
from benchmarks.harness import Load, Server, log, perf_analyzer, tcli_perf
from benchmarks.table import Row, ratio

LEVELS = (1, 4, 8)
LOW, HIGH = 0.90, 1.10


def _cell(summary: Summary | None) -> str:
    if summary is None:
        return "n/a"
    return f"{summary.throughput:,.0f}/s · p50 {summary.p50_us:,.0f} µs"


def rows(ctx: Context, server: Server, setup: str, client_cpus: Sequence[int] | None) -> list[Row]:
    result = []
    for protocol in ("http", "grpc"):
        for level in LEVELS:
            load = Load("add_sub", protocol, level)
            log(f"tcli perf vs perf_analyzer: {protocol} c={level} ({setup})")
            tag = f"{server.name}-{protocol}-c{level}"
            pa_runs, ours_runs = interleaved(
                [
                    partial(perf_analyzer, load, server, ctx.windows, ctx.report(f"pa-{tag}"), client_cpus),
                    partial(tcli_perf, load, server, ctx.windows, ctx.report(f"tp-{tag}"), client_cpus),
                ],
                ctx.rounds,
            )
            pa, ours = summarize(pa_runs), summarize(ours_runs)
            agreement = ratio(ours.throughput if ours else None, pa.throughput if pa else None)
            result.append(
                Row(
                    f"5 tcli perf / perf_analyzer {protocol} c={level}",
                    _cell(ours),
                    _cell(pa),
                    agreement,
                    f"{LOW:.2f}-{HIGH:.2f}",
                    None if agreement is None else LOW <= agreement <= HIGH,
                    "; ".join(n for n in (setup, round_ratios(ours_runs, pa_runs)) if n),
                    {
                        "tcli perf": [m.throughput for m in ours_runs if m],
                        "perf_analyzer": [m.throughput for m in pa_runs if m],
                    },
                )
            )
    return result
