"""The check before a recommendation: the best configs measured in-process, served over HTTP.

In-process figures leave the front end out (no socket, no HTTP parsing, no load generator process
sharing the cores), so a config can meet the budget in-process at a concurrency where, served, it
does not: on this project's 2-core machine the config tcli analyze chose for the benchmark's model
(benchmarks/analyze_vs_ma.py) met a 20 ms p99 budget at concurrency 64 in-process, and served by
`tcli serve` to perf_analyzer over HTTP measured p99 43-47 ms there (16 ms at concurrency 32).

So before it recommends a config, tcli analyze serves it through tcli's HTTP front end (the one
`tcli serve` runs, started on the in-process server, on 127.0.0.1 and a free port) and measures it
with perf's load generator process over HTTP, with the same windows and stability rule: from the
concurrency it was best at in-process down the sweep's ladder, one level at a time, until a level
meets the constraints. That level is the recommended concurrency, and its figures are the
recommended ones. A level over the budget is measured once more first when its p50 is within it (it
may be a busy machine's stall), as a sweep does.

Served figures are lower than in-process ones, so the runner-up may serve more than the best does:
a config whose in-process score beats the best served score so far is checked too, MAX_CHECKED
configs in all. The checked configs are ranked by what they served, with the rules of results.py
(ties within the noise go to the cheaper config), ahead of the configs not checked.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tcli.analyze.results import Constraints, Level, Measured, Row, rank
from tcli.analyze.space import Candidate
from tcli.analyze.sweep import measure_level, over_budget, warm_up

if TYPE_CHECKING:
    from tcli.perf.profiler import Profiler

MAX_CHECKED = 3  # configs served over HTTP at most, per model
RETRIES = 1  # levels over the budget measured once more, per config checked
SETTLE_MAX_S = 1.0


def served_levels(
    profiler: Profiler,
    concurrencies: list[int],
    start: int,
    constraints: Constraints,
    min_requests: int = 0,
) -> list[Level]:
    """The config's levels served: from `start` down the ladder until one meets the budget (or the
    ladder ends); lowest concurrency first."""
    index = max((i for i, value in enumerate(concurrencies) if value <= start), default=0)
    warm_up(profiler, concurrencies[index], min_requests)
    budget = constraints.latency_budget_ms
    retries = RETRIES
    levels: list[Level] = []
    while index >= 0:
        level = measure_level(profiler, concurrencies[index])
        over = over_budget(level, constraints)
        if over and retries and level.throughput > 0 and (budget is None or level.p50_ms <= budget):
            retries -= 1
            again = measure_level(profiler, concurrencies[index])
            level = min(level, again, key=lambda measured: measured.p99_ms)
            over = over_budget(level, constraints)
        levels.append(level)
        if not over:  # within the budget (a throughput floor is not met by less load either)
            break
        index -= 1
        if index >= 0:
            settle(profiler, concurrencies[index], level)
    return sorted(levels, key=lambda level: level.concurrency)


def settle(profiler: Profiler, concurrency: int, above: Level) -> None:
    """Lower the load, and let the requests the higher level left queued finish before the lower
    one is measured: for as long as they waited there (its p99), at most SETTLE_MAX_S. Measured at
    once, a short level's windows held mostly the higher level's latencies."""
    profiler._set_load(concurrency)
    wait = above.p99_ms / 1000.0 if math.isfinite(above.p99_ms) else SETTLE_MAX_S
    time.sleep(min(SETTLE_MAX_S, wait))


Check = Callable[[Row], Measured]  # serves one row's config over HTTP: its levels there


def check_best(
    rows: list[Row],
    check: Check,
    constraints: Constraints,
    base: Candidate,
    most: int = MAX_CHECKED,
) -> list[Row]:
    """Serve the best rows over HTTP (the module's text) and order every row for the
    recommendation: those checked that meet the constraints served, by what they served; those not
    checked that meet them in-process; those checked that do not meet them served; the rest."""
    checked = 0
    for row in rows:
        if checked == most:
            break
        if not row.rank or row.point is None:
            continue
        served = _served_order(rows, constraints, base)
        leader = served[0] if served and served[0].served_meets else None
        if (
            leader is not None
            and leader.served_point is not None
            and constraints.score(row.point) <= constraints.score(leader.served_point)
        ):
            continue  # served, it would serve less than it did in-process: it cannot beat the leader
        row.served = check(row)
        checked += 1
    if not checked:
        return rows
    served = _served_order(rows, constraints, base)
    passed = [row for row in served if row.served_meets]
    failed = [row for row in served if not row.served_meets]
    unchecked = [row for row in rows if row.served is None and row.rank]
    others = [row for row in rows if row.served is None and not row.rank]
    for row in rows:
        row.rank = 0
    # a config is recommended only once it served within the constraints: when none of those checked
    # did, no config has a rank (the command says so, naming the closest served)
    if passed:
        for position, row in enumerate(passed + unchecked, start=1):
            row.rank = position
    return passed + unchecked + failed + others


def _served_order(rows: list[Row], constraints: Constraints, base: Candidate) -> list[Row]:
    """The checked rows, ranked by what they served (results.py's rules), each row's served point
    and whether it meets the constraints served set."""
    checked = {row.candidate.key(): row for row in rows if row.served is not None}
    order = []
    for ranked in rank([row.served for row in checked.values() if row.served is not None], constraints, base):
        row = checked[ranked.candidate.key()]
        row.served_point, row.served_meets = ranked.point, ranked.meets
        order.append(row)
    return order


def closest_served(rows: list[Row]) -> Row | None:
    """The checked config closest to meeting the constraints served (check_best puts it first among them)."""
    failed = [row for row in rows if row.served is not None and not row.served_meets]
    return next((row for row in failed if row.served_point is not None), None)
