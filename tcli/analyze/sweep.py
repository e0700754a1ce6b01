"""One candidate's concurrency sweep: which load levels are measured, in which order, and when the
sweep stops.

Without a lead (brute mode, the latency objective) a sweep climbs 1, 2, 4, ... --max-concurrency and
stops once p99 passes the budget (more load only adds latency) and, in quick mode, once throughput
stops rising. With a lead (quick mode, throughput objective: the best config so far and the
concurrency it peaked at; for the first config the ladder's middle, with nothing to beat) it starts at
that concurrency: the levels below it serve less, and under a throughput objective they cannot be a
config's best point, so measuring them is the time most of a sweep used to take. From there it climbs
as above; when the lead's level is already over the budget it steps down instead, to the level
Little's law puts within it (p99 grows with the load once the config is saturated; a quarter of the
load at most per step), until one meets the budget: such a config serves less than the lead.

A level over the budget is measured once more before it ends a sweep (a busy machine's stall in one
short window is that window's p99, and lowers its throughput too), unless a second measurement
could not change the choice: its p50 is over the budget as well (a stall delays the requests in
flight during it, a tail, not the median), or the config could not win or tie with the lead even
within the budget (by Little's law a level serves at most its concurrency's share more than a
lower level of the same config: latency does not fall as the load rises).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcli.analyze.results import Constraints, Level

if TYPE_CHECKING:
    from tcli.perf.profiler import Profiler

WARM_UP_MIN_S = 0.2
WARM_UP_MAX_S = 1.0
MAX_WINDOW_MS = 5000  # perf_analyzer's default window: no window is stretched past it
FLAT_GAIN = 0.05  # quick mode: a concurrency sweep stops once doubling the load gains less than this,
FLAT_LEVELS = 2  # for this many levels in a row
RETRIES_PER_SWEEP = 2  # levels over the budget measured once more (a sweep ends at one over it)
MAX_STEP_DOWN = 2  # levels a sweep over the budget steps down at once (a quarter of the load)


@dataclass(frozen=True)
class Lead:
    """The best config so far: the concurrency of its best point and what it served there."""

    concurrency: int
    throughput: float


def warm_up(profiler: Profiler, concurrency: int, min_requests: int) -> None:
    """Serve the new config for a while before measuring, its answers dropped: a config just loaded
    answers its first requests slowly (threads and processes starting, the first inline executions),
    and with short windows those would be its p99. The second half of the warm-up also tells how
    fast the config answers at the first level: windows are stretched to hold `min_requests` there
    (perf_analyzer's count-windows idea), so that a slow model's p99 is not one request's."""
    import gc

    # what loading built lives as long as the config: out of the collector's reach, or full collections
    # (in this process, with the server in it) stall requests by 10 ms and more: every p99 (measured)
    gc.freeze()
    seconds = min(WARM_UP_MAX_S, max(WARM_UP_MIN_S, profiler.settings.measurement_ms / 1000.0))
    profiler._set_load(concurrency)
    time.sleep(seconds / 2)
    profiler._collect()
    began = time.monotonic()
    time.sleep(seconds / 2)
    answers, _ = profiler._collect()
    if min_requests <= 0:
        return
    completed = sum(int(answer["completed"]) for answer in answers)
    rate = completed / max(time.monotonic() - began, 1e-3)
    needed_ms = 1000.0 * min_requests / rate if rate > 0 else MAX_WINDOW_MS
    settings = profiler.settings
    settings.measurement_ms = int(min(MAX_WINDOW_MS, max(settings.measurement_ms, needed_ms)))


def flat(levels: list[Level]) -> bool:
    """Throughput stopped rising: the last FLAT_LEVELS levels each gained less than FLAT_GAIN over the
    best before them (one level alone may be a noisy window)."""
    if len(levels) <= FLAT_LEVELS:
        return False
    for index in range(len(levels) - FLAT_LEVELS, len(levels)):
        before = max(level.throughput for level in levels[:index])
        if levels[index].throughput >= before * (1 + FLAT_GAIN):
            return False
    return True


def measure_level(profiler: Profiler, concurrency: int) -> Level:
    result = profiler.measure(concurrency)
    if result.interrupted:
        raise KeyboardInterrupt
    if result.latency is None:  # nothing answered within the windows
        return Level(concurrency, 0.0, math.inf, math.inf, stable=False)
    return Level(
        concurrency,
        result.client.infer_per_sec,
        result.latency.percentiles_ns[50] / 1e6,
        result.latency.percentiles_ns[99] / 1e6,
        stable=result.stable,
    )


def over_budget(level: Level, constraints: Constraints) -> bool:
    return constraints.latency_budget_ms is not None and level.p99_ms > constraints.latency_budget_ms


def start_index(concurrencies: list[int], lead: Lead | None) -> int:
    """Where a sweep starts: the lead's concurrency (or the highest level below it), else the first."""
    if lead is None:
        return 0
    return max((i for i, value in enumerate(concurrencies) if value <= lead.concurrency), default=0)


def step_down(concurrencies: list[int], level: Level, constraints: Constraints) -> int | None:
    """The next level to try below one over the budget: the highest whose p99 Little's law puts
    within it (latency grows in proportion to the load once the config is saturated), one step down
    at least and MAX_STEP_DOWN at most (a stalled window's p99 would send it far too low); None
    below the first level."""
    below = [i for i, value in enumerate(concurrencies) if value < level.concurrency]
    if not below:
        return None
    budget = constraints.latency_budget_ms
    estimate = level.concurrency * budget / level.p99_ms if budget and math.isfinite(level.p99_ms) else 0
    reach = below[-MAX_STEP_DOWN:]
    fitting = [i for i in reach if concurrencies[i] <= estimate]
    return fitting[-1] if fitting else reach[0]


class Sweep:
    """The levels of one candidate, measured in the order the rules above give."""

    def __init__(
        self,
        profiler: Profiler,
        constraints: Constraints,
        stop_when_flat: bool,
        lead: Lead | None = None,
    ) -> None:
        self.profiler = profiler
        self.constraints = constraints
        self.stop_when_flat = stop_when_flat
        self.lead = lead
        self.retries = RETRIES_PER_SWEEP
        self.levels: list[Level] = []

    def _could_win(self, concurrency: int) -> bool:
        """Whether a level could beat or tie the lead, were it within the budget: at most the
        throughput of a lower level scaled by the concurrencies' ratio (Little's law)."""
        if self.lead is None:
            return True
        bounds = [
            level.throughput * concurrency / level.concurrency
            for level in self.levels
            if 0 < level.concurrency < concurrency
        ]
        return min(bounds, default=math.inf) >= self.lead.throughput * (1 - self.constraints.tolerance)

    def _worth_again(self, level: Level) -> bool:
        """Whether a level over the budget may be a stall's, and a second measurement could matter."""
        budget = self.constraints.latency_budget_ms
        return (
            self.retries > 0
            and level.throughput > 0
            and (budget is None or level.p50_ms <= budget)
            and self._could_win(level.concurrency)
        )

    def _measure(self, concurrency: int) -> tuple[Level, bool]:
        """One level, measured again when over the budget and it matters; and whether it is over."""
        level = measure_level(self.profiler, concurrency)
        over = over_budget(level, self.constraints)
        if over and self._worth_again(level):
            # a stall of a busy machine in one window is the p99 of a short level, and would end the
            # config's sweep for good
            self.retries -= 1
            again = measure_level(self.profiler, concurrency)
            level = min(level, again, key=lambda measured: measured.p99_ms)
            over = over_budget(level, self.constraints)
        self.levels.append(level)
        return level, over

    def run(self, concurrencies: list[int]) -> list[Level]:
        index = start_index(concurrencies, self.lead)
        level, over = self._measure(concurrencies[index])
        if over and index > 0:  # the lead's load is too much for this config: down to the budget
            while over and level.throughput > 0:
                lower = step_down(concurrencies, level, self.constraints)
                if lower is None:
                    break
                # no second measurements here: a config over the budget at the lead's load serves
                # less than the lead below it, and a stall only lowers its figure further
                level = measure_level(self.profiler, concurrencies[lower])
                over = over_budget(level, self.constraints)
                self.levels.append(level)
            return sorted(self.levels, key=lambda measured: measured.concurrency)
        climbed = [level]
        for concurrency in concurrencies[index + 1 :]:
            if level.throughput == 0 or over:
                break
            if self.stop_when_flat and flat(climbed):
                break
            level, over = self._measure(concurrency)
            climbed.append(level)
        return self.levels


def sweep(
    profiler: Profiler,
    concurrencies: list[int],
    constraints: Constraints,
    stop_when_flat: bool,
    min_requests: int = 0,
    lead: Lead | None = None,
) -> list[Level]:
    """Warm the config up at the sweep's first level, then measure its levels (module docstring)."""
    warm_up(profiler, concurrencies[start_index(concurrencies, lead)], min_requests)
    return Sweep(profiler, constraints, stop_when_flat, lead).run(concurrencies)
