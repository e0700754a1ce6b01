"""What a candidate measured, and how candidates compare: each config's operating point under the
constraints, the ranking (the best under the constraints first), the Pareto front, and the closest
miss when no config meets the constraints.

A config's operating point is its concurrency level that best serves the objective among those that
meet the constraints (p99 within --latency-budget, throughput at least --min-throughput): the
highest throughput, or with `--objective latency` the lowest p99. Two configs whose scores are within
the measurement's noise (the stability percentage, at most 10%) are a tie, and the tie goes to the one that
uses less: fewer instances, then a smaller max batch size, then fewer changes from the model's config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tcli.analyze.space import DIMENSIONS, Candidate


@dataclass
class Level:
    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p99_ms: float
    stable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "throughput": round(self.throughput, 3),
            "p50_ms": round(self.p50_ms, 4),
            "p99_ms": round(self.p99_ms, 4),
            "stable": self.stable,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Level:
        return cls(
            int(data["concurrency"]),
            float(data["throughput"]),
            float(data["p50_ms"]),
            float(data["p99_ms"]),
            bool(data.get("stable", True)),
        )


@dataclass
class Measured:
    candidate: Candidate
    levels: list[Level] = field(default_factory=list)
    error: str | None = None  # the config failed to load or to serve

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.to_dict(),
            "levels": [level.to_dict() for level in self.levels],
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        return cls(
            Candidate.from_dict(data["candidate"]),
            [Level.from_dict(level) for level in data.get("levels", [])],
            data.get("error"),
        )


@dataclass
class Constraints:
    latency_budget_ms: float | None = None
    min_throughput: float | None = None
    objective: str = "throughput"  # throughput | latency
    tolerance: float = 0.10  # scores this close (a fraction) are a tie: within a measurement's noise

    def meets(self, level: Level) -> bool:
        if self.latency_budget_ms is not None and level.p99_ms > self.latency_budget_ms:
            return False
        return not (self.min_throughput is not None and level.throughput < self.min_throughput)

    def describe(self) -> str:
        parts = []
        if self.latency_budget_ms is not None:
            parts.append(f"p99 <= {self.latency_budget_ms:g} ms")
        if self.min_throughput is not None:
            parts.append(f"throughput >= {self.min_throughput:g} infer/s")
        return " and ".join(parts) or "no constraints"

    def score(self, level: Level) -> float:
        """Higher is better."""
        return level.throughput if self.objective == "throughput" else -level.p99_ms

    def miss(self, level: Level) -> float:
        """How far a level is from meeting the constraints (0: it meets them), as a ratio."""
        over = 0.0
        if self.latency_budget_ms is not None and level.p99_ms > self.latency_budget_ms:
            over += level.p99_ms / self.latency_budget_ms - 1.0
        if self.min_throughput is not None and level.throughput < self.min_throughput:
            over += self.min_throughput / max(level.throughput, 1e-9) - 1.0
        return over


@dataclass
class Row:
    """One config in the report: its operating point and where it stands."""

    measured: Measured
    point: Level | None  # None: nothing measured (the config failed)
    meets: bool
    front: bool = False
    rank: int = 0  # 1: the best under the constraints; 0: does not meet them
    # the same config served over HTTP (verify.py), when it was checked: its levels there, and its
    # operating point among them (whether it meets the constraints served)
    served: Measured | None = None
    served_point: Level | None = None
    served_meets: bool = False

    @property
    def candidate(self) -> Candidate:
        return self.measured.candidate


def operating_point(measured: Measured, constraints: Constraints) -> tuple[Level | None, bool]:
    """The config's level that best serves the objective within the constraints (and True), or, when
    none meets them, its level closest to meeting them (and False)."""
    if not measured.levels:
        return None, False
    meeting = [level for level in measured.levels if constraints.meets(level)]
    if meeting:
        return max(meeting, key=lambda level: (constraints.score(level), -level.concurrency)), True
    return min(measured.levels, key=lambda level: (constraints.miss(level), -level.throughput)), False


def config_score(measured: Measured, constraints: Constraints) -> float:
    """The best score a config reached within the constraints (-inf when it never met them)."""
    point, meets = operating_point(measured, constraints)
    return constraints.score(point) if point is not None and meets else -math.inf


def _changes(candidate: Candidate, base: Candidate) -> int:
    return sum(getattr(candidate, d) != getattr(base, d) for d in DIMENSIONS)


def _cost(candidate: Candidate, base: Candidate) -> tuple[int, int, int, int]:
    """What a config uses, for breaking ties: fewer instances, smaller batches, fewer changes."""
    return (
        candidate.instance_count,
        candidate.max_batch_size,
        _changes(candidate, base),
        int(bool(candidate.max_queue_delay_us)),
    )


def close_to(score: float, best: float, constraints: Constraints) -> bool:
    """Whether a score ties with the best (within the measurement's noise)."""
    if math.isinf(best) or math.isinf(score):
        return score == best
    return abs(best - score) <= constraints.tolerance * abs(best)


def rank(measured: list[Measured], constraints: Constraints, base: Candidate) -> list[Row]:
    """Every config as a row: those meeting the constraints first, best first (ties to the cheaper
    config), then the others, closest first; Pareto-front rows marked."""
    rows = []
    for item in measured:
        point, meets = operating_point(item, constraints)
        rows.append(Row(item, point, meets))
    meeting = [row for row in rows if row.meets and row.point is not None]
    ordered: list[Row] = []
    pool = list(meeting)
    while pool:  # repeatedly take the cheapest config that ties with the best left
        top = max(constraints.score(row.point) for row in pool if row.point is not None)
        tied = [
            row
            for row in pool
            if row.point is not None and close_to(constraints.score(row.point), top, constraints)
        ]
        choice = min(tied, key=lambda row: (_cost(row.candidate, base), -constraints.score(row.point)))  # type: ignore[arg-type]
        ordered.append(choice)
        pool.remove(choice)
    for position, row in enumerate(ordered, start=1):
        row.rank = position
    others = [row for row in rows if row not in meeting]
    others.sort(
        key=lambda row: (
            row.point is None,
            constraints.miss(row.point) if row.point is not None else math.inf,
        )
    )
    result = ordered + others
    mark_front(result)
    return result


def mark_front(rows: list[Row]) -> None:
    """Mark the rows no other row beats on both throughput (higher) and p99 (lower)."""
    points = [row for row in rows if row.point is not None]
    for row in points:
        assert row.point is not None
        row.front = not any(
            other is not row
            and other.point is not None
            and other.point.throughput >= row.point.throughput
            and other.point.p99_ms <= row.point.p99_ms
            and (other.point.throughput > row.point.throughput or other.point.p99_ms < row.point.p99_ms)
            for other in points
        )


def best(rows: list[Row]) -> Row | None:
    return rows[0] if rows and rows[0].rank == 1 else None


def closest(rows: list[Row]) -> Row | None:
    """The config closest to meeting the constraints (rows put it first among those that miss)."""
    misses = [row for row in rows if not row.meets and row.point is not None]
    return misses[0] if misses else None
