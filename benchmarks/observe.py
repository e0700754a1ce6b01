"""What a load generator run cost and what the server really served, watched from outside both.

While a tool runs, a thread samples every PERIOD: the tool's CPU time (its process and children,
psutil), the server's CPU time (the same) and the model's `inference_count` from the statistics
extension. The steady part of the run (load on, start-up and tear-down trimmed) gives the ground
truth (inferences/s the server completed), each side's utilisation (% of one core) and CPU per
inference. A tool at ~100% of its core is the bottleneck, not the server. `counts` reads a model's
inference and execution counts, whose differences over a run give its mean executed batch size.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from dataclasses import dataclass

import psutil

PERIOD = 0.1  # seconds between samples
TRIM = 0.3  # seconds dropped after the load starts and before it stops


@dataclass(frozen=True)
class Sample:
    at: float
    tool_cpu: float
    server_cpu: float
    count: int


@dataclass(frozen=True)
class Observation:
    served: float  # inferences/s the server completed over the steady part
    tool_pct: float  # the tool's CPU use, % of one core
    tool_us: float  # the tool's CPU per inference, µs
    server_pct: float
    server_us: float

    def note(self, name: str) -> str:
        return f"{name} {self.tool_pct:.0f}% core ({self.tool_us:.0f} µs/inf)"


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds a process has used so far; 0 once it is gone."""
    with contextlib.suppress(psutil.NoSuchProcess):
        times = process.cpu_times()
        return times.user + times.system
    return 0.0


class _Tree:
    """CPU seconds used by a process and its children, remembering children that exited."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.seen: dict[int, float] = {}

    def cpu(self) -> float:
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in [self.root, *self.root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    times = process.cpu_times()
                    self.seen[process.pid] = times.user + times.system
        return sum(self.seen.values())


@dataclass(frozen=True)
class Counts:
    """A model's statistics counters, summed over its versions: requests' inferences (a batch of n
    counts n) and executions (a batch counts 1)."""

    inferences: int
    executions: int

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.inferences + other.inferences, self.executions + other.executions)

    def __sub__(self, earlier: Counts) -> Counts:
        return Counts(self.inferences - earlier.inferences, self.executions - earlier.executions)

    @property
    def mean_batch(self) -> float | None:
        """The mean executed batch size; None when nothing was executed."""
        return self.inferences / self.executions if self.executions > 0 else None


def counts(stats_url: str) -> Counts:
    """`GET /v2/models/<model>/stats` (the statistics extension, both servers)."""
    with urllib.request.urlopen(stats_url, timeout=2) as response:
        stats = json.load(response)["model_stats"]
    return Counts(
        sum(int(entry["inference_count"]) for entry in stats),
        sum(int(entry["execution_count"]) for entry in stats),
    )


def inference_count(stats_url: str) -> int:
    return counts(stats_url).inferences


class Watch:
    """Samples a tool and a server in a thread between `start(tool_pid)` and `stop()`."""

    def __init__(self, server_pid: int, stats_url: str) -> None:
        self.server = _Tree(server_pid)
        self.stats_url = stats_url
        self.samples: list[Sample] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, tool_pid: int) -> None:
        tool = _Tree(tool_pid)

        def loop() -> None:
            while not self._done.is_set():
                with contextlib.suppress(OSError, ValueError, KeyError):
                    count = inference_count(self.stats_url)
                    self.samples.append(Sample(time.monotonic(), tool.cpu(), self.server.cpu(), count))
                self._done.wait(PERIOD)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> Observation | None:
        self._done.set()
        if self._thread:
            self._thread.join()
        return steady(self.samples)


def steady(samples: list[Sample]) -> Observation | None:
    """The figures over the samples while the count grew, TRIM seconds cut at both ends."""
    if len(samples) < 3:
        return None
    first, final = samples[0].count, samples[-1].count
    began = next((s.at for s in samples if s.count > first), None)
    ended = next((s.at for s in samples if s.count >= final), None)
    if began is None or ended is None:
        return None
    inside = [s for s in samples if began + TRIM <= s.at <= ended - TRIM]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    seconds, served = b.at - a.at, b.count - a.count
    if seconds <= 0 or served <= 0:
        return None
    tool, server = b.tool_cpu - a.tool_cpu, b.server_cpu - a.server_cpu
    return Observation(
        served=served / seconds,
        tool_pct=100 * tool / seconds,
        tool_us=1e6 * tool / served,
        server_pct=100 * server / seconds,
        server_us=1e6 * server / served,
    )
