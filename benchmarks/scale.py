"""Scenario 9 [scale], cost as the repository grows (issues 15 and 27).
(a, b) A repository of N copies of the python add_sub model, each running in the server's process
(`TCLI_INSTANCE_PROCESS` false: 10,000 instance processes would not fit any machine), for N = 100,
1,000 and 10,000 (--quick: 100, 1,000). Per N: seconds from launch until /v2/health/ready answers
200, the memory of the server's process tree then, and, in poll mode, the seconds from writing a new
version folder of one model until that version answers ready. Goals: 10,000 models ready in 20 s
with the server under 1 GB, and a new version served within 1 s; the per-model cost at each N shows
whether the growth is linear.
(c) 100 isolated copies (each instance in a process of its own, tcli's default) against real Triton
2.51 on the same repository (a stub process per model), launched alternately: ready within 5 s, with
at most half of Triton's PSS (proportional set size, summed over the server and every process under
it: shared pages counted once, split between the processes sharing them). Triton's figures from this
comparison also stand beside the 100-model row of (a), for scale.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.context import Context, interleaved
from benchmarks.harness import Server, log, start_tcli, start_triton
from benchmarks.observe import cpu_seconds
from benchmarks.repos import EXAMPLES, read_config, write_config
from benchmarks.table import Row

READY_GOAL_S, MEMORY_GOAL_MB, NEW_VERSION_GOAL_S = 20.0, 1024.0, 1.0
GOAL_N = 10_000
# 9c (issue 27): isolated copies, ready within ISOLATED_READY_GOAL_S with at most PSS_SHARE_GOAL of
# Triton's PSS on the same repository
ISOLATED_N, ISOLATED_READY_GOAL_S, PSS_SHARE_GOAL = 100, 5.0, 0.5


def write_repository(repo: Path, count: int, in_server: bool = True) -> None:
    """`count` copies of add_sub, named add_sub_0 ... add_sub_<count-1>: in-server instances, or
    (`in_server` false) the example's own config, an instance process per copy in tcli's default."""
    source = read_config(EXAMPLES / "add_sub")
    if in_server:
        source.parameters["TCLI_INSTANCE_PROCESS"].string_value = "false"
    code = (EXAMPLES / "add_sub" / "1" / "model.py").read_bytes()
    for index in range(count):
        folder = repo / f"add_sub_{index}"
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_bytes(code)
        source.name = folder.name
        write_config(folder, source)


@dataclass(frozen=True)
class Launch:
    """A server's figures when it first answered ready."""

    ready_s: float
    cpu_s: float  # the server process's CPU time by then: the work done, beside the machine's speed
    rss_mb: float  # summed over the server and the processes under it (shared pages counted each time)
    pss_mb: float  # the same tree's proportional set size (shared pages split between their sharers)
    processes: int


def _ready(server: Server) -> Launch:
    """Waits until `server` is ready, then reads its process tree's memory."""
    ready_s = server.wait(timeout=900)
    root = psutil.Process(server.process.pid)
    cpu_s = cpu_seconds(root)
    rss = pss = 0
    processes = [root, *root.children(recursive=True)]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            memory = process.memory_full_info()
            rss, pss = rss + memory.rss, pss + memory.pss
    return Launch(ready_s, cpu_s, rss / 2**20, pss / 2**20, len(processes))


def _new_version_s(server: Server, repo: Path, model: str) -> float:
    """Seconds from writing version 2 of `model` until it answers ready (poll mode)."""
    staging = repo.parent / f"{model}-v2"
    shutil.copytree(repo / model / "1", staging)
    began = time.monotonic()
    staging.rename(repo / model / "2")  # one event: the folder appears whole
    deadline = began + 120
    while time.monotonic() < deadline:
        if server.model_ready(f"{model}/versions/2"):
            return time.monotonic() - began
        time.sleep(0.01)
    raise RuntimeError(f"version 2 of {model} was not served within 120 s; see {server.log_path}")


def measure_tcli(ctx: Context, count: int) -> tuple[Launch, float]:
    """In-server copies in poll mode: the launch, and seconds until a new version is served."""
    repo = ctx.workdir / f"scale-{count}"
    write_repository(repo, count)
    server = start_tcli(
        [repo],
        ctx.workdir / f"scale-tcli-{count}.log",
        extra=["--model-control-mode", "poll", "--repository-poll-secs", "30"],
    )
    try:
        launch = _ready(server)
        new_version_s = _new_version_s(server, repo, f"add_sub_{count // 2}")
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    return launch, new_version_s


def _launched(start: Callable[[Path], Server], log_path: Path) -> Launch:
    server = start(log_path)
    try:
        return _ready(server)
    finally:
        server.stop()


def measure_isolated(ctx: Context) -> tuple[list[Launch], list[Launch]]:
    """tcli's and Triton's launches on one repository of isolated copies, alternately."""
    repo = ctx.workdir / f"scale-isolated-{ISOLATED_N}"
    write_repository(repo, ISOLATED_N, in_server=False)

    def side(name: str, start: Callable[[Path], Server]) -> Callable[[], Launch]:
        return lambda: _launched(start, ctx.report(f"scale-isolated-{name}").with_suffix(".log"))

    try:
        ours, theirs = interleaved(
            [
                side("tcli", lambda path: start_tcli([repo], path)),
                side("triton", lambda path: start_triton(repo, path)),
            ],
            ctx.rounds,
        )
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    return ours, theirs


def median_launch(launches: list[Launch]) -> Launch:
    """Each figure's median over the launches."""
    return Launch(
        statistics.median(launch.ready_s for launch in launches),
        statistics.median(launch.cpu_s for launch in launches),
        statistics.median(launch.rss_mb for launch in launches),
        statistics.median(launch.pss_mb for launch in launches),
        round(statistics.median(launch.processes for launch in launches)),
    )


def isolated_passed(ours: Launch, theirs: Launch) -> bool:
    """9c's verdict: ready within its goal, with at most PSS_SHARE_GOAL of Triton's PSS."""
    return ours.ready_s <= ISOLATED_READY_GOAL_S and ours.pss_mb <= PSS_SHARE_GOAL * theirs.pss_mb


def _isolated_row(ours_runs: list[Launch], theirs_runs: list[Launch]) -> Row:
    ours, theirs = median_launch(ours_runs), median_launch(theirs_runs)
    share = ours.pss_mb / theirs.pss_mb if theirs.pss_mb else None
    each = "; ".join(
        f"{name} " + ", ".join(f"{r.ready_s:.1f} s/{r.pss_mb:,.0f} MB" for r in runs)
        for name, runs in (("tcli", ours_runs), ("Triton", theirs_runs))
    )
    return Row(
        f"9c scale: {ISOLATED_N} isolated add_sub copies (a process each) ready, and their PSS",
        f"{ours.ready_s:.1f} s, {ours.pss_mb:,.0f} MB PSS",
        f"{theirs.ready_s:.1f} s, {theirs.pss_mb:,.0f} MB PSS",
        share,
        f"<= {ISOLATED_READY_GOAL_S:.0f} s, PSS <= {PSS_SHARE_GOAL:.2f}x",
        isolated_passed(ours, theirs),
        f"ratio: PSS tcli/Triton, whole process trees; RSS summed {ours.rss_mb:,.0f} vs "
        f"{theirs.rss_mb:,.0f} MB; {ours.processes:.0f} vs {theirs.processes:.0f} processes; "
        f"median of {len(ours_runs)} alternated launches each ({each})",
        {
            "tcli ready_s": [r.ready_s for r in ours_runs],
            "tcli pss_mb": [r.pss_mb for r in ours_runs],
            "triton ready_s": [r.ready_s for r in theirs_runs],
            "triton pss_mb": [r.pss_mb for r in theirs_runs],
        },
    )


def rows(ctx: Context) -> list[Row]:
    counts = ctx.pick((100, 1_000, 10_000), (100, 1_000))
    log(f"scale: {ISOLATED_N} isolated add_sub copies, tcli and Triton alternately ({ctx.rounds} each)")
    ours_isolated, theirs_isolated = measure_isolated(ctx)
    triton = median_launch(theirs_isolated)
    result = [_isolated_row(ours_isolated, theirs_isolated)]
    log(f"scale: repositories of {', '.join(f'{n:,}' for n in counts)} in-server add_sub copies")
    for count in counts:
        tcli, new_version_s = measure_tcli(ctx, count)
        goal = count == GOAL_N
        per_model_ms = tcli.ready_s / count * 1000
        reference = (
            f"{triton.ready_s:.1f} s, {triton.rss_mb:,.0f} MB in {triton.processes:.0f} processes"
            if count == ISOLATED_N
            else "—"
        )
        result.append(
            Row(
                f"9a scale: {count:,} models ready, and the server's memory",
                f"{tcli.ready_s:.1f} s, {tcli.rss_mb:,.0f} MB",
                reference,
                None,
                f"<= {READY_GOAL_S:.0f} s, < 1 GB" if goal else "info",
                tcli.ready_s <= READY_GOAL_S and tcli.rss_mb < MEMORY_GOAL_MB if goal else None,
                f"{per_model_ms:.2f} ms per model; {tcli.cpu_s:.1f} s of server CPU by then "
                f"({tcli.cpu_s / count * 1000:.2f} ms per model); {tcli.processes:.0f} process(es); "
                "RSS summed over the process tree"
                + (
                    "; Triton's from 9c (isolated copies, its stubs as always)" if count == ISOLATED_N else ""
                ),
            )
        )
        result.append(
            Row(
                f"9b scale: {count:,} models, poll mode, a new version served after",
                f"{new_version_s:.2f} s",
                "—",
                None,
                f"<= {NEW_VERSION_GOAL_S:.0f} s" if goal else "info",
                new_version_s <= NEW_VERSION_GOAL_S if goal else None,
                "version folder 2 renamed into one model's folder; the server's file events poll that folder",
            )
        )
    return result
