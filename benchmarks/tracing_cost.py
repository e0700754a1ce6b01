"""Scenario 9, the cost of tracing: real perf_analyzer drives the python-backend `add_sub` over HTTP at
concurrency 4 on one tcli server, with tracing off and with Triton's trace file at rate 1000 (every
1000th request traced, TIMESTAMPS), switched through the trace settings API between windows and
measured alternately. Target: traced throughput at least 0.97 of untraced.

With `--before DIR` (a checkout from before tracing, e.g. `git worktree add /tmp/pretrace
04c193e^1`), a second server runs that checkout's tcli on the same repository, measured alternately
with this one untraced: row 12b, the cost of tracing when it is off (target: 0.97-1.03, the same
rate within this machine's noise).

    .venv/bin/python benchmarks/tracing_cost.py [--quick] [--before DIR]    # this scenario alone
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
TRACED: dict[str, object] = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1000"}
UNTRACED: dict[str, object] = {"trace_level": ["OFF"]}


def _set_tracing(server: Server, settings: dict[str, object]) -> None:
    request = urllib.request.Request(
        server.url("/v2/trace/setting"), data=json.dumps(settings).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def _measure(ctx: Context, server: Server, settings: dict[str, object], tag: str) -> Measurement | None:
    _set_tracing(server, settings)
    return perf_analyzer(LOAD, server, ctx.windows, ctx.report(tag))


def rows(ctx: Context, before: Path | None = None) -> list[Row]:
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
    found = [] if before is None else [_against_before(ctx, repo, before)]
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
        ),
        *found,
    ]


OFF_BAND = (0.97, 1.03)


def _server_cpu(now: list[Measurement | None], before: list[Measurement | None]) -> str:
    """The server's CPU per inference on each side, run by run: steadier than the rate on a busy
    machine, where the rate moves with whatever else runs."""

    def side(runs: list[Measurement | None]) -> str:
        return "/".join(f"{m.observed.server_us:.0f}" for m in runs if m and m.observed)

    return f"server CPU µs/inf now {side(now)}, before {side(before)}"


def _against_before(ctx: Context, repo: Path, before: Path) -> Row:
    """This tcli untraced against the checkout `before` (no tracing code), on the same repository."""
    now = start_tcli([repo], ctx.workdir / "tcli-now.log")
    then = start_tcli([repo], ctx.workdir / "tcli-before.log", source=before)
    try:
        now.wait()
        then.wait()
        log(f"tracing: add_sub http c=4, untraced, against {before}")
        now_runs, then_runs = interleaved(
            [
                partial(perf_analyzer, LOAD, now, ctx.windows, ctx.report("pa-now"), watch=True),
                partial(perf_analyzer, LOAD, then, ctx.windows, ctx.report("pa-before"), watch=True),
            ],
            ctx.rounds,
        )
    finally:
        now.stop()
        then.stop()
    current, previous = summarize(now_runs), summarize(then_runs)
    speed = ratio(current.throughput if current else None, previous.throughput if previous else None)
    low, high = OFF_BAND
    return Row(
        f"12b add_sub http c=4 untraced vs before tracing ({before.name})",
        cell(current),
        cell(previous),
        speed,
        f"{low:.2f}-{high:.2f}",
        None if speed is None else low <= speed <= high,
        "; ".join([round_ratios(now_runs, then_runs), _server_cpu(now_runs, then_runs)]),
        {
            "now": [m.throughput for m in now_runs if m],
            "before": [m.throughput for m in then_runs if m],
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short windows, one round")
    parser.add_argument(
        "--before", type=Path, metavar="DIR", help="a checkout from before tracing, measured untraced"
    )
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
        render(rows(ctx, args.before), "tcli benchmark: the cost of tracing")


if __name__ == "__main__":
    main()
