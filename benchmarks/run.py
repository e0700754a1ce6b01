"""tcli against real Triton 2.51 and against onnxruntime's own limit, in one command (issues 5 and 6).

    .venv/bin/python benchmarks/run.py                 # every scenario, under 10 minutes
    .venv/bin/python benchmarks/run.py --quick         # shorter windows, one round, under 2 minutes
    .venv/bin/python benchmarks/run.py --only frontend,perf --json results.json

Installs the reference (../shared/reference/setup-triton.sh) when it is missing, starts each
server, runs each scenario and prints one table: scenario, tcli, reference, ratio, target, result.
Every ratio is taken in the same run on the same machine; the two sides of a comparison are
measured alternately (A B, then B A) so that the machine's drift falls on both.

Scenarios (--only names in brackets; benchmarks/NOTES.md says what each measures and how):
  1 [frontend]  python-backend add_sub under real perf_analyzer, tcli vs real Triton, batch 1,
                concurrency 1/4/8 over HTTP and gRPC, add_sub in its own process (tcli's default):
                throughput ratio >= 1.00 and a lower p99 (issue 27; the note says whether the
                in-server targets, its stretch, are met too); and in the server process: >= 1.30
                over HTTP and >= 2.00 over gRPC, and a lower p99 (issue 15); decoupled repeat_int32
                and sequence simple_dyna_sequence as info rows.
  2 [batching]  (a) densenet_onnx at concurrency 8 with dynamic batching, against onnxruntime
                in-process in its best batch/threads/sessions: >= 0.90. (b) digits_onnx with
                dynamic batching, one image per request at concurrency 16, against tcli's own
                add_sub at 16 on the same server: >= 0.90 with a mean executed batch size > 1
                (inference_count / execution_count from the server's statistics).
  3 [instances] count 2 vs count 1 at concurrency 4: (a) a ~2 ms pure-Python loop model, tcli's
                ratio >= real Triton's own in the same run (n/a in --quick: no Triton for it);
                (b) DenseNet with intra_op_thread_count 1: >= 1.7.
  4 [startup]   tcli serve model_repository ready within 2 s (issue 27); RSS after 100,000
                requests within 10% of after 1,000 (--quick: 20,000); unloading a 128 MB model
                returns >= 90%.
  5 [perf]      tcli perf against perf_analyzer on the same server and model (perf_delay, a
                python model taking a fixed 5 ms per request on 8 instances), concurrency
                1/4/8 over HTTP and gRPC: ratio within 0.90-1.10; add_sub as info rows.
  6 [storage]   the python examples in a bucket on moto's S3 server on loopback: cold start, tcli
                vs real Triton, <= 1.00 (no slower than Triton); an unchanged bucket polled each
                second for a minute: objects tcli downloads, 0.
  7 [replicas]  add_sub through HAProxy to two tcli replicas vs one (real perf_analyzer, c=8): info.
  8 [soak]      5 minutes (--quick: 1) of mixed HTTP/gRPC load (python, onnx, sequence, ensemble,
                decoupled stream) with a poll-mode config edit each minute and a python instance
                process killed twice: 0 failures beside the killed instance's, RSS and fds within 10%.
                `benchmarks/soak.py --minutes 60` is the hour-long run.
  9 [scale]     (a, b) repositories of 100, 1,000 and 10,000 add_sub copies in the server process
                (--quick: 100, 1,000): ready time, memory, and a new version served in poll mode.
                Goals at 10,000: ready <= 20 s, under 1 GB, a new version served <= 1 s. (c) 100
                isolated copies (a process each, tcli's default) and real Triton on the same
                repository, launched alternately: ready <= 5 s with PSS (whole process tree)
                <= 0.50x Triton's (issue 27).
  10 [inprocess] one add_sub inference in-process (tcli.inprocess) against the same over HTTP to
                tcli serve, same run, one request at a time: µs each and the ratio, info.
  11 [cache]     a python model sleeping 5 ms with the response cache on, repeated identical
                requests (real perf_analyzer, c=4), against add_sub on the same server: >= 0.90.
  12 [tracing]   add_sub over HTTP at c=4 (real perf_analyzer), Triton's trace file at rate 1000
                against tracing off, on one tcli server, alternately: >= 0.97.
  13 [hop]       add_sub's CPU per request in each process, tcli's default path (server, instance
                process) and in-server path beside real Triton (tritonserver, its stub), real
                perf_analyzer at c=1 and 4 over HTTP and gRPC, the sides alternated
                (process_hop_cost.py): (a) the default path's server share at most the in-server
                path's whole request; (b) the instance process within 1.2x Triton's stub; the ratio is
                tcli's default-path throughput over Triton's; (c) info: the instance loop's CPU step
                by step, woken by a pipe per request against a hot loop (hop_breakdown.py).
  14 [analyze]   (opt-in: --only analyze; about 7 minutes) tcli analyze against Model Analyzer 1.58
                in brute mode on a python model sleeping 2 + 0.25n ms, 20 ms p99 budget: the best
                config's throughput under real perf_analyzer >= 1.00 of MA's, wall time <= 1/5 of
                MA's (benchmarks/analyze_vs_ma.py, which also runs on its own).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import (
    analyze_vs_ma,
    batching,
    cache,
    digits_batching,
    frontend,
    hop_breakdown,
    inprocess,
    instances,
    perf_tools,
    process_hop_cost,
    replicas,
    scale,
    soak,
    startup,
    storage,
    tracing_cost,
)
from benchmarks.context import Context
from benchmarks.harness import Server, Windows, ensure_reference, log, start_tcli, start_triton
from benchmarks.repos import copy_examples
from benchmarks.table import Row, machine, render, write_json

# perf_analyzer's stability rule (last 3 windows within this %): 40 rather than its default 10 because
# other work on these 2 cores moves throughput by more than 10% between windows, and a comparison
# is a median over interleaved runs anyway; both load generators are given the same value
STABILITY_PCT = 100
SCENARIOS = (
    "frontend",
    "batching",
    "instances",
    "startup",
    "perf",
    "storage",
    "replicas",
    "soak",
    "scale",
    "inprocess",
    "cache",
    "tracing",
    "hop",
    "analyze",
)
OPT_IN = ("analyze",)  # run only when --only names them (Model Analyzer takes minutes of both cores)
# scenarios that start their own servers, in the order they run
STANDALONE: dict[str, Callable[[Context], list[Row]]] = {
    "hop": lambda ctx: [*process_hop_cost.rows(ctx), *hop_breakdown.rows(ctx)],
    "storage": storage.rows,
    "replicas": replicas.rows,
    "soak": soak.rows,
    "scale": scale.rows,
    "inprocess": inprocess.rows,
    "cache": cache.rows,
    "tracing": tracing_cost.rows,
    "analyze": analyze_vs_ma.rows,
}
# scenario 5: the server on core 0, each load generator on core 1 (see NOTES.md)
SERVER_CPUS, CLIENT_CPUS = [0], [1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short windows and one round (under 2 minutes)")
    parser.add_argument(
        "--only",
        default=",".join(s for s in SCENARIOS if s not in OPT_IN),
        help=f"comma-separated subset of {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--rounds", type=int, help="measurements per side of each comparison (default 2, --quick 1)"
    )
    parser.add_argument(
        "--interval", type=int, help="perf_analyzer window in ms for add_sub (default 1000, --quick 400)"
    )
    parser.add_argument(
        "--perf-setup",
        choices=("pinned", "shared"),
        default="pinned",
        help="scenario 5: server and load generator on separate cores (pinned) or sharing both",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; choose from {', '.join(SCENARIOS)}")
    return args


def main() -> None:
    args = parse_args()
    chosen = set(args.only.split(","))
    began, load_before = time.monotonic(), os.getloadavg()[0]
    ensure_reference()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        ctx = Context(
            quick=args.quick,
            workdir=Path(tmp),
            windows=Windows(
                args.interval or (400 if args.quick else 1000),
                stability_pct=STABILITY_PCT,
                max_trials=8 if args.quick else 12,
            ),
            rounds=args.rounds or (1 if args.quick else 2),
        )
        rows += _python_scenarios(ctx, chosen, args.perf_setup)
        rows += _onnx_scenarios(ctx, chosen)
        if "startup" in chosen:
            rows += startup.ready_rows(ctx, ctx.workdir / "python-repo")
            rows += [startup.memory_growth_row(ctx), startup.unload_row(ctx)]
        for name, scenario in STANDALONE.items():
            if name in chosen:
                rows += scenario(ctx)
    took = time.monotonic() - began
    mode = "--quick" if args.quick else "default"
    # the 1-minute load average before and after: other work on the machine moves every figure
    load = f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    title = f"tcli benchmark ({mode}, {took / 60:.1f} min), {machine()}, {load}"
    rows.sort(key=_scenario_order)
    render(rows, title)
    if args.json:
        write_json(args.json, rows, {"title": title, "mode": mode, "seconds": round(took, 1)})
    log(f"done in {took:.0f} s")


def _scenario_order(row: Row) -> tuple[int, str]:
    """ "10 ..." after "9b ...": the scenario's number, then its letter."""
    tag = row.scenario.split(" ", 1)[0]
    digits = "".join(c for c in tag if c.isdigit())
    return int(digits or 0), tag


def _python_scenarios(ctx: Context, chosen: set[str], perf_setup: str) -> list[Row]:
    """Scenarios 1, 3a and 5 on the python-backend repository, served by tcli and real Triton."""
    repo = ctx.workdir / "python-repo"
    copy_examples(repo)
    loop_note = instances.add_python_models(repo) if chosen & {"instances", "startup"} else ""
    if "perf" in chosen and perf_setup == "shared":
        perf_tools.add_models(repo)
    if not chosen & {"frontend", "instances", "perf"}:
        return []
    rows: list[Row] = []
    need_triton = bool(chosen & {"frontend", "instances"})
    triton = start_triton(repo, ctx.workdir / "triton.log") if need_triton else None
    tcli = start_tcli([repo], ctx.workdir / "tcli.log")
    try:
        for server in (triton, tcli):
            if server:
                server.wait()
        if "frontend" in chosen and triton:
            rows += frontend.rows(ctx, triton, tcli)
        if "instances" in chosen and triton:
            rows.append(instances.python_row(ctx, tcli, None if ctx.quick else triton, loop_note))
        if "perf" in chosen and perf_setup == "shared":
            rows += perf_tools.rows(ctx, tcli, "tcli server; server and tools share both cores", None)
    finally:
        for server in (triton, tcli):
            if server:
                server.stop()
    if "perf" in chosen and perf_setup == "pinned":
        # its own repository: the comparison's model stays out of the start-up scenario's
        perf_repo = ctx.workdir / "perf-repo"
        copy_examples(perf_repo, ("add_sub",))
        perf_tools.add_models(perf_repo)
        pinned = start_tcli([perf_repo], ctx.workdir / "tcli-pinned.log", cpus=SERVER_CPUS)
        try:
            pinned.wait()
            setup = f"server on core {SERVER_CPUS[0]}, tool on core {CLIENT_CPUS[0]}"
            rows += perf_tools.rows(ctx, pinned, setup, CLIENT_CPUS)
        finally:
            pinned.stop()
    return rows


def _onnx_scenarios(ctx: Context, chosen: set[str]) -> list[Row]:
    """Scenarios 2 and 3b: onnxruntime models (and 2b's add_sub) on one tcli server (ceilings
    searched before it starts)."""
    if not chosen & {"batching", "instances"}:
        return []
    repo = ctx.workdir / "onnx-repo"
    repo.mkdir()
    prepared = batching.prepare(ctx, repo) if "batching" in chosen else []
    if "batching" in chosen:
        digits_batching.add_models(repo)
    if "instances" in chosen:
        instances.add_onnx_models(repo)
    server: Server = start_tcli([repo], ctx.workdir / "tcli-onnx.log")
    rows: list[Row] = []
    try:
        server.wait()
        if prepared:
            rows += batching.rows(ctx, server, prepared)
        if "batching" in chosen:
            rows += digits_batching.rows(ctx, server)
        if "instances" in chosen:
            rows.append(instances.onnx_row(ctx, server))
    finally:
        server.stop()
    return rows


if __name__ == "__main__":
    main()
