"""The processes a benchmark drives: the reference install, tcli and real Triton 2.51 servers, and
the two load generators (real perf_analyzer 2.51 and `tcli perf`), each optionally pinned to cores."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.observe import Observation, Watch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("TRITON_REFERENCE_DIR", Path.home() / ".cache" / "triton-reference"))
SETUP = ROOT.parent / "shared" / "reference" / "setup-triton.sh"
PERF_ANALYZER = REFERENCE / "bin" / "perf_analyzer"
TRITONSERVER = REFERENCE / "bin" / "tritonserver"
TCLI = Path(sys.executable).parent / "tcli"


def log(message: str) -> None:
    """Progress on stderr, so that the table on stdout stays clean."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_reference() -> None:
    if TRITONSERVER.exists() and PERF_ANALYZER.exists():
        return
    if not SETUP.exists():
        sys.exit(f"real Triton 2.51 is not installed in {REFERENCE} and {SETUP} is missing")
    log("installing the reference Triton 2.51 and perf_analyzer (setup-triton.sh) ...")
    subprocess.run(["bash", str(SETUP), str(REFERENCE)], check=True, stdout=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pinned(cpus: Sequence[int] | None) -> Callable[[], None] | None:
    """A preexec_fn pinning the child (and what it starts) to `cpus`; None leaves it free."""
    if not cpus:
        return None
    chosen = set(cpus)
    return lambda: os.sched_setaffinity(0, chosen)


def _http(method: str, url: str, timeout: float = 2.0) -> int:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


@dataclass
class Server:
    name: str  # "tcli" or "triton"
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log_path: Path
    launched: float  # time.monotonic() at launch

    def address(self, protocol: str) -> str:
        return f"127.0.0.1:{self.http_port if protocol == 'http' else self.grpc_port}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def wait(self, path: str = "/v2/health/ready", timeout: float = 180.0) -> float:
        """Seconds from launch until `path` answers 200; raises when the server exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; see {self.log_path}")
            if _http("GET", self.url(path), timeout=1) == 200:
                return time.monotonic() - self.launched
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} did not answer {path} within {timeout:.0f} s; see {self.log_path}")

    def model_ready(self, model: str) -> bool:
        return _http("GET", self.url(f"/v2/models/{model}/ready")) == 200

    def load(self, model: str) -> int:
        return _http("POST", self.url(f"/v2/repository/models/{model}/load"), timeout=300)

    def unload(self, model: str) -> int:
        return _http("POST", self.url(f"/v2/repository/models/{model}/unload"), timeout=300)

    def rss_bytes(self) -> int:
        """Resident memory of the server and its child processes (python instances may run there)."""
        try:
            root = psutil.Process(self.process.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total

    def stop(self) -> None:
        """SIGTERM to the server itself (it stops its own instance processes), then SIGKILL to
        whatever is left of its process group."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _launch(
    name: str,
    command: list[str],
    log_path: Path,
    cpus: Sequence[int] | None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_pinned(cpus),
        env=env,
        cwd=cwd,
    )


def start_tcli(
    repos: Sequence[Path | str],
    log_path: Path,
    *,
    extra: Sequence[str] = (),
    cpus: Sequence[int] | None = None,
    source: Path | None = None,
) -> Server:
    """`source`: another checkout whose tcli to run (e.g. `git worktree add /tmp/old COMMIT`), in
    this environment; by default this one's."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [str(TCLI), "serve", *map(str, repos), "--http-port", str(http), "--grpc-port", str(grpc)]
    command += ["--metrics-port", str(metrics), *extra]
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    # in `source` too: instance processes start as `python -c`, whose sys.path begins with the working
    # directory, so from a checkout's root they would import that checkout's `server`, not `source`'s
    launched = time.monotonic()
    process = _launch("tcli", command, log_path, cpus, env, source)
    return Server("tcli", process, http, grpc, log_path, launched)


def start_triton(
    repo: Path | str, log_path: Path, *, extra: Sequence[str] = (), cpus: Sequence[int] | None = None
) -> Server:
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        str(TRITONSERVER),
        f"--model-repository={repo}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        *extra,
    ]
    launched = time.monotonic()
    return Server("triton", _launch("triton", command, log_path, cpus), http, grpc, log_path, launched)


# --- load generators --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What to send: a model over a protocol at a concurrency, plus tool flags both tools accept."""

    model: str
    protocol: str  # http | grpc
    concurrency: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Windows:
    """How to measure, given identically to both tools: window length, stability rule, trials."""

    interval_ms: int
    stability_pct: int = 25
    max_trials: int = 20


@dataclass
class Measurement:
    throughput: float  # inferences/s
    p50_us: int
    p99_us: int
    responses: float | None = None  # responses/s, decoupled models
    avg_us: int | None = None  # the tool's average latency (None when it reports a percentile)
    observed: Observation | None = None  # from outside the tool, when it was watched


def perf_analyzer(
    load: Load,
    server: Server,
    windows: Windows,
    report: Path,
    cpus: Sequence[int] | None = None,
    watch: bool = False,
) -> Measurement | None:
    """Real perf_analyzer 2.51; None (its output on stderr) when it fails, e.g. cannot stabilise.
    `watch`: also sample its CPU, the server's and the model's inference_count (benchmarks/observe.py)."""
    return _measure([str(PERF_ANALYZER)], load, server, windows, report, cpus, watch)


def tcli_perf(
    load: Load,
    server: Server,
    windows: Windows,
    report: Path,
    cpus: Sequence[int] | None = None,
    watch: bool = False,
) -> Measurement | None:
    return _measure([str(TCLI), "perf"], load, server, windows, report, cpus, watch)


def _measure(
    tool: list[str],
    load: Load,
    server: Server,
    windows: Windows,
    report: Path,
    cpus: Sequence[int] | None,
    watch: bool = False,
) -> Measurement | None:
    command = [
        *tool,
        "-m",
        load.model,
        "-i",
        load.protocol,
        "-u",
        server.address(load.protocol),
        "--concurrency-range",
        f"{load.concurrency}:{load.concurrency}",
        *load.flags,
        "--measurement-interval",
        str(windows.interval_ms),
        "-s",
        str(windows.stability_pct),
        "--max-trials",
        str(windows.max_trials),
        "-f",
        str(report),
    ]
    report.unlink(missing_ok=True)  # a stale report must not stand in for a failed run
    watcher = Watch(server.process.pid, server.url(f"/v2/models/{load.model}/stats")) if watch else None
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_pinned(cpus)
    )
    if watcher:
        watcher.start(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        process.kill()  # as subprocess.run would: no tool outlives its run
        process.communicate()
        raise
    finally:
        observed = watcher.stop() if watcher else None
    if process.returncode != 0 or not report.exists():
        tail = (stdout[-800:] + stderr[-800:]).strip()
        log(f"{Path(tool[0]).name} {' '.join(tool[1:])} failed on {load.model} c={load.concurrency}: {tail}")
        return None
    with report.open() as handle:
        row = next(csv.DictReader(handle))
    responses = row.get("Response Throughput")
    average = re.search(r"Avg latency: (\d+) usec", stdout)
    return Measurement(
        float(row["Inferences/Second"]),
        int(row["p50 latency"]),
        int(row["p99 latency"]),
        float(responses) if responses else None,
        int(average.group(1)) if average else None,
        observed,
    )
