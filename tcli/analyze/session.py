"""One `tcli analyze` run: for the model (or, for an ensemble or a BLS model, each composing model in
turn) build the space, search it through the checkpoint, rank what was measured, and report: the
table (or JSON, CSV), the plot, and the best config written, validated and diffed."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tcli.analyze import outputs
from tcli.analyze.checkpoint import Checkpoint
from tcli.analyze.measure import InputOptions, MeasureOptions, Target, backend_of, measure_candidate
from tcli.analyze.results import Constraints, Measured, Row, rank
from tcli.analyze.search import Outcome, brute, quick, quick_estimate
from tcli.analyze.space import Bounds, Candidate, apply, build_space
from tcli.analyze.sweep import Lead
from tcli.analyze.verify import check_best, closest_served, served_levels
from tcli.errors import CliError

if TYPE_CHECKING:
    from rich.console import Console
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tcli.analyze.progress import SearchProgress


@dataclass
class Plan:
    model: str
    mode: str  # quick | brute
    constraints: Constraints
    measure: MeasureOptions
    bounds: Bounds
    inputs: InputOptions
    repository: Path | None
    output_dir: Path | None = None
    link: bool = False
    plot: Path | None = None
    output_format: str = "table"
    checkpoint: Path | None = None
    checkpoint_given: bool = False
    fresh: bool = False
    where: str = "in-process"


@dataclass
class ModelResult:
    name: str
    report: outputs.Report
    raw: Any  # ModelConfig
    best: Row | None


def raw_config(repository: Path | None, name: str, completed: ModelConfig) -> ModelConfig:
    """The model's config as written (config.pbtxt), which candidates are written over; the
    server's completed config when the folder has none."""
    from server.config.parse import read_config
    from server.protocol.errors import TritonError

    path = repository / name / "config.pbtxt" if repository is not None else None
    if path is None or not path.is_file():
        return completed
    try:
        config, _ = read_config(path)
    except TritonError as exc:
        raise CliError(f"{path}: {exc.message}") from None
    if not config.name:
        config.name = name
    return config


def _measure_errors() -> tuple[type[Exception], ...]:
    """What a config that failed to load or to serve raises: its row says why."""
    from tcli.client.types import ClientError
    from tcli.inprocess import TritonError as InProcessError

    return (CliError, ClientError, InProcessError)


def _message(exc: Exception) -> str:
    return str(getattr(exc, "message", "") or exc)


def _best_text(rows: list[Row]) -> str:
    if rows and rows[0].rank == 1 and rows[0].point is not None:
        point = rows[0].point
        return f"best {point.throughput:.0f}/s: {rows[0].candidate.label()}"
    return "no config meets the constraints yet"


def _counts(report: outputs.Report) -> str:
    measured_now = len(report.rows) - report.resumed
    text = f"{len(report.rows)} configs"
    if report.resumed:
        return (
            text
            + f", {measured_now} measured in {report.seconds:.1f} s, {report.resumed} from the checkpoint"
        )
    return text + f" in {report.seconds:.1f} s"


class Session:
    def __init__(self, plan: Plan, console: Console, err: Console) -> None:
        self.plan = plan
        self.console = console
        self.err = err
        self.checkpoint: Checkpoint | None = None
        self.window_ms: int | None = None  # the first sweep's window, stretched at its first level

    def say(self, text: str) -> None:
        """A note: with the table on stdout, on stderr beside JSON or CSV."""
        (self.console if self.plan.output_format == "table" else self.err).print(text, highlight=False)

    # the checkpoint -------------------------------------------------------------------------------
    def open_checkpoint(self, signature: dict[str, Any]) -> Checkpoint:
        plan = self.plan
        try:
            checkpoint = Checkpoint(plan.checkpoint, signature, fresh=plan.fresh)
        except CliError:
            if plan.checkpoint_given:
                raise
            # the default file of an earlier, different analysis: start afresh
            self.say(f"{plan.checkpoint}: written by another analysis of this model; starting afresh")
            return Checkpoint(plan.checkpoint, signature, fresh=True)
        if checkpoint.from_file:  # never silently: the numbers shown may be an earlier run's
            self.say(
                f"resuming from {plan.checkpoint}: {len(checkpoint.from_file)} config(s) measured by an "
                "earlier run are not measured again (--fresh measures everything)"
            )
        return checkpoint

    # one model ------------------------------------------------------------------------------------
    def analyze(self, target: Target, name: str) -> ModelResult:
        from tcli.analyze.progress import SearchProgress

        plan = self.plan
        completed = target.completed_config()
        backend = backend_of(completed)
        raw = raw_config(plan.repository, name, completed)
        space = build_space(completed, backend, plan.bounds)
        assert self.checkpoint is not None
        checkpoint = self.checkpoint
        measured_here: list[Measured] = []
        planned = space.size() if plan.mode == "brute" else quick_estimate(space)
        started = time.monotonic()
        with SearchProgress(name, planned, self.err) as progress:

            def evaluate(candidate: Candidate) -> Measured:
                key = f"{name}:{candidate.key()}"
                found = checkpoint.get(key)
                if found is None:
                    progress.measuring(candidate.label())
                    found = self._measure(target, raw, candidate, self._lead(measured_here, space.original))
                    checkpoint.put(found, key)
                measured_here.append(found)
                progress.done(_best_text(rank(measured_here, plan.constraints, space.original)))
                if plan.mode == "quick":
                    progress.replan(len(measured_here) + max(1, planned - len(measured_here)))
                return found

            outcome: Outcome = (
                brute(space, evaluate) if plan.mode == "brute" else quick(space, evaluate, plan.constraints)
            )
            rows = rank(outcome.measured, plan.constraints, space.original)
            if target.in_process:  # in-process figures leave the front end out: the best are served
                rows = check_best(
                    rows,
                    lambda row: self._check_served(target, raw, row, progress),
                    plan.constraints,
                    space.original,
                )
        report = outputs.Report(
            name,
            plan.mode,
            plan.constraints,
            rows,
            pruned=len(outcome.pruned),
            resumed=sum(1 for m in outcome.measured if f"{name}:{m.candidate.key()}" in checkpoint.from_file),
            seconds=time.monotonic() - started,
        )
        best = rows[0] if rows and rows[0].rank == 1 else None
        return ModelResult(name, report, raw, best)

    def _lead(self, measured: list[Measured], original: Candidate) -> Lead | None:
        """Quick mode under a throughput objective: the best config so far, where the next sweep
        starts (sweep.py); before any config met the constraints, the middle of the concurrency
        ladder with nothing to beat (a sweep steps down from there as readily as it climbs)."""
        plan = self.plan
        if plan.mode != "quick" or plan.constraints.objective != "throughput":
            return None
        rows = rank(measured, plan.constraints, original)
        if not rows or rows[0].rank != 1 or rows[0].point is None:
            ladder = plan.measure.concurrencies()
            return Lead(ladder[len(ladder) // 2], 0.0)
        return Lead(rows[0].point.concurrency, rows[0].point.throughput)

    def _measure(
        self, target: Target, raw: ModelConfig, candidate: Candidate, lead: Lead | None = None
    ) -> Measured:
        options = self.plan.measure
        if lead is not None and self.window_ms is not None:
            # the first sweep's window at least, should a sweep that starts higher step down
            options = dataclasses.replace(options, measurement_ms=max(options.measurement_ms, self.window_ms))
        try:
            levels, window_ms = measure_candidate(
                target,
                apply(raw, candidate),
                options,
                self.plan.constraints,
                self.plan.mode == "quick",
                lead,
            )
            if self.window_ms is None:
                self.window_ms = window_ms
        except _measure_errors() as exc:
            return Measured(candidate, [], error=_message(exc))
        return Measured(candidate, levels)

    def _check_served(self, target: Target, raw: ModelConfig, row: Row, progress: SearchProgress) -> Measured:
        """One config served over HTTP from its in-process best concurrency down (verify.py)."""
        plan = self.plan
        assert row.point is not None
        progress.checking(row.candidate.label())
        options = plan.measure
        if self.window_ms is not None:  # the windows the sweeps had, at least
            options = dataclasses.replace(options, measurement_ms=max(options.measurement_ms, self.window_ms))
        try:
            target.load(apply(raw, row.candidate))
            profiler = target.served_profiler(options.settings())
            try:
                profiler.start()
                levels = served_levels(
                    profiler,
                    options.concurrencies(),
                    row.point.concurrency,
                    plan.constraints,
                    options.min_requests,
                )
            finally:
                profiler.close()
        except _measure_errors() as exc:
            return Measured(row.candidate, [], error=_message(exc))
        return Measured(row.candidate, levels)

    # reporting ------------------------------------------------------------------------------------
    def report(self, result: ModelResult, plot: Path | None) -> None:
        plan = self.plan
        report = result.report
        if plan.output_format == "json":
            self.console.print_json(json.dumps(outputs.json_document(report)))
        elif plan.output_format == "csv":
            self.console.out(outputs.csv_text(report), end="", highlight=False)
        else:
            self.console.print(outputs.table(report))
        if plot is not None:
            from tcli.analyze.plot import write_plot

            write_plot(plot, result.name, report.rows, plan.constraints)
            self.say(f"plot: {plot}")
        for line in outputs.served_lines(report):
            self.say(line)
        best = result.best
        if best is not None and best.point is not None:
            point = best.point
            served = best.served_point if best.served is not None else None
            if served is not None:  # the figure to expect: served, at the concurrency it was checked at
                figures = (
                    f"{served.throughput:.1f} infer/s at concurrency {served.concurrency}, p99 "
                    f"{served.p99_ms:.2f} ms, verified over HTTP (in-process: {point.throughput:.1f} infer/s at "
                    f"concurrency {point.concurrency}, p99 {point.p99_ms:.2f} ms)"
                )
            else:
                figures = f"{point.throughput:.1f} infer/s at concurrency {point.concurrency}, p99 {point.p99_ms:.2f} ms"
            self.say(f"best for {result.name}: {best.candidate.label()}: {figures} ({_counts(report)})")

    def miss_message(self, result: ModelResult) -> str:
        constraints = self.plan.constraints
        text = f"no config of model '{result.name}' meets {constraints.describe()}"
        served = closest_served(result.report.rows)
        if served is not None and served.served_point is not None:
            point = served.served_point
            count = len(outputs.checked(result.report))
            return (
                f"{text} when served over HTTP: the {count} best measured in-process missed it served by "
                f"tcli's HTTP front end; the closest is {served.candidate.label()}: p99 {point.p99_ms:.2f} ms "
                f"at {point.throughput:.1f} infer/s (concurrency {point.concurrency}) over HTTP; relax the "
                "constraints or widen the search"
            )
        misses = [row for row in result.report.rows if not row.meets and row.point is not None]
        if not misses:
            return text + ": every config failed to load or serve (see the table)"
        row = misses[0]
        assert row.point is not None
        return (
            f"{text}; the closest is {row.candidate.label()}: p99 {row.point.p99_ms:.2f} ms at "
            f"{row.point.throughput:.1f} infer/s (concurrency {row.point.concurrency}); relax the constraints "
            "or widen the search"
        )

    def write_best(self, result: ModelResult, source: Path | None) -> None:
        plan = self.plan
        assert plan.output_dir is not None and result.best is not None
        best_config = apply(result.raw, result.best.candidate)
        written = outputs.write_model(plan.output_dir, source, result.name, best_config, plan.link)
        errors = outputs.validate_written(plan.output_dir, result.name)
        if errors:
            raise CliError(f"the config written to {written} does not validate: {'; '.join(errors)}")
        before = str(source / "config.pbtxt") if source is not None else f"{result.name} (server's config)"
        self.say(f"wrote {written} (valid: checked as tcli repo validate checks it)")
        for line in outputs.config_diff(result.raw, best_config, before, str(written)):
            self.say(line.replace("[", "\\["))
