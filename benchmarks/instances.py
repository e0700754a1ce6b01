"""Scenario 3, parallel instances use the cores: the same model with `instance_group [{count: 2}]`
against `count: 1`, both loaded in one tcli server, real perf_analyzer at concurrency 4, measured
alternately. (a) a CPU-bound pure-Python model (a ~2 ms loop per request, which holds the GIL);
real Triton serves the same two models, measured alternately with tcli's, and tcli's ratio must
reach Triton's own (issue 15; n/a in --quick, which runs no Triton for it). (b) DenseNet on
onnxruntime with intra_op_thread_count 1 per instance: at least 1.7."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from benchmarks.context import Context, Summary, interleaved, summarize
from benchmarks.harness import Load, Measurement, Server, Windows, log, perf_analyzer
from benchmarks.repos import OnnxServing, cpu_loop_model, loops_for, onnx_model
from benchmarks.table import Row, at_least, ratio

ONNX_TARGET = 1.7  # 3b; 3a's target is real Triton's own ratio
CONCURRENCY = 4
LOOP_MS = 2.0

Measure = Callable[[], Measurement | None]


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


def _runs(ctx: Context, server: Server, models: tuple[str, ...], windows: Windows) -> list[Measure]:
    """One perf_analyzer run per model on `server`, each a side for `interleaved`."""

    def side(model: str) -> Measure:
        load = Load(model, "http", CONCURRENCY)
        return lambda: perf_analyzer(load, server, windows, ctx.report(f"{server.name}-{model}"))

    return [side(model) for model in models]


def _scaling(
    ctx: Context, server: Server, models: tuple[str, str], windows: Windows
) -> tuple[Summary | None, ...]:
    one, two = interleaved(_runs(ctx, server, models, windows), ctx.rounds)
    return summarize(one), summarize(two)


def _ratio(one: Summary | None, two: Summary | None) -> float | None:
    return ratio(two.throughput if two else None, one.throughput if one else None)


def _cell(one: Summary | None, two: Summary | None, digits: int = 0) -> str:
    if one is None or two is None:
        return "n/a"
    return f"{two.throughput:,.{digits}f} vs {one.throughput:,.{digits}f}/s"


def python_passed(ours: float | None, triton: float | None) -> bool | None:
    """3a's verdict: tcli's count-2/count-1 ratio at least real Triton's from the same run; None
    (n/a) when either is missing, e.g. --quick, which runs no Triton for this row."""
    return None if ours is None or triton is None else ours >= triton


def python_row(ctx: Context, tcli: Server, triton: Server | None, note: str) -> Row:
    """tcli's scaling against real Triton's on the same two models, all four measured alternately in
    one loop (tcli 1, tcli 2, Triton 1, Triton 2, then the reverse); tcli alone when `triton` is None
    (--quick), and the row is n/a."""
    log("instances: cpu_loop count 2 vs count 1" + (" on tcli and on Triton" if triton else ""))
    models = ("cpu_loop_1", "cpu_loop_2")
    sides = _runs(ctx, tcli, models, ctx.windows)
    if triton is not None:
        sides += _runs(ctx, triton, models, ctx.windows)
    runs = [summarize(side) for side in interleaved(sides, ctx.rounds)]
    scale = _ratio(runs[0], runs[1])
    reference_text, reference, target = "— (--quick: no Triton)", None, ">= Triton's"
    if triton is not None:
        reference = _ratio(runs[2], runs[3])
        reference_text = _cell(runs[2], runs[3]) + ("" if reference is None else f" ({reference:.2f}x)")
        target = ">= Triton's" + ("" if reference is None else f" {reference:.2f}")
    return Row(
        f"3a python CPU-bound count 2 vs 1, c={CONCURRENCY}",
        _cell(runs[0], runs[1]),
        reference_text,
        scale,
        target,
        python_passed(scale, reference),
        f"{note}; ratio: tcli count 2 / count 1; target: real Triton's own ratio, same run",
    )


def onnx_row(ctx: Context, tcli: Server) -> Row:
    log("instances: densenet count 2 vs count 1 (intra_op_thread_count 1)")
    windows = replace(ctx.windows, interval_ms=ctx.pick(2000, 1000))
    one, two = _scaling(ctx, tcli, ("densenet_x1", "densenet_x2"), windows)
    scale = _ratio(one, two)
    return Row(
        f"3b densenet_onnx count 2 vs 1, c={CONCURRENCY}",
        _cell(one, two, 1),
        "—",
        scale,
        f">= {ONNX_TARGET:.2f}",
        at_least(scale, ONNX_TARGET),
        "intra_op_thread_count 1 per instance, no batching; ratio: count 2 / count 1",
    )
