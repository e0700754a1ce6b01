"""perf_analyzer's measurement loop over tcli's load generator processes.

For each load level (a concurrency or a request rate): set the load on every worker process, then
measure windows of --measurement-interval x 1.2 (perf_analyzer sleeps 1.2 windows) back to back.
A window's requests are those whose response completed inside it; its server side is the delta of
the statistics extension between the window's start and end. After each window the stability rule
is checked on the last three; once stable, the three are merged into the level's result.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Protocol

from tcli.errors import CliError
from tcli.perf.load_spec import LoadSpec, now_ns
from tcli.perf.stats import (
    STABILITY_WINDOW,
    ClientWindow,
    LatencySummary,
    ModelId,
    ServerStats,
    is_stable,
    merge_client_windows,
    merge_server_stats,
    server_delta,
    summarize_latencies,
)

WINDOW_STRETCH = 1.2  # perf_analyzer measures measurement_window * 1.2 per window


@dataclass
class Settings:
    mode: str  # "concurrency" | "rate"
    measurement_ms: int = 5000
    stability: float = 0.10  # fraction
    max_trials: int = 10
    percentile: int = -1
    async_mode: bool = False
    latency_threshold_ms: int = 0  # 0 = none
    batch_size: int = 1
    poisson: bool = False
    processes: int = 1


@dataclass
class Window:
    client: ClientWindow
    server: ServerStats | None
    latency: LatencySummary | None  # None when no request completed in the window
    busy_pct: float  # the busiest worker's CPU use, % of one core
    sent: int = 0

    @property
    def infer_per_sec(self) -> float:
        return self.client.infer_per_sec if self.latency is not None else 0.0

    def stabilizing_ns(self, percentile: int) -> float:
        return float(self.latency.stabilizing_ns(percentile)) if self.latency is not None else float("inf")


@dataclass
class LevelResult:
    value: float  # the concurrency or the request rate
    client: ClientWindow
    latency: LatencySummary | None
    server: ServerStats | None
    windows: list[Window] = field(default_factory=list)
    stable: bool = True
    interrupted: bool = False
    busy_pct: float = 0.0
    send_rate: float = 0.0  # request-rate mode: requests sent per second
    notes: list[str] = field(default_factory=list)
    spread: float = 0.0  # the reported windows' throughput disagreement (max / min - 1)

    def stabilizing_ns(self, percentile: int) -> int:
        return self.latency.stabilizing_ns(percentile) if self.latency is not None else 0


class Events(Protocol):
    """What the profiler reports while it measures (the command renders it as live progress)."""

    def level_started(self, value: float) -> None: ...

    def window_progress(self, trial: int, elapsed: float, total: float) -> None: ...

    def window_done(self, trial: int, window: Window) -> None: ...


class _Quiet:
    def level_started(self, value: float) -> None:
        pass

    def window_progress(self, trial: int, elapsed: float, total: float) -> None:
        pass

    def window_done(self, trial: int, window: Window) -> None:
        pass


class WorkerProcess:
    def __init__(self, spec: LoadSpec) -> None:
        parent, child = socket.socketpair()
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the worker's stderr, read if it dies
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from tcli.perf.worker import main; main()", str(child.fileno())],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            start_new_session=False,
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send(spec)
        self.last_cpu_ns = 0
        self.last_at_ns = 0

    def wait_ready(self, timeout: float = 60.0) -> None:
        if not self.conn.poll(timeout):
            raise CliError("a load generator process did not start within a minute")
        self.receive()

    def send(self, message: tuple[Any, ...]) -> None:
        try:
            self.conn.send(message)
        except OSError:
            raise CliError(self._died()) from None

    def receive(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise CliError(self._died()) from None

    def _died(self) -> str:
        self.process.wait(5)
        self.log.seek(0)
        lines = [line for line in self.log.read().decode("utf-8", "replace").splitlines() if line.strip()]
        detail = f": {lines[-1]}" if lines else ""
        return f"a load generator process exited unexpectedly (code {self.process.returncode}){detail}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def shares(total: float, parts: int, whole: bool) -> list[float]:
    """Split a concurrency (whole numbers) or a rate over the worker processes."""
    if whole:
        count = int(total)
        return [float(count // parts + (1 if k < count % parts else 0)) for k in range(parts)]
    return [total / parts] * parts


class Profiler:
    def __init__(
        self,
        spec: LoadSpec,
        settings: Settings,
        read_stats: Callable[[], Mapping[ModelId, ServerStats]] | None,
        model: ModelId,
        composing: Mapping[str, list[tuple[str, str]]],
        events: Events | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.read_stats = read_stats
        self.model = model
        self.composing = composing
        self.events: Events = events or _Quiet()
        self.workers: list[WorkerProcess] = []
        self.pending: list[tuple[Any, Any, Any]] = []  # records that ended after the last window

    # worker processes -----------------------------------------------------------------------------
    def start(self) -> None:
        count = max(1, self.settings.processes)
        for index in range(count):
            own = replace(
                self.spec,
                sequence_id_offset=index,
                sequence_id_stride=count,
                seed=self.spec.seed + index,
            )
            self.workers.append(WorkerProcess(own))
        for worker in self.workers:
            worker.wait_ready()

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.send(("stop",))
            except CliError:
                continue
        deadline = time.monotonic() + 10.0
        for worker in self.workers:
            # drain answers (a collect cut short by Ctrl-C may still be queued) until the worker exits
            with contextlib.suppress(OSError, EOFError):
                while worker.conn.poll(max(0.0, deadline - time.monotonic())):
                    worker.conn.recv()
            worker.close()
        self.workers.clear()

    def __enter__(self) -> Profiler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_load(self, value: float) -> None:
        concurrency = self.settings.mode == "concurrency"
        for worker, share in zip(
            self.workers, shares(value, len(self.workers), whole=concurrency), strict=True
        ):
            if concurrency:
                worker.send(("concurrency", int(share)))
            else:
                worker.send(("rate", share, self.settings.poisson))

    def _collect(self) -> tuple[list[dict[str, Any]], float]:
        """Every worker's records since the last collect, and the busiest worker's CPU use (%)."""
        for worker in self.workers:
            worker.send(("collect",))
        answers = [worker.receive() for worker in self.workers]
        busiest = 0.0
        for worker, answer in zip(self.workers, answers, strict=True):
            if answer["errors"]:
                raise CliError(f"inference request failed: {answer['first_error']}")
            if worker.last_at_ns:
                wall = answer["at_ns"] - worker.last_at_ns
                if wall > 0:
                    busiest = max(busiest, 100.0 * (answer["cpu_ns"] - worker.last_cpu_ns) / wall)
            worker.last_cpu_ns, worker.last_at_ns = answer["cpu_ns"], answer["at_ns"]
        return answers, busiest

    # one window -----------------------------------------------------------------------------------
    def _window(self, start_ns: int, end_ns: int, answers: list[dict[str, Any]]) -> ClientWindow:
        import numpy as np

        starts = [np.frombuffer(a["starts"], dtype=np.int64) for a in answers]
        ends = [np.frombuffer(a["ends"], dtype=np.int64) for a in answers]
        flags = [np.frombuffer(a["sequence_ends"], dtype=np.int8) for a in answers]
        for s, e, f in self.pending:
            starts.append(s)
            ends.append(e)
            flags.append(f)
        all_starts = np.concatenate(starts) if starts else np.empty(0, np.int64)
        all_ends = np.concatenate(ends) if ends else np.empty(0, np.int64)
        all_flags = np.concatenate(flags) if flags else np.empty(0, np.int8)
        valid = (all_ends >= start_ns) & (all_ends <= end_ns) & (all_starts <= all_ends)
        later = all_ends > end_ns
        self.pending = [(all_starts[later], all_ends[later], all_flags[later])] if later.any() else []
        latencies = np.sort(all_ends[valid] - all_starts[valid])
        return ClientWindow(
            duration_ns=end_ns - start_ns,
            latencies_ns=latencies.tolist(),
            batch_size=max(1, self.settings.batch_size),
            sequence_count=int(all_flags[valid].sum()),
            delayed_count=sum(int(a["delayed"]) for a in answers),
            completed_count=sum(int(a["completed"]) for a in answers),
            request_time_ns=sum(int(a["request_ns"]) for a in answers),
            send_time_ns=sum(int(a["send_ns"]) for a in answers),
            receive_time_ns=sum(int(a["receive_ns"]) for a in answers),
        )

    def _wait_window(self, trial: int) -> None:
        total = self.settings.measurement_ms * WINDOW_STRETCH / 1000.0
        began = time.monotonic()
        while True:
            elapsed = time.monotonic() - began
            if elapsed >= total:
                return
            self.events.window_progress(trial, elapsed, total)
            time.sleep(min(0.1, total - elapsed))

    # one level ------------------------------------------------------------------------------------
    def measure(self, value: float) -> LevelResult:
        """Measure one load level until stable or --max-trials; Ctrl-C ends it early, keeping the
        windows measured so far (LevelResult.interrupted)."""
        settings = self.settings
        self.events.level_started(value)
        self._set_load(value)
        self._collect()  # a fresh start: drop what completed before this level
        self.pending = []
        windows: list[Window] = []
        window_start = now_ns()
        start_stats = self.read_stats() if self.read_stats else None
        stable = False
        interrupted = False
        try:
            for trial in range(settings.max_trials):
                self._wait_window(trial)
                window_end = now_ns()
                end_stats = self.read_stats() if self.read_stats else None
                answers, busy = self._collect()
                client = self._window(window_start, window_end, answers)
                server = (
                    server_delta(self.model, start_stats or {}, end_stats, self.composing)
                    if end_stats is not None
                    else None
                )
                latency = (
                    summarize_latencies(client.latencies_ns, settings.percentile)
                    if client.latencies_ns
                    else None
                )
                window = Window(client, server, latency, busy, sent=sum(int(a["sent"]) for a in answers))
                windows.append(window)
                self.events.window_done(trial, window)
                window_start, start_stats = window_end, end_stats
                stable = is_stable(
                    [w.infer_per_sec for w in windows],
                    [w.stabilizing_ns(settings.percentile) for w in windows],
                    settings.stability,
                )
                if stable:
                    break
                if settings.latency_threshold_ms and len(windows) >= STABILITY_WINDOW:
                    recent = windows[-STABILITY_WINDOW:]
                    limit = settings.latency_threshold_ms * 1_000_000
                    if any(w.stabilizing_ns(settings.percentile) >= limit for w in recent):
                        break
        except KeyboardInterrupt:
            interrupted = True
        result = self._result(value, windows, stable, interrupted)
        # perf_analyzer: with asynchronous requests, throughput alone may make a level stable
        if (
            not stable
            and not interrupted
            and settings.async_mode
            and is_stable(
                [w.infer_per_sec for w in windows],
                [w.stabilizing_ns(settings.percentile) for w in windows],
                settings.stability,
                check_latency=False,
            )
        ):
            result.stable = True
            result.notes.append(
                "Warning: Request latency is not stabilizing. Please try lowering the request rate."
            )
        return result

    def _result(self, value: float, windows: list[Window], stable: bool, interrupted: bool) -> LevelResult:
        recent = [w for w in windows[-STABILITY_WINDOW:]]
        if not stable and not interrupted:  # the level's best measurement: its steadiest windows
            recent = steadiest(windows)
        measured = [w for w in recent if w.latency is not None]
        if not measured:
            empty = ClientWindow(0, [], max(1, self.settings.batch_size))
            return LevelResult(value, empty, None, None, windows, stable=False, interrupted=interrupted)
        client = merge_client_windows(w.client for w in measured)
        servers = [w.server for w in measured if w.server is not None]
        seconds = sum(w.client.duration_ns for w in measured) / 1e9
        return LevelResult(
            value=value,
            client=client,
            latency=summarize_latencies(client.latencies_ns, self.settings.percentile),
            server=merge_server_stats(servers) if servers else None,
            windows=windows,
            stable=stable,
            interrupted=interrupted,
            busy_pct=max(w.busy_pct for w in measured),
            send_rate=sum(w.sent for w in measured) / seconds if seconds else 0.0,
            spread=spread([w.infer_per_sec for w in measured]),
        )


def spread(infer_per_sec: list[float]) -> float:
    """How far the windows' throughputs disagree: max / min - 1 (0.10 is perf_analyzer's default limit)."""
    low = min(infer_per_sec, default=0.0)
    return max(infer_per_sec) / low - 1 if low > 0 else float("inf")


def steadiest(windows: list[Window]) -> list[Window]:
    """Of a level that never became stable, the STABILITY_WINDOW consecutive windows whose throughputs
    agree best (the later on a tie), all with completed requests; the last ones when none qualify."""
    best: list[Window] = windows[-STABILITY_WINDOW:]
    best_spread = float("inf")
    for start in range(len(windows) - STABILITY_WINDOW + 1):
        run = windows[start : start + STABILITY_WINDOW]
        if any(w.latency is None for w in run):
            continue
        value = spread([w.infer_per_sec for w in run])
        if value <= best_spread:
            best, best_spread = run, value
    return best


def default_processes(mode: str, value: float, protocol: str) -> int:
    """How many load generator processes a level needs, at most one per core.

    Measured (2 cores shared with the server, Python 3.11, uvloop): against servers that answer at
    once, one process sends ~45,000 HTTP requests/s using 85% of a core (19-24 µs of CPU per request)
    and ~29,000 gRPC requests/s through the raw HTTP/2 driver (25-34 µs; grpc.aio costs 100-190 µs).
    Against real Triton's add_sub (4,000-8,000 infer/s here) a process is 20-35% busy. So one process
    is enough unless the load itself is very large; a process busier than 90% of a core is reported.
    """
    cores = os.cpu_count() or 1
    if mode == "concurrency":
        wanted = -(-int(value) // PER_PROCESS_CONCURRENCY.get(protocol, 64))
    else:
        wanted = -(-int(value) // PER_PROCESS_RATE.get(protocol, 12000))
    return max(1, min(cores, wanted))


# Load one worker process takes on before another is started (about half of its measured ceiling).
PER_PROCESS_CONCURRENCY = {"http": 128, "grpc": 64}
PER_PROCESS_RATE = {"http": 20000, "grpc": 12000}
