"""Server CPU per request and throughput under real perf_analyzer 2.51, for tcli's two gRPC
transports and real Triton 2.51 on the same model (python `add_sub` by default).

    python benchmarks/grpc_ab.py [--server native grpcio triton] [--concurrency 1 4 8]
                                 [--protocol grpc|http] [--rounds N] [--model add_sub] [--repository DIR]
                                 [--port-base 19100]

Each (round, server) starts a fresh server on ports port-base..port-base+2, runs perf_analyzer at
each concurrency (2 s windows, up to 3 trials, p99), and reads the server's CPU time (psutil,
children included) and the model's inference_count before and after: CPU µs per request is robust on
a shared, noisy machine; throughput and latency percentiles compare only within one sitting. Rounds
alternate the servers' order.

A server `native@DIR` (or `grpcio@DIR`) runs tcli from the source tree DIR (e.g. `git archive HEAD`
unpacked somewhere) with this venv, to A/B a change against the commit before it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path.home() / ".cache" / "triton-reference" / "bin"
HTTP, GRPC, METRICS = 19100, 19101, 19102  # --port-base moves all three


def start(server: str, repository: Path) -> subprocess.Popen[bytes]:
    ports = ["--http-port", str(HTTP), "--grpc-port", str(GRPC), "--metrics-port", str(METRICS)]
    environment = None
    if server == "triton":
        command = [str(REFERENCE / "tritonserver"), "--model-repository", str(repository), *ports]
    else:
        implementation, _, source = server.partition("@")
        # -P: the working directory (this tree, when run from it) must not come before PYTHONPATH's
        command = [sys.executable, "-P", "-c", "from tcli.main import run; run()"]
        command += ["serve", "--model-repository", str(repository), *ports]
        command += ["--grpc-implementation", implementation]
        if source:  # that tree's `server` and `tcli` packages come first on the path
            environment = {**os.environ, "PYTHONPATH": str(Path(source).resolve())}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://localhost:{HTTP}/v2/health/ready")
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{server} did not become ready on port {HTTP}")


def cpu_seconds(process: psutil.Process) -> float:
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        times = each.cpu_times()
        total += times.user + times.system
    return total


def inference_count(model: str) -> int:
    with urllib.request.urlopen(f"http://localhost:{HTTP}/v2/models/{model}/stats") as answer:
        return int(json.load(answer)["model_stats"][0]["inference_count"])


def measure(server: str, args: argparse.Namespace) -> None:
    process = start(server, args.repository)
    watched = psutil.Process(process.pid)
    port = GRPC if args.protocol == "grpc" else HTTP
    try:
        for concurrency in args.concurrency:
            count, cpu = inference_count(args.model), cpu_seconds(watched)
            with tempfile.NamedTemporaryFile(suffix=".csv") as report:
                run = subprocess.run(
                    [
                        str(REFERENCE / "perf_analyzer"),
                        *("-m", args.model, "-u", f"localhost:{port}", "-i", args.protocol),
                        *("--concurrency-range", str(concurrency), "--measurement-interval", "2000"),
                        *("-s", "1000", "--max-trials", "3", "--percentile", "99", "-f", report.name),
                    ],
                    capture_output=True,
                    text=True,
                )
                served, used = inference_count(args.model) - count, cpu_seconds(watched) - cpu
                if run.returncode:
                    print(f"{server:7} c{concurrency}: perf_analyzer failed: {run.stdout[-200:]!r}")
                    continue
                with open(report.name) as written:
                    row = list(csv.DictReader(written))[-1]
            percentiles = "/".join(f"{int(row[f'p{p} latency']):5}" for p in (50, 90, 99))
            print(
                f"{server:7} {args.protocol} c{concurrency}: {float(row['Inferences/Second']):7.0f} infer/s"
                f"  p50/p90/p99 {percentiles} µs  server CPU {1e6 * used / max(served, 1):5.0f} µs/req",
                flush=True,
            )
    finally:
        process.terminate()
        process.wait()


def main() -> None:
    global HTTP, GRPC, METRICS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, help="default: the example model alone")
    parser.add_argument("--server", nargs="+", default=["native", "grpcio", "triton"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--protocol", default="grpc", choices=["grpc", "http"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--model", default="add_sub")
    parser.add_argument("--port-base", type=int, default=HTTP, help="HTTP port; gRPC and metrics follow")
    args = parser.parse_args()
    HTTP, GRPC, METRICS = args.port_base, args.port_base + 1, args.port_base + 2
    with tempfile.TemporaryDirectory() as scratch:
        if args.repository is None:
            args.repository = Path(scratch)
            (args.repository / args.model).symlink_to(ROOT / "model_repository" / args.model)
        for round_ in range(args.rounds):
            for server in args.server if round_ % 2 == 0 else reversed(args.server):
                measure(server, args)


if __name__ == "__main__":
    main()
