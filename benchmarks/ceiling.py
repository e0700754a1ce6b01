"""The ceiling a server's onnxruntime backend can reach: onnxruntime in this process, no server, on the
same graph, in its best configuration of batch size, intra-op threads and parallel sessions (each
session its own InferenceSession, driven by its own thread; onnxruntime releases the GIL in run())."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class OrtConfig:
    batch: int
    threads: int  # intra_op_num_threads per session
    sessions: int

    def describe(self) -> str:
        return f"batch {self.batch}, {self.sessions} session(s) x {self.threads} intra-op thread(s)"


@dataclass
class CeilingResult:
    best: OrtConfig
    throughput: float  # inferences/s of the best configuration
    tried: dict[OrtConfig, float]


def _session(model: bytes, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()  # what tcli's backend builds for intra_op_thread_count
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _feed(session: Any, batch: int) -> dict[str, np.ndarray[Any, Any]]:
    feed = {}
    for value in session.get_inputs():
        shape = [batch, *(d if isinstance(d, int) else 1 for d in value.shape[1:])]
        feed[value.name] = np.random.default_rng(0).random(shape, dtype=np.float32)
    return feed


def measure(sessions: Sequence[Any], batch: int, seconds: float) -> float:
    """Inferences/s of `sessions` each running batches of `batch` back to back for `seconds`."""
    feeds = [_feed(session, batch) for session in sessions]
    for session, feed in zip(sessions, feeds, strict=True):
        session.run(None, feed)  # warm-up: first-run allocations
    counts = [0] * len(sessions)
    start = threading.Barrier(len(sessions) + 1)
    deadline = [0.0]

    def drive(index: int) -> None:
        session, feed = sessions[index], feeds[index]
        start.wait()
        while time.perf_counter() < deadline[0] or counts[index] < 1:
            session.run(None, feed)
            counts[index] += 1

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(len(sessions))]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    return sum(counts) * batch / (time.perf_counter() - began)


def search(
    model: bytes,
    batches: Sequence[int],
    seconds: float,
    threads: Sequence[int] = (1, 2),
    sessions: Sequence[int] = (1, 2),
    max_threads: int | None = None,
) -> CeilingResult:
    """Every combination; with `max_threads`, those whose sessions x threads exceed it are skipped
    (oversubscribing the cores has never won here, and --quick has no time for it)."""
    tried: dict[OrtConfig, float] = {}
    for thread_count in threads:
        counts = [s for s in sessions if max_threads is None or s * thread_count <= max_threads]
        pool = [_session(model, thread_count) for _ in range(max(counts, default=0))]
        for session_count, batch in itertools.product(counts, batches):
            config = OrtConfig(batch, thread_count, session_count)
            tried[config] = measure(pool[:session_count], batch, seconds)
        del pool
    best = max(tried, key=lambda c: tried[c])
    return CeilingResult(best, tried[best], tried)


def remeasure(model: bytes, config: OrtConfig, seconds: float) -> float:
    pool = [_session(model, config.threads) for _ in range(config.sessions)]
    return measure(pool, config.batch, seconds)
