"""Scenario 9 [scale], cost as the repository grows (issue 15): a repository of N copies of the
python add_sub model (each running in the server's process, `TCLI_INSTANCE_PROCESS` false: 10,000
instance processes would not fit any machine), for N = 100, 1,000 and 10,000 (--quick: 100, 1,000).

Per N: seconds from launch until /v2/health/ready answers 200, the server's resident memory then,
and, in poll mode, the seconds from writing a new version folder of one model until that version
answers ready. Real Triton serves the 100-model repository in the same run for scale (one stub
process per model). Goals: 10,000 models ready in 20 s with the server under 1 GB, and a new version
served within 1 s; the per-model cost at each N shows whether the growth is linear.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psutil

from benchmarks.context import Context
from benchmarks.harness import Server, log, start_tcli, start_triton
from benchmarks.observe import cpu_seconds
from benchmarks.repos import EXAMPLES, read_config, write_config
from benchmarks.table import Row

READY_GOAL_S, MEMORY_GOAL_MB, NEW_VERSION_GOAL_S = 20.0, 1024.0, 1.0
GOAL_N = 10_000


def write_repository(repo: Path, count: int) -> None:
    """`count` copies of add_sub, named add_sub_0 ... add_sub_<count-1>, in-server instances."""
    source = read_config(EXAMPLES / "add_sub")
    source.parameters["TCLI_INSTANCE_PROCESS"].string_value = "false"
    code = (EXAMPLES / "add_sub" / "1" / "model.py").read_bytes()
    for index in range(count):
        folder = repo / f"add_sub_{index}"
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_bytes(code)
        source.name = folder.name
        write_config(folder, source)


def _footprint_mb(server: Server) -> tuple[float, int]:
    root = psutil.Process(server.process.pid)
    processes = [root, *root.children(recursive=True)]
    return sum(p.memory_info().rss for p in processes) / 2**20, len(processes)


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


def measure_tcli(ctx: Context, count: int) -> dict[str, float]:
    repo = ctx.workdir / f"scale-{count}"
    write_repository(repo, count)
    server = start_tcli(
        [repo],
        ctx.workdir / f"scale-tcli-{count}.log",
        extra=["--model-control-mode", "poll", "--repository-poll-secs", "30"],
    )
    try:
        ready_s = server.wait(timeout=900)
        cpu_s = cpu_seconds(psutil.Process(server.process.pid))
        rss_mb, processes = _footprint_mb(server)
        new_version_s = _new_version_s(server, repo, f"add_sub_{count // 2}")
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    return {
        "ready_s": ready_s,
        "cpu_s": cpu_s,  # the work done; ready_s also holds the machine's speed
        "rss_mb": rss_mb,
        "processes": processes,
        "new_version_s": new_version_s,
    }


def measure_triton(ctx: Context, count: int) -> dict[str, float]:
    repo = ctx.workdir / f"scale-triton-{count}"
    write_repository(repo, count)
    server = start_triton(repo, ctx.workdir / f"scale-triton-{count}.log")
    try:
        ready_s = server.wait(timeout=900)
        rss_mb, processes = _footprint_mb(server)
    finally:
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    return {"ready_s": ready_s, "rss_mb": rss_mb, "processes": processes}


def rows(ctx: Context) -> list[Row]:
    counts = ctx.pick((100, 1_000, 10_000), (100, 1_000))
    log(f"scale: repositories of {', '.join(f'{n:,}' for n in counts)} add_sub copies, and Triton on 100")
    triton = measure_triton(ctx, 100)
    result: list[Row] = []
    for count in counts:
        tcli = measure_tcli(ctx, count)
        goal = count == GOAL_N
        per_model_ms = tcli["ready_s"] / count * 1000
        reference = (
            f"{triton['ready_s']:.1f} s, {triton['rss_mb']:,.0f} MB in {triton['processes']:.0f} processes"
            if count == 100
            else "—"
        )
        result.append(
            Row(
                f"9a scale: {count:,} models ready, and the server's memory",
                f"{tcli['ready_s']:.1f} s, {tcli['rss_mb']:,.0f} MB",
                reference,
                None,
                f"<= {READY_GOAL_S:.0f} s, < 1 GB" if goal else "info",
                tcli["ready_s"] <= READY_GOAL_S and tcli["rss_mb"] < MEMORY_GOAL_MB if goal else None,
                f"{per_model_ms:.2f} ms per model; {tcli['cpu_s']:.1f} s of server CPU by then "
                f"({tcli['cpu_s'] / count * 1000:.2f} ms per model); {tcli['processes']:.0f} process(es)",
            )
        )
        result.append(
            Row(
                f"9b scale: {count:,} models, poll mode, a new version served after",
                f"{tcli['new_version_s']:.2f} s",
                "—",
                None,
                f"<= {NEW_VERSION_GOAL_S:.0f} s" if goal else "info",
                tcli["new_version_s"] <= NEW_VERSION_GOAL_S if goal else None,
                "version folder 2 renamed into one model's folder; the server's file events poll that folder",
            )
        )
    return result
