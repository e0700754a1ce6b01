"""Scenario 3, parallel instances use the cores: the same model with `instance_group [{count: 2}]`
against `count: 1`, both loaded in one tcli server, real perf_analyzer at concurrency 4, measured
alternately. (a) a CPU-bound pure-Python model (a ~2 ms loop per request, which holds the GIL);
real Triton serves the same two models and its own ratio is shown for reference. (b) DenseNet on
onnxruntime with intra_op_thread_count 1 per instance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from benchmarks.context import Context, Summary, interleaved, summarize
from benchmarks.harness import Load, Server, Windows, log, perf_analyzer
from benchmarks.repos import OnnxServing, cpu_loop_model, loops_for, onnx_model
from benchmarks.table import Row, at_least, ratio

TARGET = 1.7
CONCURRENCY = 4
LOOP_MS = 2.0


def add_python_models(repo: Path) -> str:
    """cpu_loop_1 and cpu_loop_2 (1 and 2 instances) into `repo`; returns a note on the loop."""
    loops = loops_for(LOOP_MS)
    for count in (1, 2):
        cpu_loop_model(repo, f"cpu_loop_{count}", loops, LOOP_MS, count)
    return f"{loops:,} pure-Python additions per request (~{LOOP_MS:.0f} ms here)"


def add_onnx_models(repo: Path) -> None:
    for count in (1, 2):
        onnx_model(
            repo, "densenet_onnx", f"densenet_x{count}", OnnxServing(instances=count, intra_op_threads=1)
        )


def _scaling(
    ctx: Context, server: Server, models: tuple[str, str], windows: Windows
) -> tuple[Summary | None, ...]:
    one, two = (Load(model, "http", CONCURRENCY) for model in models)
    runs = interleaved(
        [
            lambda: perf_analyzer(one, server, windows, ctx.report(f"{server.name}-{one.model}")),
            lambda: perf_analyzer(two, server, windows, ctx.report(f"{server.name}-{two.model}")),
        ],
        ctx.rounds,
    )
    return summarize(runs[0]), summarize(runs[1])


def _cell(one: Summary | None, two: Summary | None, digits: int = 0) -> str:
    if one is None or two is None:
        return "n/a"
    return f"{two.throughput:,.{digits}f} vs {one.throughput:,.{digits}f}/s"


def python_row(ctx: Context, tcli: Server, triton: Server | None, note: str) -> Row:
    """tcli's scaling, and real Triton's on the same two models unless `triton` is None (--quick)."""
    log("instances: cpu_loop count 2 vs count 1" + (" on tcli and on Triton" if triton else ""))
    models = ("cpu_loop_1", "cpu_loop_2")
    ours = _scaling(ctx, tcli, models, ctx.windows)
    scale = ratio(ours[1].throughput if ours[1] else None, ours[0].throughput if ours[0] else None)
    reference_text = "— (--quick)"
    if triton is not None:
        theirs = _scaling(ctx, triton, models, ctx.windows)
        reference = ratio(
            theirs[1].throughput if theirs[1] else None, theirs[0].throughput if theirs[0] else None
        )
        reference_text = _cell(theirs[0], theirs[1]) + ("" if reference is None else f" ({reference:.2f}x)")
    return Row(
        f"3a python CPU-bound count 2 vs 1, c={CONCURRENCY}",
        _cell(ours[0], ours[1]),
        reference_text,
        scale,
        f">= {TARGET:.2f}",
        at_least(scale, TARGET),
        f"{note}; ratio: tcli count 2 / count 1; reference: real Triton's own",
    )


def onnx_row(ctx: Context, tcli: Server) -> Row:
    log("instances: densenet count 2 vs count 1 (intra_op_thread_count 1)")
    windows = replace(ctx.windows, interval_ms=ctx.pick(2000, 1000))
    one, two = _scaling(ctx, tcli, ("densenet_x1", "densenet_x2"), windows)
    scale = ratio(two.throughput if two else None, one.throughput if one else None)
    return Row(
        f"3b densenet_onnx count 2 vs 1, c={CONCURRENCY}",
        _cell(one, two, 1),
        "—",
        scale,
        f">= {TARGET:.2f}",
        at_least(scale, TARGET),
        "intra_op_thread_count 1 per instance, no batching; ratio: count 2 / count 1",
    )
