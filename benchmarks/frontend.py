"""Scenario 1, front-end overhead: real perf_analyzer 2.51 drives the python-backend `add_sub` on tcli
and on real Triton 2.51 (both serving the same repository at once, measured alternately), batch 1,
concurrency 1, 4 and 8, over HTTP and gRPC. Target: tcli's throughput at least Triton's and its p99
no worse. The decoupled and sequence examples are measured the same way as info rows."""

from __future__ import annotations

from benchmarks.context import Context, Summary, interleaved, summarize
from benchmarks.harness import Load, Server, log, perf_analyzer
from benchmarks.table import Row, ratio

LEVELS = (1, 4, 8)
INFO_LOADS = (
    (
        "decoupled repeat_int32 grpc stream c=4",
        Load(
            "repeat_int32",
            "grpc",
            4,
            ("--streaming", "--shape", "IN:4", "--shape", "DELAY:4", "--input-data", "zero"),
        ),
    ),
    (
        "sequence simple_dyna_sequence grpc c=4",
        Load("simple_dyna_sequence", "grpc", 4, ("--sequence-length", "20")),
    ),
)


def cell(summary: Summary | None, responses: bool = False) -> str:
    if summary is None:
        return "n/a"
    if responses and summary.responses is not None:
        return f"{summary.responses:,.0f} resp/s · p99 {summary.p99_us:,.0f} µs"
    return f"{summary.throughput:,.0f}/s · p99 {summary.p99_us:,.0f} µs"


def _rate(summary: Summary | None, responses: bool) -> float | None:
    if summary is None:
        return None
    return summary.responses if responses and summary.responses is not None else summary.throughput


def compare(ctx: Context, load: Load, triton: Server, tcli: Server) -> tuple[Summary | None, Summary | None]:
    tag = f"{load.model}-{load.protocol}-c{load.concurrency}"
    sides = [
        lambda: perf_analyzer(load, triton, ctx.windows, ctx.report(f"pa-triton-{tag}")),
        lambda: perf_analyzer(load, tcli, ctx.windows, ctx.report(f"pa-tcli-{tag}")),
    ]
    theirs, ours = interleaved(sides, ctx.rounds)
    return summarize(theirs), summarize(ours)


def rows(ctx: Context, triton: Server, tcli: Server) -> list[Row]:
    result = []
    for protocol in ("http", "grpc"):
        for level in LEVELS:
            load = Load("add_sub", protocol, level)
            log(f"front end: add_sub {protocol} c={level}")
            theirs, ours = compare(ctx, load, triton, tcli)
            speed = ratio(ours.throughput if ours else None, theirs.throughput if theirs else None)
            passed = None
            if speed is not None and ours and theirs:
                passed = speed >= 1.0 and ours.p99_us <= theirs.p99_us
            note = "" if ours and theirs else "perf_analyzer could not stabilise (see stderr)"
            if ours and theirs and not passed and speed is not None and speed >= 1.0:
                note = "throughput met; p99 higher"
            result.append(
                Row(
                    f"1 add_sub {protocol} c={level}",
                    cell(ours),
                    cell(theirs),
                    speed,
                    ">= 1.00, p99 <=",
                    passed,
                    note,
                )
            )
    for name, load in INFO_LOADS:
        log(f"front end: {name}")
        theirs, ours = compare(ctx, load, triton, tcli)
        decoupled = load.model == "repeat_int32"
        speed = ratio(_rate(ours, decoupled), _rate(theirs, decoupled))
        result.append(Row(f"1 {name}", cell(ours, decoupled), cell(theirs, decoupled), speed, "info", None))
    return result
