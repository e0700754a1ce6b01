"""Scenario 1, front-end overhead: real perf_analyzer 2.51 drives the python-backend `add_sub` on tcli
and on real Triton 2.51 (both serving the same repository at once, measured alternately), batch 1,
concurrency 1, 4 and 8, over HTTP and gRPC. Two rows each: `add_sub` as tcli runs it by default (its
instance in a process of its own, as Triton's stub runs it) and `add_sub_in_server`, the same model
opted in to tcli's server process (Triton runs it in a stub as always). Targets, each with tcli's p99
lower than Triton's: the default path at least 1.0x Triton's throughput (issue 27; its stretch, the
in-server goal, is said in the row's note), the in-server rows 1.3x over HTTP and 2x over gRPC
(issue 15). The decoupled and sequence examples are measured the same way as info rows."""

from __future__ import annotations

from functools import partial

from benchmarks.context import Context, Summary, interleaved, round_ratios, summarize
from benchmarks.harness import Load, Measurement, Server, log, perf_analyzer
from benchmarks.repos import IN_SERVER
from benchmarks.table import Row, ratio

LEVELS = (1, 4, 8)
# tcli/Triton throughput the in-server rows must reach per protocol (issue 15), beside a lower p99
TARGETS = {"http": 1.3, "grpc": 2.0}
# the default path's (issue 27): at least Triton's throughput; the in-server targets are its stretch
DEFAULT_PATH_TARGET = 1.0
# (model, label): add_sub in its own instance process (tcli's default), and in the server process
MODES = (("add_sub", "process"), (IN_SERVER, "in server"))


def target(model: str, protocol: str) -> float:
    """The throughput ratio a row of `model` over `protocol` must reach, beside a lower p99."""
    return TARGETS[protocol] if model == IN_SERVER else DEFAULT_PATH_TARGET


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


def compare(
    ctx: Context, load: Load, triton: Server, tcli: Server
) -> tuple[list[Measurement | None], list[Measurement | None]]:
    """perf_analyzer's runs against Triton and against tcli, alternately."""
    tag = f"{load.model}-{load.protocol}-c{load.concurrency}"
    sides = [
        partial(_pa, ctx, load, triton, f"pa-triton-{tag}"),
        partial(_pa, ctx, load, tcli, f"pa-tcli-{tag}"),
    ]
    theirs, ours = interleaved(sides, ctx.rounds)
    return theirs, ours


def _pa(ctx: Context, load: Load, server: Server, tag: str) -> Measurement | None:
    return perf_analyzer(load, server, ctx.windows, ctx.report(tag))


def _raw(
    theirs_runs: list[Measurement | None], ours_runs: list[Measurement | None]
) -> dict[str, list[float]]:
    return {
        "tcli": [m.throughput for m in ours_runs if m],
        "triton": [m.throughput for m in theirs_runs if m],
    }


def rows(ctx: Context, triton: Server, tcli: Server) -> list[Row]:
    result = []
    for protocol in ("http", "grpc"):
        for level in LEVELS:
            result += [_add_sub_row(ctx, triton, tcli, protocol, level, *mode) for mode in MODES]
    for name, load in () if ctx.quick else INFO_LOADS:
        log(f"front end: {name}")
        theirs_runs, ours_runs = compare(ctx, load, triton, tcli)
        theirs, ours = summarize(theirs_runs), summarize(ours_runs)
        decoupled = load.model == "repeat_int32"
        speed = ratio(_rate(ours, decoupled), _rate(theirs, decoupled))
        result.append(
            Row(
                f"1 {name}",
                cell(ours, decoupled),
                cell(theirs, decoupled),
                speed,
                "info",
                None,
                "ratio of responses/s" if decoupled else "",
                _raw(theirs_runs, ours_runs),
            )
        )
    return result


def verdict(speed: float | None, ours: Summary | None, theirs: Summary | None, target: float) -> bool | None:
    """Throughput at least `target` times Triton's and a strictly lower p99; None when a side failed."""
    if speed is None or ours is None or theirs is None:
        return None
    return speed >= target and ours.p99_us < theirs.p99_us


def _add_sub_row(
    ctx: Context, triton: Server, tcli: Server, protocol: str, level: int, model: str, label: str
) -> Row:
    load = Load(model, protocol, level)
    log(f"front end: {model} {protocol} c={level}")
    theirs_runs, ours_runs = compare(ctx, load, triton, tcli)
    theirs, ours = summarize(theirs_runs), summarize(ours_runs)
    speed = ratio(ours.throughput if ours else None, theirs.throughput if theirs else None)
    goal = target(model, protocol)
    notes = [round_ratios(ours_runs, theirs_runs)]
    passed = verdict(speed, ours, theirs, goal)
    if ours is None or theirs is None:
        notes.append("perf_analyzer failed (see stderr)")
    elif speed is not None and speed >= goal and not passed:
        notes.append("throughput met; p99 not lower")
    if model != IN_SERVER and passed is not None:
        stretch = verdict(speed, ours, theirs, TARGETS[protocol])
        notes.append(f"stretch >= {TARGETS[protocol]:.2f}, p99 <: {'met' if stretch else 'not met'}")
    return Row(
        f"1 add_sub {label} {protocol} c={level}",
        cell(ours),
        cell(theirs),
        speed,
        f">= {goal:.2f}, p99 <",
        passed,
        "; ".join(n for n in notes if n),
        _raw(theirs_runs, ours_runs),
    )
