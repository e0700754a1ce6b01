"""Side-by-side benchmark: real Triton 2.51 and tcli serve the same python-backend `add_sub`
repository; real perf_analyzer 2.51 measures both in the same run.

    python benchmarks/run.py            # HTTP, concurrency 1, 4, 8
    python benchmarks/run.py --quick    # shorter windows, for a smoke check

Prints one table: scenario, tcli and Triton throughput, their ratio, and p50/p99 latencies. The
reference is installed by ../shared/reference/setup-triton.sh (run here when missing).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("TRITON_REFERENCE_DIR", Path.home() / ".cache" / "triton-reference"))
SETUP = ROOT.parent / "shared" / "reference" / "setup-triton.sh"


@dataclass
class Result:
    throughput: float
    p50_us: int
    p99_us: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_reference() -> None:
    if (REFERENCE / "bin" / "tritonserver").exists() and (REFERENCE / "bin" / "perf_analyzer").exists():
        return
    if not SETUP.exists():
        sys.exit(f"real Triton is not installed and {SETUP} is missing")
    print("installing the reference Triton 2.51 and perf_analyzer ...", file=sys.stderr)
    subprocess.run(["bash", str(SETUP), str(REFERENCE)], check=True, stdout=subprocess.DEVNULL)


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not become ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def start_triton(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [
            str(REFERENCE / "bin" / "tritonserver"),
            f"--model-repository={repo}",
            f"--http-port={http}",
            f"--grpc-port={grpc}",
            f"--metrics-port={metrics}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, http


def start_tcli(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    http, metrics = free_port(), free_port()
    tcli = Path(sys.executable).parent / "tcli"
    process = subprocess.Popen(
        [
            str(tcli),
            "serve",
            str(repo),
            "--http-port",
            str(http),
            "--metrics-port",
            str(metrics),
            "--allow-grpc=false",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, http


def perf(port: int, concurrency: int, interval_ms: int, workdir: Path) -> Result:
    report = workdir / f"pa-{port}-{concurrency}.csv"
    command = [
        str(REFERENCE / "bin" / "perf_analyzer"),
        "-m",
        "add_sub",
        "-i",
        "http",
        "-u",
        f"127.0.0.1:{port}",
        "--concurrency-range",
        f"{concurrency}:{concurrency}",
        "--measurement-interval",
        str(interval_ms),
        "-s",
        "25",
        "--max-trials",
        "20",
        "-f",
        str(report),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with report.open() as handle:
        row = next(csv.DictReader(handle))
    return Result(float(row["Inferences/Second"]), int(row["p50 latency"]), int(row["p99 latency"]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short measurement windows")
    parser.add_argument("--concurrency", default="1,4,8")
    args = parser.parse_args()
    ensure_reference()
    interval = 1000 if args.quick else 3000
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        workdir = Path(tmp)
        repo = workdir / "repo"
        repo.mkdir()
        shutil.copytree(ROOT / "model_repository" / "add_sub", repo / "add_sub")
        results: dict[str, dict[int, Result]] = {}
        for name, start in (("triton", start_triton), ("tcli", start_tcli)):
            process, port = start(repo, workdir / f"{name}.log")
            try:
                wait_ready(port, process)
                results[name] = {c: perf(port, c, interval, workdir) for c in levels}
            finally:
                stop(process)
    print(
        f"add_sub (python backend), HTTP, perf_analyzer 2.51, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}"
    )
    header = f"{'scenario':<16}{'tcli infer/s':>14}{'triton infer/s':>16}{'ratio':>8}{'tcli p50/p99 us':>18}{'triton p50/p99 us':>20}"
    print(header)
    print("-" * len(header))
    for c in levels:
        ours, theirs = results["tcli"][c], results["triton"][c]
        print(
            f"{'http c=' + str(c):<16}{ours.throughput:>14.1f}{theirs.throughput:>16.1f}"
            f"{ours.throughput / theirs.throughput:>8.2f}{f'{ours.p50_us}/{ours.p99_us}':>18}"
            f"{f'{theirs.p50_us}/{theirs.p99_us}':>20}"
        )


if __name__ == "__main__":
    main()
