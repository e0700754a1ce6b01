"""`tcli analyze`'s parts without a server: the search space a config gives, the config a candidate
writes, ranking (ties, the front, the closest miss), and both search strategies over a simulated
model whose cost is a formula, so that the optimum is known exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.config.parse import parse_config_text
from tcli.analyze.checkpoint import Checkpoint
from tcli.analyze.results import Constraints, Level, Measured, rank
from tcli.analyze.search import brute, quick
from tcli.analyze.space import Bounds, Candidate, apply, build_space
from tcli.errors import CliError

PYTHON_CONFIG = """
name: "m"
backend: "python"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def config(text: str = PYTHON_CONFIG):  # type: ignore[no-untyped-def]
    return parse_config_text(text, Path("config.pbtxt"))


def test_space_from_a_python_config_and_its_bounds() -> None:
    space = build_space(config(), "python", Bounds(max_instance_count=3, max_batch_size=8))
    assert space.values["instance_count"] == [1, 2, 3]
    assert space.values["max_batch_size"] == [1, 2, 4, 8]
    assert space.values["dynamic_batching"] == [False, True]
    assert space.values["instance_process"] == [False, True]
    assert space.values["intra_op_threads"] == [0]  # onnxruntime only
    assert space.original == Candidate(1, 1, False, instance_process=True)  # the config, as it stands
    assert space.start == Candidate(1, 1, True, instance_process=True)  # quick mode: batching on
    candidates = space.candidates()
    assert len({c.key() for c in candidates}) == len(candidates)
    # without dynamic batching the queue delay means nothing: one candidate, not one per delay
    assert not any(c.max_queue_delay_us for c in candidates if not c.dynamic_batching)
    assert len(candidates) == 3 * 4 * 2 * (1 + 2)  # delays 0 and 500 with dynamic batching


def test_a_model_that_does_not_batch_stays_at_zero() -> None:
    space = build_space(
        config(PYTHON_CONFIG.replace("max_batch_size: 1", "max_batch_size: 0")), "python", Bounds()
    )
    assert space.values["max_batch_size"] == [0]
    assert all(not c.dynamic_batching for c in space.candidates())
    # its configs are labelled as what they are, not "batch 0"
    assert all(c.label().startswith(f"{c.instance_count} x no batching") for c in space.candidates())
    assert not any("batch 0" in c.label() for c in space.candidates())


def test_onnxruntime_threads_are_a_dimension() -> None:
    onnx = config(PYTHON_CONFIG.replace('backend: "python"', 'platform: "onnxruntime_onnx"'))
    space = build_space(onnx, "onnxruntime", Bounds(intra_op_threads=[0, 1, 2]))
    assert space.values["intra_op_threads"] == [0, 1, 2]
    assert space.values["instance_process"] == [None]
    written = apply(onnx, Candidate(2, 4, True, True, 100, None, intra_op_threads=2))
    assert written.parameters["intra_op_thread_count"].string_value == "2"
    assert "inter_op_thread_count" not in written.parameters


def test_apply_writes_the_candidate_over_the_config() -> None:
    written = apply(config(), Candidate(3, 8, True, True, 250, instance_process=False))
    assert written.max_batch_size == 8
    (group,) = written.instance_group
    assert group.count == 3 and group.kind == 2  # KIND_CPU
    assert list(written.dynamic_batching.preferred_batch_size) == [8]
    assert written.dynamic_batching.max_queue_delay_microseconds == 250
    assert written.parameters["TCLI_INSTANCE_PROCESS"].string_value == "false"
    assert [i.name for i in written.input] == ["INPUT0"]  # the rest of the config is kept
    plain = apply(written, Candidate(1, 2, False, instance_process=True))
    assert not plain.HasField("dynamic_batching")
    assert plain.parameters["TCLI_INSTANCE_PROCESS"].string_value == "true"


# a simulated model: each execution of n requests takes A + B*n ms; a closed loop of c requests on
# i instances with max batch size m runs batches of min(m, ceil(c/i)) in ceil(c / (i*batch)) rounds
A_MS, B_MS = 8.0, 4.0


def simulate(candidate: Candidate, concurrencies: list[int], budget: float) -> Measured:
    levels = []
    for c in concurrencies:
        batch = (
            min(candidate.max_batch_size, -(-c // candidate.instance_count))
            if candidate.dynamic_batching
            else 1
        )
        rounds = -(-c // (candidate.instance_count * batch))
        latency = (A_MS + B_MS * batch) * rounds
        throughput = c / latency * 1000.0
        levels.append(Level(c, throughput, latency, latency))
        if latency > budget:
            break
    return Measured(candidate, levels)


@pytest.mark.parametrize("mode", ["quick", "brute"])
def test_search_finds_the_optimum_of_a_known_cost(mode: str) -> None:
    budget = 34.0
    space = build_space(
        config(),
        "python",
        Bounds(max_instance_count=3, max_batch_size=16, queue_delays_us=[0], python_placement="server"),
    )
    constraints = Constraints(latency_budget_ms=budget)
    evaluate = lambda c: simulate(c, [1, 2, 4, 8, 16, 32], budget)  # noqa: E731
    outcome = brute(space, evaluate) if mode == "brute" else quick(space, evaluate, constraints)
    rows = rank(outcome.measured, constraints, space.original)
    best = rows[0]
    # the formula's optimum within 34 ms: 3 instances at concurrency 16 run batches of 6 (8 + 4*6 = 32 ms),
    # 500/s; max batch 4 needs two rounds there; max batch 16 serves it alike, and the tie goes to 8
    optimum = max(
        (c / ((A_MS + B_MS * min(m, -(-c // i))) * -(-c // (i * min(m, -(-c // i))))) * 1000.0, -i, -m)
        for i in (1, 2, 3)
        for m in (1, 2, 4, 8, 16)
        for c in (1, 2, 4, 8, 16, 32)
        if (A_MS + B_MS * min(m, -(-c // i))) * -(-c // (i * min(m, -(-c // i)))) <= budget
    )
    assert optimum == (500.0, -3, -8)
    assert (best.candidate.instance_count, best.candidate.max_batch_size) == (3, 8)
    assert best.candidate.dynamic_batching and best.meets and best.rank == 1
    assert best.point is not None and best.point.concurrency == 16 and best.point.throughput == 500.0
    if mode == "quick":
        assert len(outcome.measured) < len(space.candidates())  # it climbed, it did not try everything
        assert outcome.pruned


def test_ties_go_to_the_cheaper_config_and_the_closest_miss_is_named() -> None:
    constraints = Constraints(latency_budget_ms=10.0)
    base = Candidate(1, 1)
    big = Measured(Candidate(2, 8, True), [Level(8, 1000.0, 5.0, 9.0)])
    small = Measured(Candidate(2, 4, True), [Level(8, 950.0, 5.0, 8.0)])  # within 10%: a tie
    slow = Measured(Candidate(1, 1), [Level(1, 100.0, 12.0, 12.5)])
    rows = rank([big, small, slow], constraints, base)
    assert [r.candidate for r in rows] == [small.candidate, big.candidate, slow.candidate]
    assert [r.rank for r in rows] == [1, 2, 0]
    assert rows[0].front and rows[1].front and not rows[2].front
    none_meet = rank([slow], Constraints(latency_budget_ms=1.0), base)
    assert none_meet[0].rank == 0 and not none_meet[0].meets


def test_checkpoint_keeps_what_was_measured_and_refuses_another_analysis(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    first = Checkpoint(path, {"model": "m"})
    measured = Measured(Candidate(2, 4, True), [Level(8, 500.0, 10.0, 12.0)])
    first.put(measured, "m:" + measured.candidate.key())
    again = Checkpoint(path, {"model": "m"})
    found = again.get("m:" + measured.candidate.key())
    assert found is not None and found.levels == measured.levels and found.candidate == measured.candidate
    assert again.from_file == {"m:" + measured.candidate.key()}
    with pytest.raises(CliError, match="written by another analysis"):
        Checkpoint(path, {"model": "other"})
    assert Checkpoint(path, {"model": "other"}, fresh=True).entries == {}
    assert json.loads(path.read_text())["signature"] == {"model": "m"}


def test_a_sweep_is_flat_after_two_levels_that_do_not_rise() -> None:
    from tcli.analyze.sweep import flat as _flat

    def levels(*throughputs: float) -> list[Level]:
        return [Level(2**k, value, 1.0, 1.0) for k, value in enumerate(throughputs)]

    assert not _flat(levels(100, 200))
    assert not _flat(levels(100, 200, 195, 400))  # one noisy level does not end the sweep
    assert not _flat(levels(100, 200, 195))
    assert _flat(levels(100, 200, 195, 204))  # two levels in a row within 5% of the best before them


def test_latency_objective_takes_the_lowest_p99_that_reaches_the_throughput() -> None:
    constraints = Constraints(min_throughput=500.0, objective="latency")
    fast = Measured(Candidate(2, 8, True), [Level(4, 400.0, 2.0, 3.0), Level(8, 900.0, 4.0, 6.0)])
    slow = Measured(Candidate(1, 8, True), [Level(8, 600.0, 6.0, 9.0)])
    rows = rank([slow, fast], constraints, Candidate(1, 1))
    assert rows[0].candidate == fast.candidate and rows[0].point == fast.levels[1]  # 400/s is too few
    assert rows[1].candidate == slow.candidate and rows[1].rank == 2


def test_instance_kind_is_a_dimension_only_where_a_gpu_exists() -> None:
    onnx = config(PYTHON_CONFIG.replace('backend: "python"', 'platform: "onnxruntime_onnx"'))
    assert build_space(onnx, "onnxruntime", Bounds()).values["kind"] == ["KIND_CPU"]
    assert build_space(onnx, "onnxruntime", Bounds(gpu_count=1)).values["kind"] == ["KIND_CPU", "KIND_GPU"]
    assert build_space(config(), "python", Bounds(gpu_count=1)).values["kind"] == ["KIND_CPU"]
    (group,) = apply(onnx, Candidate(1, 4, kind="KIND_GPU")).instance_group
    assert group.kind == 1  # KIND_GPU


def test_a_bls_model_names_the_models_it_calls(tmp_path: Path) -> None:
    from tcli.analyze.composing import bls_targets

    for name in ("pipeline", "plain", "sleepy", "other"):
        (tmp_path / name / "1").mkdir(parents=True)
    (tmp_path / "pipeline" / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        '        request = pb_utils.InferenceRequest(model_name="sleepy", requested_output_names=["OUT"],\n'
        "                                            inputs=[])\n"
        '        return [request.exec()] + ["not-a-model"]\n'
    )
    (tmp_path / "plain" / "1" / "model.py").write_text('NAME = "sleepy"\n')  # names a model, calls none
    assert bls_targets(tmp_path / "pipeline", tmp_path) == ["sleepy"]
    assert bls_targets(tmp_path / "plain", tmp_path) == []


def test_time_left_is_the_average_config_times_those_left() -> None:
    from tcli.analyze.progress import time_left

    assert time_left({"measured": 0, "spent": 0.0}, 8, 0) == "?"  # nothing measured yet
    # two configs took 60 s: six more take 3 minutes, whatever the bar's recent speed
    assert time_left({"measured": 2, "spent": 60.0, "started": None}, 8, 2) == "0:03:00"
    # from the checkpoint: completed configs count as done, the average stays the measured ones'
    assert time_left({"measured": 1, "spent": 45.0, "started": None}, 4, 3) == "0:00:45"


class SimulatedLoad:
    """A profiler stand-in for sweep.py: a config that serves `rate` infer/s per request in flight up
    to `cap`, its p99 the time a request waits in line (Little's law) plus 20%; `stall` levels
    measure a stalled window once (p99 x 4)."""

    def __init__(self, rate: float, cap: float, stall: tuple[int, ...] = ()) -> None:
        self.rate, self.cap, self.stall = rate, cap, set(stall)
        self.measured: list[int] = []

    def measure(self, concurrency: int):  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        self.measured.append(concurrency)
        throughput = min(self.rate * concurrency, self.cap)
        p99_ms = 1.2 * 1000 * concurrency / throughput
        if concurrency in self.stall:
            self.stall.discard(concurrency)
            p99_ms *= 4
        return SimpleNamespace(
            interrupted=False,
            stable=True,
            client=SimpleNamespace(infer_per_sec=throughput),
            latency=SimpleNamespace(percentiles_ns={50: int(p99_ms * 5e5), 99: int(p99_ms * 1e6)}),
        )


LEVELS = [1, 2, 4, 8, 16, 32, 64]


def test_a_sweep_without_a_lead_climbs_from_one_to_the_budget() -> None:
    from tcli.analyze.sweep import Sweep

    load = SimulatedLoad(rate=300, cap=2000)  # p99 over 20 ms from concurrency 64 (38 ms)
    levels = Sweep(load, Constraints(latency_budget_ms=20), stop_when_flat=False).run(LEVELS)  # type: ignore[arg-type]
    assert load.measured == [1, 2, 4, 8, 16, 32, 64, 64]  # the level over the budget measured twice
    assert [level.concurrency for level in levels] == LEVELS
    assert levels[-2].p99_ms <= 20 < levels[-1].p99_ms


def test_a_sweep_with_a_lead_starts_at_the_leads_concurrency() -> None:
    from tcli.analyze.sweep import Lead, Sweep

    load = SimulatedLoad(rate=300, cap=2000)
    lead = Lead(concurrency=16, throughput=1500.0)
    levels = Sweep(load, Constraints(latency_budget_ms=20), False, lead).run(LEVELS)  # type: ignore[arg-type]
    # nothing below the lead's load (it serves less); the level over the budget could beat the lead
    # (2000/s), so it is measured once more before the sweep ends there
    assert load.measured == [16, 32, 64, 64]
    assert [level.concurrency for level in levels] == [16, 32, 64]


def test_a_sweep_over_the_budget_at_the_leads_load_steps_down_to_it() -> None:
    from tcli.analyze.sweep import Lead, Sweep

    load = SimulatedLoad(rate=300, cap=400)  # saturated from concurrency 2: p99 3 ms per request in flight
    lead = Lead(concurrency=64, throughput=4000.0)
    levels = Sweep(load, Constraints(latency_budget_ms=20), False, lead).run(LEVELS)  # type: ignore[arg-type]
    # 64 in flight: p99 192 ms, and p50 96 ms: no stall's, so not measured again; Little's law puts
    # the budget near 6 in flight, 4 levels down: it steps down 2 at a time (16: p99 48 ms), then 4
    assert load.measured == [64, 16, 4]
    assert [level.concurrency for level in levels] == [4, 16, 64]
    assert levels[0].p99_ms <= 20 < levels[1].p99_ms


def test_a_stalled_window_does_not_end_a_sweep_that_could_win() -> None:
    from tcli.analyze.sweep import Lead, Sweep

    load = SimulatedLoad(rate=200, cap=8000, stall=(32,))
    lead = Lead(concurrency=16, throughput=3000.0)
    levels = Sweep(load, Constraints(latency_budget_ms=20), False, lead).run(LEVELS)  # type: ignore[arg-type]
    assert load.measured[:3] == [16, 32, 32]  # measured again: the second is within the budget
    assert max(lv.concurrency for lv in levels if lv.p99_ms <= 20) >= 32


def test_a_level_over_the_budget_that_cannot_win_is_not_measured_again() -> None:
    from tcli.analyze.sweep import Lead, Sweep

    load = SimulatedLoad(rate=100, cap=1000)  # p99 19.2 ms at 16, 38.4 ms (p50 19.2) at 32
    lead = Lead(concurrency=16, throughput=5000.0)
    levels = Sweep(load, Constraints(latency_budget_ms=20), False, lead).run(LEVELS)  # type: ignore[arg-type]
    # within the budget, 32 in flight would serve at most twice 16's 1000/s: short of tying 5000/s
    assert load.measured == [16, 32]
    assert [level.concurrency for level in levels] == [16, 32]


def test_a_quick_sweep_starts_where_the_best_config_so_far_peaked() -> None:
    from rich.console import Console

    from tcli.analyze.measure import InputOptions, MeasureOptions
    from tcli.analyze.session import Plan, Session
    from tcli.analyze.sweep import Lead

    def session(mode: str = "quick", objective: str = "throughput") -> Session:
        constraints = Constraints(latency_budget_ms=20, objective=objective)
        plan = Plan(
            "m", mode, constraints, MeasureOptions(max_concurrency=64), Bounds(), InputOptions(), None
        )
        return Session(plan, Console(), Console())

    base = Candidate(1, 8, True)
    best = Measured(
        Candidate(2, 8, True), [Level(16, 1000.0, 5, 10), Level(32, 1500.0, 9, 18), Level(64, 1600.0, 20, 40)]
    )
    assert session()._lead([best], base) == Lead(32, 1500.0)  # its best point within the budget
    assert session()._lead([], base) == Lead(8, 0.0)  # nothing yet: the middle of 1, 2, ... 64
    assert session("brute")._lead([best], base) is None  # brute sweeps start at 1
    assert session(objective="latency")._lead([best], base) is None  # the lowest p99 is at low loads


class SimulatedServed(SimulatedLoad):
    """SimulatedLoad with what warm-up and settling call (verify.py serves a config over HTTP)."""

    def __init__(self, rate: float, cap: float, stall: tuple[int, ...] = ()) -> None:
        from types import SimpleNamespace

        super().__init__(rate, cap, stall)
        self.settings = SimpleNamespace(measurement_ms=1)

    def _set_load(self, value: float) -> None:
        pass

    def _collect(self):  # type: ignore[no-untyped-def]
        return [], 0.0


def test_served_over_http_a_config_steps_down_from_its_in_process_concurrency_to_the_budget() -> None:
    from tcli.analyze.verify import served_levels

    load = SimulatedServed(rate=300, cap=2000)  # p99 38 ms at 64 (p50 19: measured again), 19 ms at 32
    levels = served_levels(load, LEVELS, 64, Constraints(latency_budget_ms=20))  # type: ignore[arg-type]
    # one level at a time, none below the first that meets the budget
    assert load.measured == [64, 64, 32]
    assert [level.concurrency for level in levels] == [32, 64]
    assert levels[0].p99_ms <= 20 < levels[1].p99_ms


def served_rows() -> list:  # type: ignore[type-arg]
    """Three configs ranked by their in-process figures (2000, 1500, 1000 infer/s at concurrency 64,
    p99 10 ms)."""
    measured = [
        Measured(Candidate(count, 8, True), [Level(64, throughput, 5.0, 10.0)])
        for count, throughput in ((3, 2000.0), (2, 1500.0), (1, 1000.0))
    ]
    rows = rank(measured, Constraints(latency_budget_ms=20), Candidate(1, 8, True))
    assert [row.candidate.instance_count for row in rows] == [3, 2, 1]
    return rows


def fake_check(served: dict[int, list[Level]], checked: list[int]):  # type: ignore[no-untyped-def]
    def check(row):  # type: ignore[no-untyped-def]
        checked.append(row.candidate.instance_count)
        return Measured(row.candidate, served[row.candidate.instance_count])

    return check


def test_a_runner_up_that_may_serve_more_than_the_best_served_is_checked_and_can_win() -> None:
    from tcli.analyze.verify import check_best

    constraints = Constraints(latency_budget_ms=20)
    served = {
        3: [Level(32, 1000.0, 8, 15), Level(64, 1900.0, 30, 45)],  # over the budget at 64: 1000/s at 32
        2: [Level(64, 1400.0, 9, 18)],  # within it at 64
        1: [Level(64, 900.0, 9, 18)],
    }
    checked: list[int] = []
    rows = check_best(served_rows(), fake_check(served, checked), constraints, Candidate(1, 8, True))
    # the runner-up's 1500/s in-process beat the best's 1000/s served: checked; the third's 1000/s
    # in-process cannot beat the runner-up's 1400/s served: not checked
    assert checked == [3, 2]
    # those checked by what they served, then the one not checked
    assert [(row.candidate.instance_count, row.rank) for row in rows] == [(2, 1), (3, 2), (1, 3)]
    best = rows[0]
    assert best.served_meets and best.served_point is not None and best.served_point.throughput == 1400.0
    assert rows[1].served_point is not None and rows[1].served_point.concurrency == 32  # its served point


def test_no_config_is_recommended_when_none_checked_meets_the_budget_served() -> None:
    from tcli.analyze.verify import MAX_CHECKED, check_best, closest_served

    constraints = Constraints(latency_budget_ms=20)
    served = {count: [Level(1, 50.0, 22, 22 + count)] for count in (1, 2, 3)}
    checked: list[int] = []
    rows = check_best(served_rows(), fake_check(served, checked), constraints, Candidate(1, 8, True))
    assert len(checked) == MAX_CHECKED == 3
    assert all(row.rank == 0 for row in rows)
    closest = closest_served(rows)
    assert closest is not None and closest.candidate.instance_count == 1  # 23 ms: the closest served
