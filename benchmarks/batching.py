"""Scenario 2a, batching reaches the backend's limit: the onnxruntime ceiling (in this process, best of
batch size x intra-op threads x parallel sessions) against tcli serving the same graph with dynamic
batching under real perf_analyzer at a fixed concurrency. tcli gets the configuration the ceiling
found best (instances = sessions, intra_op_thread_count = threads, max_batch_size = batch), so the
row measures what the server adds, not a different choice of knobs. (digits_onnx, whose ceiling no
server answering one image per request can approach, is measured against add_sub instead:
digits_batching.py.)"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from benchmarks import ceiling
from benchmarks.context import Context, interleaved
from benchmarks.harness import Load, Server, Windows, log, perf_analyzer
from benchmarks.repos import EXAMPLES, OnnxServing, batchable_onnx, onnx_model
from benchmarks.table import Row, at_least, ratio

TARGET = 0.90


@dataclass(frozen=True)
class Case:
    example: str
    concurrency: int
    batches: tuple[int, ...]
    seconds: float  # per ceiling configuration (default run)
    interval_ms: int  # perf_analyzer window (default run)

    @property
    def served_as(self) -> str:
        return f"{self.example.removesuffix('_onnx')}_batched"


CASES = (Case("densenet_onnx", 8, (1, 2, 4, 8), 1.5, 2000),)


@dataclass
class Prepared:
    case: Case
    model: bytes
    found: ceiling.CeilingResult
    serving: OnnxServing


def prepare(ctx: Context, repo: Path) -> list[Prepared]:
    """Search each ceiling (before any server runs) and write tcli's model for it into `repo`."""
    prepared = []
    for case in CASES:
        log(f"batching: onnxruntime ceiling search for {case.example} (batch <= {case.concurrency})")
        model = batchable_onnx(EXAMPLES / case.example / "1" / "model.onnx")
        seconds = ctx.pick(case.seconds, case.seconds / 4)
        found = ceiling.search(model, case.batches, seconds, max_threads=ctx.pick(None, os.cpu_count()))
        best = found.best
        serving = OnnxServing(best.batch, best.sessions, best.threads, dynamic_batching=True)
        onnx_model(repo, case.example, case.served_as, serving)
        log(f"batching: {case.example} ceiling {found.throughput:,.1f}/s with {best.describe()}")
        prepared.append(Prepared(case, model, found, serving))
    return prepared


def _tcli_side(ctx: Context, tcli: Server, load: Load, windows: Windows) -> float | None:
    measured = perf_analyzer(load, tcli, windows, ctx.report(load.model))
    return measured.throughput if measured else None


def rows(ctx: Context, tcli: Server, prepared: list[Prepared]) -> list[Row]:
    result = []
    for item in prepared:
        case, best = item.case, item.found.best
        windows = replace(ctx.windows, interval_ms=ctx.pick(case.interval_ms, case.interval_ms // 2))
        load = Load(case.served_as, "http", case.concurrency)
        log(f"batching: tcli {case.served_as} c={case.concurrency}, then the ceiling's best again")
        seconds = ctx.pick(case.seconds, case.seconds / 3) * 2

        # tcli and the ceiling's best configuration alternately, so both see the same machine
        sides: list[Callable[[], float | None]] = [
            partial(_tcli_side, ctx, tcli, load, windows),
            partial(ceiling.remeasure, item.model, best, seconds),
        ]
        ours_runs, again_runs = interleaved(sides, ctx.rounds)
        done = [value for value in ours_runs if value is not None]
        ours = statistics.median(done) if done else None
        again = [value for value in again_runs if value is not None]
        # the search's own figure is the best of many noisy ones; the ceiling is the best
        # configuration measured again, alternately with tcli, so both saw the same machine
        limit = statistics.median(again)
        speed = ratio(ours, limit)
        note = (
            f"ceiling: {best.describe()} (best of {len(item.found.tried)} searched, re-measured between "
            f"tcli's runs); tcli config: {item.serving.describe()}"
        )
        result.append(
            Row(
                f"2a {case.example} dynamic batching c={case.concurrency}",
                f"{ours:,.1f}/s" if ours else "n/a",
                f"{limit:,.1f}/s (onnxruntime)",
                speed,
                f">= {TARGET:.2f}",
                at_least(speed, TARGET),
                note,
            )
        )
    return result
