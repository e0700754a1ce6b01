"""Where the cores go in scenario 3a (count 2 against count 1 of a CPU-bound python model, c=4):
for tcli and real Triton in turn, real perf_analyzer drives cpu_loop_1 and cpu_loop_2 over HTTP
while the CPU time of each process is read before and after (psutil): the server's own process,
its instance processes (tcli's instances, Triton's python stubs), perf_analyzer, and the machine's
idle time. Per side: inferences/s, cores used by each, and the server process's CPU per inference.
With two instances each wanting a whole core on a 2-core machine, whatever the server process and
the client use comes out of the instances' share.

    .venv/bin/python benchmarks/instances_cpu.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import PERF_ANALYZER, Server, log, start_tcli, start_triton
from benchmarks.instances import CONCURRENCY, add_python_models
from benchmarks.observe import cpu_seconds, inference_count


def _snapshot(server: Server, tool: psutil.Process) -> dict[str, float]:
    root = psutil.Process(server.process.pid)
    children = root.children(recursive=True)
    return {
        "server": cpu_seconds(root),
        "instances": sum(cpu_seconds(child) for child in children),
        "client": cpu_seconds(tool) + sum(cpu_seconds(c) for c in tool.children(recursive=True)),
        "idle": psutil.cpu_times().idle,
    }


def measure(server: Server, model: str, seconds: float) -> dict[str, float]:
    """Cores used per process group, and inferences/s, while perf_analyzer loads `model`."""
    command = [
        str(PERF_ANALYZER),
        "-m",
        model,
        "-u",
        server.address("http"),
        "--concurrency-range",
        f"{CONCURRENCY}:{CONCURRENCY}",
        "--measurement-interval",
        str(int(seconds * 1000)),
        "--max-trials",
        "3",
        "-s",
        "100",
    ]
    stats = server.url(f"/v2/models/{model}/stats")
    tool = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watched = psutil.Process(tool.pid)
    try:
        time.sleep(1.0)  # past perf_analyzer's start-up and first requests: the steady part only
        before, count, began = _snapshot(server, watched), inference_count(stats), time.monotonic()
        time.sleep(seconds)
        after, served, ended = _snapshot(server, watched), inference_count(stats), time.monotonic()
    finally:
        tool.kill()
        tool.wait()
    elapsed, done = ended - began, served - count
    cores = {name: (after[name] - before[name]) / elapsed for name in before}
    return {
        **cores,
        "per_s": done / elapsed,
        "server_us": (after["server"] - before["server"]) / done * 1e6 if done else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds measured per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        work = Path(tmp)
        repo = work / "repo"
        repo.mkdir()
        log(add_python_models(repo))
        print(
            f"{'server':8} {'model':11} {'infer/s':>8} {'server':>7} {'instances':>10} "
            f"{'client':>7} {'idle':>5} {'server µs/inf':>14}"
        )
        for name in ("tcli", "triton"):
            log_path = work / f"{name}.log"
            server = start_tcli([repo], log_path) if name == "tcli" else start_triton(repo, log_path)
            try:
                server.wait()
                for model in ("cpu_loop_1", "cpu_loop_2"):
                    row = measure(server, model, args.seconds)
                    print(
                        f"{name:8} {model:11} {row['per_s']:8,.0f} {row['server']:7.2f} "
                        f"{row['instances']:10.2f} {row['client']:7.2f} {row['idle']:5.2f} "
                        f"{row['server_us']:14,.0f}",
                        flush=True,
                    )
            finally:
                server.stop()
        print("(cores: CPU seconds per second of each group; idle: the machine's idle cores)")


if __name__ == "__main__":
    main()
