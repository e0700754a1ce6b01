"""The search strategies, over a function that measures one candidate (or answers it from the
checkpoint).

brute: every candidate of the space, in a stable order.
quick: coordinate ascent from the model's own config (with dynamic batching on, when the space has
  it). For each dimension in turn (the big levers first: max batch size, instance count, dynamic
  batching, then the finer ones) it climbs from the
  current value upwards and then downwards, one value at a time, and stops a direction as soon as a
  step does not improve on the step before: the values beyond it are pruned, not measured (more
  instances or bigger batches past the point where they stopped helping cannot beat the best).
  The best value found becomes current; passes repeat until one changes nothing (at most three).
  Its concurrency sweeps also stop once throughput stops rising, and start at the load where the
  best config so far peaked (sweep.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from tcli.analyze.results import Constraints, Measured, close_to, operating_point
from tcli.analyze.space import DIMENSIONS, Candidate, Space

MAX_PASSES = 3


@dataclass
class Outcome:
    measured: list[Measured] = field(default_factory=list)
    pruned: list[Candidate] = field(default_factory=list)


Evaluate = Callable[[Candidate], Measured]


def brute(space: Space, evaluate: Evaluate) -> Outcome:
    outcome = Outcome()
    for candidate in space.candidates():
        outcome.measured.append(evaluate(candidate))
    return outcome


def standing(measured: Measured, constraints: Constraints) -> tuple[int, float]:
    """How good a candidate is for climbing: configs that meet the constraints by their score, the
    others by how close they came (so a search that starts outside the budget heads into it)."""
    point, meets = operating_point(measured, constraints)
    if point is None:
        return (-1, 0.0)
    return (1, constraints.score(point)) if meets else (0, -constraints.miss(point))


def improves(new: tuple[int, float], old: tuple[int, float], constraints: Constraints) -> bool:
    """A real improvement: better, and not within the measurement's noise."""
    if new[0] != old[0]:
        return new[0] > old[0]
    return new[1] > old[1] and not close_to(new[1], old[1], constraints)


def quick_estimate(space: Space) -> int:
    """Candidates one pass measures at most (for the progress bar)."""
    return 1 + sum(len(space.values[d]) - 1 for d in DIMENSIONS)


def quick(space: Space, evaluate: Evaluate, constraints: Constraints) -> Outcome:
    outcome = Outcome()
    seen: dict[str, Measured] = {}

    def measure(candidate: Candidate) -> tuple[int, float]:
        key = candidate.key()
        if key not in seen:
            seen[key] = evaluate(candidate)
            outcome.measured.append(seen[key])
        return standing(seen[key], constraints)

    current = space.start
    current_standing = measure(current)
    for _ in range(MAX_PASSES):
        changed = False
        for dimension in DIMENSIONS:
            values = space.values[dimension]
            if len(values) < 2:
                continue
            here = values.index(getattr(current, dimension))
            best, best_standing = current, current_standing
            for step in (1, -1):
                previous = current_standing
                index = here + step
                while 0 <= index < len(values):
                    candidate = dataclasses.replace(current, **{dimension: values[index]}).normalized()
                    index += step
                    if not space.allows(candidate) or candidate == current:
                        continue
                    result = measure(candidate)
                    if improves(result, best_standing, constraints):
                        best, best_standing = candidate, result
                    if not improves(result, previous, constraints):
                        for rest in range(index, len(values) if step > 0 else -1, step):
                            skipped = dataclasses.replace(current, **{dimension: values[rest]}).normalized()
                            if space.allows(skipped) and skipped.key() not in seen:
                                outcome.pruned.append(skipped)
                        break
                    previous = result
            if best != current:
                current, current_standing, changed = best, best_standing, True
        if not changed:
            break
    measured_keys = {m.candidate.key() for m in outcome.measured}
    unique: dict[str, Candidate] = {}
    for candidate in outcome.pruned:
        if candidate.key() not in measured_keys:
            unique.setdefault(candidate.key(), candidate)
    outcome.pruned = list(unique.values())
    return outcome
