"""Scenario 13 [hop], what the hop to a python instance process costs, side by side with real
Triton 2.51's hop to its stub (issues 27 and 33): the CPU each process spends per request (its user +
system time over the model's inference count) and the throughput, for add_sub
- as tcli runs it by default (server process, instance process),
- opted in to tcli's server process (`add_sub_in_server`: the server alone),
- on real Triton 2.51 (tritonserver, its python stub),
under real perf_analyzer 2.51 at concurrency 1 and 4, over HTTP and over gRPC. Goals (issue 33): the
server's share of a default-path request at most what the in-server path spends on the whole
request (13a), and the instance process's share within 1.2x of Triton's stub (13b).

    .venv/bin/python benchmarks/process_hop_cost.py [--rounds 2] [--interval 2000] [--levels 1,4]
        [--protocols http,grpc] [--source OTHER_CHECKOUT]

`--source` measures another checkout's tcli (e.g. `git archive COMMIT | tar -x -C /tmp/before`) in
this environment: runs of two trees taken in turn (A B A B) compare a change against Triton alike.

Both servers run at once (loopback, ports picked free); for each protocol and concurrency the three
sides are measured alternately (A B C, C B A, ...), each side's figure the median of its passes. A
pass reads each process's CPU (psutil) and the model's inference count (statistics extension)
before and after one perf_analyzer run, so the figures cover exactly the requests the run sent.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context, interleaved
from benchmarks.harness import (
    Load,
    Server,
    Windows,
    ensure_reference,
    log,
    perf_analyzer,
    start_tcli,
    start_triton,
)
from benchmarks.observe import cpu_seconds, inference_count
from benchmarks.repos import EXAMPLES, IN_SERVER, copy_examples
from benchmarks.table import Row, ratio

# the CPU per request covers every request a run sent, stable or not: perf_analyzer's stability rule
# only decides when a run ends (a run that never stabilises still gives its figures, and --max-trials
# bounds it), so a loose rule keeps runs short on a busy machine
STABILITY_PCT = 100
STUB_FACTOR_GOAL = 1.2  # 13b: the instance process's CPU per request against Triton's stub's
DEFAULT = "add_sub"  # in its own process, as tcli runs it by default
LEVELS = (1, 4)
PROTOCOLS = ("http", "grpc")
# the sides of one comparison: (label, which server, model)
SIDES = (("triton", "triton", DEFAULT), ("tcli", "tcli", DEFAULT), ("in server", "tcli", IN_SERVER))


@dataclass(frozen=True)
class Pass:
    """One side's figures over one perf_analyzer run: throughput, and CPU µs per inference."""

    throughput: float
    server_us: float  # the server process (tritonserver, tcli serve)
    instance_us: float  # its child processes (Triton's stub; tcli's instance process and zygote)

    @property
    def total_us(self) -> float:
        return self.server_us + self.instance_us


@dataclass(frozen=True)
class Hop:
    """One load's sides: each side's median pass, and every pass in the order taken."""

    load: Load
    triton: Pass
    default: Pass
    in_server: Pass
    passes: dict[str, list[Pass]]


def median_pass(passes: Sequence[Pass]) -> Pass:
    return Pass(
        statistics.median(p.throughput for p in passes),
        statistics.median(p.server_us for p in passes),
        statistics.median(p.instance_us for p in passes),
    )


def _tree_cpu(root: psutil.Process) -> tuple[float, float]:
    """CPU seconds of the server process and of its child processes (those alive now)."""
    children = 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        children = sum(cpu_seconds(child) for child in root.children(recursive=True))
    return cpu_seconds(root), children


def one_pass(load: Load, server: Server, windows: Windows, report: Path) -> Pass | None:
    """One perf_analyzer run of `load` on `server`, its processes' CPU read around it."""
    root = psutil.Process(server.process.pid)
    stats = server.url(f"/v2/models/{load.model}/stats")
    count0 = inference_count(stats)
    server0, children0 = _tree_cpu(root)
    began = time.monotonic()
    measured = perf_analyzer(load, server, windows, report)
    seconds = time.monotonic() - began
    server1, children1 = _tree_cpu(root)
    served = inference_count(stats) - count0
    if served <= 0:
        return None
    # perf_analyzer's own figure; over the whole run when it could not stabilise
    throughput = measured.throughput if measured is not None else served / seconds
    return Pass(throughput, (server1 - server0) / served * 1e6, (children1 - children0) / served * 1e6)


def measure(
    workdir: Path,
    windows: Windows,
    rounds: int,
    protocols: Sequence[str],
    levels: Sequence[int],
    source: Path | None = None,
) -> list[Hop]:
    """tcli (add_sub and its in-server copy) and Triton (add_sub) up at once; each load's three
    sides alternated, `rounds` passes each. `source`: another checkout's tcli (see start_tcli)."""
    ensure_reference()
    tcli_repo, triton_repo = workdir / "hop-tcli", workdir / "hop-triton"
    copy_examples(tcli_repo, (DEFAULT,))  # with add_sub_in_server beside it
    shutil.copytree(EXAMPLES / DEFAULT, triton_repo / DEFAULT)
    servers = {"tcli": start_tcli([tcli_repo], workdir / "hop-tcli.log", source=source)}
    try:
        servers["triton"] = start_triton(triton_repo, workdir / "hop-triton.log")
        for server in servers.values():
            server.wait()
        hops = []
        reports = iter(range(1 << 30))
        for protocol in protocols:
            for level in levels:
                log(f"hop: add_sub {protocol} c={level}, Triton / tcli / tcli in server, {rounds} round(s)")
                sides = [
                    partial(
                        one_pass,
                        Load(model, protocol, level),
                        servers[which],
                        windows,
                        workdir / f"hop-{label.replace(' ', '-')}-{protocol}-c{level}-{next(reports)}.csv",
                    )
                    for label, which, model in SIDES
                ]
                runs = [[p for p in side if p is not None] for side in interleaved(sides, rounds)]
                if not all(runs):
                    log(f"hop: a side of add_sub {protocol} c={level} has no pass; left out")
                    continue
                triton, default, in_server = (median_pass(r) for r in runs)
                passes = {label: r for (label, _, _), r in zip(SIDES, runs, strict=True)}
                hops.append(Hop(Load(DEFAULT, protocol, level), triton, default, in_server, passes))
        return hops
    finally:
        for server in servers.values():
            server.stop()


def verdicts(hop: Hop) -> tuple[bool, bool]:
    """(13a, 13b): the default path's server share at most the in-server path's whole request; the
    instance process's share within STUB_FACTOR_GOAL of Triton's stub."""
    return (
        hop.default.server_us <= hop.in_server.total_us,
        hop.default.instance_us <= STUB_FACTOR_GOAL * hop.triton.instance_us,
    )


def _cell(side: Pass) -> str:
    return f"{side.server_us:,.0f} + {side.instance_us:,.0f} = {side.total_us:,.0f} µs · {side.throughput:,.0f}/s"


def row(hop: Hop, setup: str) -> Row:
    server_ok, instance_ok = verdicts(hop)
    load = hop.load
    speed = ratio(hop.default.throughput, hop.triton.throughput)
    in_server = ratio(hop.in_server.throughput, hop.triton.throughput)
    runs = {
        f"{label} {figure}": [getattr(p, figure) for p in passes]
        for label, passes in hop.passes.items()
        for figure in ("throughput", "server_us", "instance_us")
    }
    return Row(
        f"13 hop add_sub {load.protocol} c={load.concurrency}: CPU per request, server + instance",
        _cell(hop.default),
        _cell(hop.triton) + " (Triton)",
        speed,
        f"server <= in-server's {hop.in_server.total_us:,.0f} µs, instance <= {STUB_FACTOR_GOAL}x stub",
        server_ok and instance_ok,
        f"13a server share {hop.default.server_us:,.0f} µs against the in-server path's whole request "
        f"{hop.in_server.total_us:,.0f} µs ({'pass' if server_ok else 'FAIL'}); 13b instance "
        f"{hop.default.instance_us / hop.triton.instance_us:.2f}x Triton's stub "
        f"({'pass' if instance_ok else 'FAIL'}); in server {hop.in_server.total_us:,.0f} µs · "
        f"{hop.in_server.throughput:,.0f}/s ({in_server or 0:.2f}x Triton); ratio = tcli default / Triton "
        f"throughput; {setup}",
        runs,
    )


def rows(ctx: Context) -> list[Row]:
    windows = Windows(ctx.pick(2000, 1000), STABILITY_PCT, ctx.pick(6, 4))
    setup = f"perf_analyzer, {windows.interval_ms} ms windows, median of {ctx.rounds} alternated pass(es)"
    log(f"hop: add_sub on tcli (default, in server) and on Triton, CPU per request; {setup}")
    return [row(hop, setup) for hop in measure(ctx.workdir, windows, ctx.rounds, PROTOCOLS, LEVELS)]


def print_hops(hops: Sequence[Hop]) -> None:
    print(
        f"{'load':10s} {'side':10s} {'infer/s':>8s} {'server µs':>10s} {'instance µs':>12s} {'total µs':>9s}"
    )
    for hop in hops:
        tag = f"{hop.load.protocol} c={hop.load.concurrency}"
        for label, passes in hop.passes.items():
            for p in passes:
                print(
                    f"{tag:10s} {label:10s} {p.throughput:8,.0f} {p.server_us:10.0f} {p.instance_us:12.0f} "
                    f"{p.total_us:9.0f}"
                )
        for label, side in (("triton", hop.triton), ("tcli", hop.default), ("in server", hop.in_server)):
            print(
                f"{tag:10s} {label + '*':10s} {side.throughput:8,.0f} {side.server_us:10.0f} "
                f"{side.instance_us:12.0f} {side.total_us:9.0f}"
            )
        server_ok, instance_ok = verdicts(hop)
        print(
            f"{tag:10s} tcli/Triton {hop.default.throughput / hop.triton.throughput:.2f}x, in server "
            f"{hop.in_server.throughput / hop.triton.throughput:.2f}x; 13a {'pass' if server_ok else 'FAIL'}, "
            f"13b {'pass' if instance_ok else 'FAIL'} (instance {hop.default.instance_us / hop.triton.instance_us:.2f}x "
            "the stub)"
        )
    print("(* the median of the passes above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="passes per side, alternated")
    parser.add_argument("--interval", type=int, default=2000, help="perf_analyzer's window, ms")
    parser.add_argument("--max-trials", type=int, default=6)
    parser.add_argument(
        "--source", type=Path, help="another checkout whose tcli to measure (its code, this venv)"
    )
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrencies, e.g. 1,4")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="http,grpc")
    args = parser.parse_args()
    windows = Windows(args.interval, STABILITY_PCT, args.max_trials)
    levels = [int(level) for level in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="tcli-hop-") as tmp:
        hops = measure(Path(tmp), windows, args.rounds, args.protocols.split(","), levels, args.source)
    print_hops(hops)


if __name__ == "__main__":
    main()
