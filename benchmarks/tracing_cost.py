"""Scenario 9, the cost of tracing: real perf_analyzer drives the python-backend `add_sub` over HTTP at
concurrency 4 on one tcli server, with tracing off and with Triton's trace file at rate 1000 (every
1000th request traced, TIMESTAMPS), switched through the trace settings API between windows and
measured alternately. Target: traced throughput at least 0.97 of untraced.

    .venv/bin/python benchmarks/tracing_cost.py [--quick]    # this scenario alone
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context, interleaved, round_ratios, summarize
from benchmarks.frontend import cell
from benchmarks.harness import Load, Measurement, Server, Windows, log, perf_analyzer, start_tcli
from benchmarks.repos import copy_examples
from benchmarks.table import Row, ratio, render

LOAD = Load("add_sub", "http", 4)
TARGET = 0.97
TRACED = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"}
UNTRACED = {"trace_level": ["OFF"]}


def _set_tracing(server: Server, settings: dict[str, object]) -> None:
    request = urllib.request.Request(
        server.url("/v2/trace/setting"), data=json.dumps(settings).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def _measure(ctx: Context, server: Server, settings: dict[str, object], tag: str) -> Measurement | None:
    _set_tracing(server, settings)
    return perf_analyzer(LOAD, server, ctx.windows, ctx.report(tag))


def rows(ctx: Context) -> list[Row]:
    repo = ctx.workdir / "tracing-repo"
    copy_examples(repo, ("add_sub",))
    trace_file = ctx.workdir / "tracing" / "trace.json"
    trace_file.parent.mkdir(parents=True, exist_ok=True)
    flags = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "triton,log-frequency=100"]
    server = start_tcli([repo], ctx.workdir / "tcli-tracing.log", extra=flags)
    try:
        server.wait()
        log("tracing: add_sub http c=4, off and at rate 1000")
        off_runs, on_runs = interleaved(
            [
                partial(_measure, ctx, server, UNTRACED, "pa-trace-off"),
                partial(_measure, ctx, server, TRACED, "pa-trace-on"),
            ],
            ctx.rounds,
        )
    finally:
        server.stop()
    off, on = summarize(off_runs), summarize(on_runs)
    speed = ratio(on.throughput if on else None, off.throughput if off else None)
    traced = sum(1 for _ in trace_file.parent.glob(trace_file.name + ".*"))
    notes = [round_ratios(on_runs, off_runs), f"{traced} trace files of 100 traces written"]
    return [
        Row(
            "12 add_sub http c=4 traced (rate 1000) vs untraced",
            cell(on),
            cell(off),
            speed,
            f">= {TARGET:.2f}",
            None if speed is None else speed >= TARGET,
            "; ".join(n for n in notes if n),
            {
                "traced": [m.throughput for m in on_runs if m],
                "untraced": [m.throughput for m in off_runs if m],
            },
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short windows, one round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        ctx = Context(
            quick=args.quick,
            workdir=Path(tmp),
            windows=Windows(
                400 if args.quick else 1000, stability_pct=100, max_trials=8 if args.quick else 12
            ),
            rounds=1 if args.quick else 2,
        )
        render(rows(ctx), "tcli benchmark: the cost of tracing")


if __name__ == "__main__":
    main()
