"""What every scenario shares: the run's mode (default or --quick), its scratch directory, the
measurement windows given to both load generators, and interleaved repetition."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from benchmarks.harness import Measurement, Windows

T = TypeVar("T")


@dataclass
class Context:
    quick: bool
    workdir: Path
    windows: Windows
    rounds: int  # how many times each side of a comparison is measured, interleaved
    _reports: itertools.count[int] = field(default_factory=itertools.count)

    def report(self, tag: str) -> Path:
        """A fresh path for one load generator's CSV report."""
        return self.workdir / f"{next(self._reports):03d}-{tag}.csv"

    def pick(self, default: T, quick: T) -> T:
        return quick if self.quick else default


def interleaved(sides: Sequence[Callable[[], T]], rounds: int) -> list[list[T]]:
    """Each side measured `rounds` times, the order reversed every round (A B, B A, ...) so that a
    drift of the machine's load over the run falls on both sides alike. Result: per side, its runs."""
    results: list[list[T]] = [[] for _ in sides]
    for round_index in range(rounds):
        order = list(range(len(sides)))
        if round_index % 2:
            order.reverse()
        for index in order:
            results[index].append(sides[index]())
    return results


@dataclass
class Summary:
    """The median of a side's successful runs (throughput and p99 taken separately)."""

    throughput: float
    p50_us: float
    p99_us: float
    runs: list[float]
    responses: float | None = None


def round_ratios(ours: Sequence[Measurement | None], theirs: Sequence[Measurement | None]) -> str:
    """The ratio of each round's pair (measured back to back), to show the spread behind a median."""
    pairs = [f"{a.throughput / b.throughput:.2f}" for a, b in zip(ours, theirs, strict=True) if a and b]
    return "rounds " + ", ".join(pairs) if len(pairs) > 1 else ""


def summarize(runs: Sequence[Measurement | None]) -> Summary | None:
    done = [m for m in runs if m is not None]
    if not done:
        return None
    responses = [m.responses for m in done if m.responses is not None]
    return Summary(
        statistics.median(m.throughput for m in done),
        statistics.median(m.p50_us for m in done),
        statistics.median(m.p99_us for m in done),
        [m.throughput for m in done],
        statistics.median(responses) if responses else None,
    )
