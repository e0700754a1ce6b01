"""Side-by-side benchmark: real Triton 2.51 and tcli serve the same python-backend repository
(`add_sub`, the decoupled `repeat_int32`, the sequence model `simple_dyna_sequence`); real
perf_analyzer 2.51 measures both in the same run, over HTTP and gRPC.

    python benchmarks/run.py                    # every scenario (a few minutes)
    python benchmarks/run.py --protocols http   # HTTP only: add_sub at concurrency 1, 4, 8
    python benchmarks/run.py --quick            # shorter windows, for a smoke check

Scenarios: HTTP add_sub at concurrency 1, 4, 8 (`--concurrency`); gRPC add_sub sync (c=1), --async
(c=4) and --streaming (c=4); gRPC --streaming on repeat_int32 (4 responses per request, c=4); gRPC
simple_dyna_sequence with --sequence-length 20 (c=4). Prints one table: scenario, tcli and Triton
throughput (requests/s; for the decoupled model also responses/s), their ratio, and p50/p99
latencies. A scenario perf_analyzer cannot stabilise shows "n/a". The reference is installed by
../shared/reference/setup-triton.sh (run here when missing).
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


MODELS = ("add_sub", "repeat_int32", "simple_dyna_sequence")


@dataclass
class Result:
    throughput: float
    p50_us: int
    p99_us: int
    responses: float | None = None  # Response Throughput (decoupled models)


@dataclass(frozen=True)
class Scenario:
    name: str
    protocol: str  # http | grpc
    model: str
    concurrency: int
    flags: tuple[str, ...] = ()


def scenarios(levels: list[int], protocols: list[str]) -> list[Scenario]:
    chosen = []
    if "http" in protocols:
        chosen += [Scenario(f"http c={c}", "http", "add_sub", c) for c in levels]
    if "grpc" in protocols:
        chosen += [
            Scenario("grpc c=1", "grpc", "add_sub", 1),
            Scenario("grpc async c=4", "grpc", "add_sub", 4, ("--async",)),
            Scenario("grpc stream c=4", "grpc", "add_sub", 4, ("--streaming",)),
            Scenario(
                "decoupled c=4",
                "grpc",
                "repeat_int32",
                4,
                ("--streaming", "--shape", "IN:4", "--shape", "DELAY:4", "--input-data", "zero"),
            ),
            Scenario("sequence c=4", "grpc", "simple_dyna_sequence", 4, ("--sequence-length", "20")),
        ]
    return chosen


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


def start_triton(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
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
    return process, http, grpc


def start_tcli(repo: Path, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    http, grpc, metrics = free_port(), free_port(), free_port()
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
            "--allow-grpc=true",
            "--grpc-port",
            str(grpc),
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, http, grpc


def perf(scenario: Scenario, port: int, interval_ms: int, workdir: Path) -> Result | None:
    """perf_analyzer's measurement of one scenario, or None (with its output on stderr) when it
    fails, e.g. cannot stabilise on a noisy machine."""
    report = workdir / f"pa-{port}-{len(list(workdir.glob('pa-*')))}.csv"
    command = [
        str(REFERENCE / "bin" / "perf_analyzer"),
        "-m",
        scenario.model,
        "-i",
        scenario.protocol,
        "-u",
        f"127.0.0.1:{port}",
        "--concurrency-range",
        f"{scenario.concurrency}:{scenario.concurrency}",
        *scenario.flags,
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
    if done.returncode != 0 or not report.exists():
        print(
            f"perf_analyzer failed ({scenario.name}):\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}",
            file=sys.stderr,
        )
        return None
    with report.open() as handle:
        row = next(csv.DictReader(handle))
    responses = row.get("Response Throughput")
    return Result(
        float(row["Inferences/Second"]),
        int(row["p50 latency"]),
        int(row["p99 latency"]),
        float(responses) if responses else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short measurement windows")
    parser.add_argument("--concurrency", default="1,4,8", help="HTTP concurrency levels")
    parser.add_argument("--protocols", default="http,grpc", help="http, grpc or both")
    args = parser.parse_args()
    ensure_reference()
    interval = 1000 if args.quick else 3000
    levels = [int(c) for c in args.concurrency.split(",")]
    chosen = scenarios(levels, args.protocols.split(","))
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        workdir = Path(tmp)
        repo = workdir / "repo"
        repo.mkdir()
        for model in MODELS:
            shutil.copytree(ROOT / "model_repository" / model, repo / model)
        results: dict[str, dict[Scenario, Result | None]] = {}
        for name, start in (("triton", start_triton), ("tcli", start_tcli)):
            process, http, grpc = start(repo, workdir / f"{name}.log")
            try:
                wait_ready(http, process)
                results[name] = {
                    s: perf(s, http if s.protocol == "http" else grpc, interval, workdir) for s in chosen
                }
            finally:
                stop(process)
    print(
        f"python backend, perf_analyzer 2.51, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}"
    )
    header = (
        f"{'scenario':<18}{'model':<22}{'tcli infer/s':>14}{'triton infer/s':>16}{'ratio':>8}"
        f"{'tcli p50/p99 us':>18}{'triton p50/p99 us':>20}"
    )
    print(header)
    print("-" * len(header))
    for scenario in chosen:
        ours, theirs = results["tcli"][scenario], results["triton"][scenario]
        line = f"{scenario.name:<18}{scenario.model:<22}"
        line += f"{_rate(ours):>14}{_rate(theirs):>16}"
        ratio = (
            f"{ours.throughput / theirs.throughput:.2f}" if ours and theirs and theirs.throughput else "n/a"
        )
        line += f"{ratio:>8}{_latency(ours):>18}{_latency(theirs):>20}"
        print(line)
        if ours and theirs and ours.responses and theirs.responses:
            print(
                f"{'  responses/s':<40}{ours.responses:>14.1f}{theirs.responses:>16.1f}"
                f"{ours.responses / theirs.responses:>8.2f}"
            )


def _rate(result: Result | None) -> str:
    return f"{result.throughput:.1f}" if result else "n/a"


def _latency(result: Result | None) -> str:
    return f"{result.p50_us}/{result.p99_us}" if result else "n/a"


if __name__ == "__main__":
    main()
