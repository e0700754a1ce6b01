"""Scenario 7 [replicas], replicas behind a load balancer (issue 13): python-backend add_sub throughput
under real perf_analyzer through HAProxy, two `tcli serve` replicas against one, measured alternately
in the same run.

    .venv/bin/python benchmarks/replicas.py [--quick] [--concurrency 8] [--rounds 3]

One HAProxy process has two frontends, `one` (replica r1 only) and `two` (r1 and r2, round robin), so
the proxy's cost falls on both sides; a third, info-only side sends perf_analyzer straight to r1
(no proxy). Around each run the CPU seconds of each replica (with its children), of HAProxy and of the
whole machine are read, to show where the cores went: on a 2-core machine perf_analyzer, HAProxy and
the replicas share them, so two replicas can only win what one replica leaves idle.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context, Summary, interleaved, round_ratios, summarize
from benchmarks.harness import (
    Load,
    Measurement,
    Server,
    Windows,
    ensure_reference,
    free_port,
    log,
    perf_analyzer,
    start_tcli,
)
from benchmarks.repos import copy_examples
from benchmarks.table import Row, machine, ratio, render

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
CONCURRENCY = 8  # enough requests in flight to keep two replicas busy


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children (python model instances may run there)."""
    total = 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
    return total


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


@dataclass
class Run:
    measurement: Measurement | None
    cores: dict[str, float]  # process name -> cores used on average over the run ("machine": all)


def _watched(pids: dict[str, int], measure: Callable[[], Measurement | None]) -> Run:
    before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    busy, began = _busy_seconds(), time.monotonic()
    measurement = measure()
    seconds = time.monotonic() - began
    cores = {name: (_cpu_seconds(pid) - before[name]) / seconds for name, pid in pids.items()}
    cores["machine"] = (_busy_seconds() - busy) / seconds
    return Run(measurement, cores)


def haproxy_config(ports: dict[str, int], replicas: list[Server]) -> str:
    """Frontend `one` balances over r1 alone, `two` over r1 and r2; no health checks (nothing fails).
    perf_analyzer reads the model's statistics before and after each window and fails ("failed to find
    the requested model version") when the two answers come from different replicas: on `two` they go
    to r1 alone, so its server-side figures are r1's; the throughput compared is the client's."""
    sections = ["global\n    maxconn 1024", "defaults\n    mode http\n    timeout connect 1s"]
    sections[1] += "\n    timeout client 30s\n    timeout server 30s"
    members = {"one": replicas[:1], "two": replicas}
    for name, port in ports.items():
        servers = "\n".join(f"    server r{i + 1} {r.address('http')}" for i, r in enumerate(members[name]))
        stats = "\n    use_backend one if { path_end /stats }" if name == "two" else ""
        sections.append(f"frontend {name}\n    bind 127.0.0.1:{port}{stats}\n    default_backend {name}")
        sections.append(f"backend {name}\n    balance roundrobin\n{servers}")
    return "\n\n".join(sections) + "\n"


def _median_cores(runs: list[Run]) -> dict[str, float]:
    names = runs[0].cores if runs else {}
    return {name: sorted(r.cores[name] for r in runs)[len(runs) // 2] for name in names}


def _cores_text(cores: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in cores.items())


def rows(ctx: Context, concurrency: int = CONCURRENCY) -> list[Row]:
    """The comparison as one table row (info: two python-model replicas on 2 cores need not scale)."""
    if not Path(HAPROXY).exists():
        log(f"replicas: skipped, no haproxy at {HAPROXY}")
        return [Row("7 add_sub 2 replicas vs 1 behind HAProxy", "n/a", "—", None, "info", None, "no haproxy")]
    repo = ctx.workdir / "replicas-repo"
    copy_examples(repo, ("add_sub",))
    replicas = [
        start_tcli([repo], ctx.workdir / f"replica-{i}.log", extra=["--allow-grpc=false"]) for i in (1, 2)
    ]
    haproxy: subprocess.Popen[bytes] | None = None
    try:
        for replica in replicas:
            replica.wait()
        ports = {"one": free_port(), "two": free_port()}
        config = ctx.workdir / "haproxy.cfg"
        config.write_text(haproxy_config(ports, replicas))
        haproxy_log = ctx.workdir / "haproxy.log"
        with haproxy_log.open("wb") as out:
            haproxy = subprocess.Popen(
                [HAPROXY, "-f", str(config), "-db"], stdout=out, stderr=subprocess.STDOUT
            )
        fronts = {
            name: Server("haproxy", haproxy, port, 0, haproxy_log, time.monotonic())
            for name, port in ports.items()
        }
        for front in fronts.values():
            front.wait("/v2/health/ready", timeout=30)
        pids = {"r1": replicas[0].process.pid, "r2": replicas[1].process.pid, "haproxy": haproxy.pid}
        load = Load("add_sub", "http", concurrency)

        def side(tag: str, target: Server) -> Callable[[], Run]:
            return lambda: _watched(pids, lambda: perf_analyzer(load, target, ctx.windows, ctx.report(tag)))

        log(f"replicas: add_sub c={concurrency} through HAProxy, 2 replicas vs 1 ({ctx.rounds} rounds)")
        one, two, direct = interleaved(
            [side("one", fronts["one"]), side("two", fronts["two"]), side("direct", replicas[0])], ctx.rounds
        )
    finally:
        if haproxy is not None:
            haproxy.terminate()
            haproxy.wait(10)
        for replica in replicas:
            replica.stop()
    return [_row(concurrency, one, two, direct)]


def _row(concurrency: int, one: list[Run], two: list[Run], direct: list[Run]) -> Row:
    summaries: list[Summary | None] = [
        summarize([r.measurement for r in runs]) for runs in (one, two, direct)
    ]
    s_one, s_two, s_direct = summaries
    scale = ratio(s_two.throughput if s_two else None, s_one.throughput if s_one else None)
    cell = f"{s_two.throughput:,.0f} vs {s_one.throughput:,.0f}/s" if s_one and s_two else "n/a"
    spread = round_ratios([r.measurement for r in two], [r.measurement for r in one])
    note = (
        f"{spread + '; ' if spread else ''}cores busy (median run) with 1 replica: "
        f"{_cores_text(_median_cores(one))}; with 2: {_cores_text(_median_cores(two))} ('machine' is every "
        f"process: perf_analyzer, other work). perf_analyzer, HAProxy and the replicas share {os.cpu_count()} "
        "cores: a second replica scales only by what the first leaves idle; where cores are free, each "
        "replica brings its own"
    )
    return Row(
        f"7 add_sub 2 replicas vs 1 behind HAProxy, c={concurrency}",
        cell,
        f"1 replica direct {s_direct.throughput:,.0f}/s" if s_direct else "—",
        scale,
        "info",
        None,
        note,
        {"one": s_one.runs if s_one else [], "two": s_two.runs if s_two else []},
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter windows, one round")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--rounds", type=int, help="runs per side, interleaved (default 3, --quick 1)")
    args = parser.parse_args()
    ensure_reference()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tcli-replicas-") as tmp:
        ctx = Context(
            quick=args.quick,
            workdir=Path(tmp),
            windows=Windows(
                400 if args.quick else 2000, stability_pct=100, max_trials=8 if args.quick else 10
            ),
            rounds=args.rounds or (1 if args.quick else 3),
        )
        table = rows(ctx, args.concurrency)
    render(table, f"tcli replicas behind HAProxy ({time.monotonic() - began:.0f} s), {machine()}")
    for row in table:
        print(f"ratio 2 replicas / 1: {'n/a' if row.ratio is None else f'{row.ratio:.2f}'}; {row.note}")


if __name__ == "__main__":
    main()
