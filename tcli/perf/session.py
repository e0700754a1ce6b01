"""One `tcli perf` measurement from the first load level to the last line: the profiler run level by
level with perf_analyzer's console text, then its summary, JSON, CSV files and plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tcli.errors import CliError
from tcli.perf.profiler import LevelResult, Profiler, Settings
from tcli.perf.progress import Progress
from tcli.perf.report import (
    BUSY_WARNING_PCT,
    ReportContext,
    composing_csv_files,
    csv_text,
    level_header,
    level_lines,
    report_json,
    settings_lines,
    summary_lines,
)

STABILITY_EXIT = 2  # perf_analyzer's exit code when a measurement does not stabilise


def _out(line: str = "") -> None:
    print(line, flush=True)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(
    info: Any,
    spec: Any,
    settings: Settings,
    context: ReportContext,
    read_stats: Any,
    load_levels: Any,
    filename: Path | None,
    plot: Path | None,
    output_format: str,
    verbose: bool,
    strict: bool = False,
) -> bool:
    """Measure each of `load_levels` until the last, one over the latency threshold, or Ctrl-C, and
    report. A level that does not stabilise is reported from its steadiest windows with a warning,
    and the next level follows; with `strict` (perf_analyzer's behaviour) it ends the run, raising
    CliError with perf_analyzer's exit code. True when Ctrl-C stopped it (what was measured is
    reported)."""
    text = output_format == "text"
    if text:
        for line in settings_lines(context):
            _out(line)
    results: list[LevelResult] = []
    failure: str | None = None
    interrupted = False
    progress = Progress(context, text, verbose)
    profiler = Profiler(spec, settings, read_stats, (info.name, info.version), info.composing, progress)
    try:
        with progress:
            profiler.start()
            for value in load_levels:
                if text:
                    _out(level_header(context, value))
                result = profiler.measure(value)
                for note in result.notes:
                    _err(note)
                if result.interrupted:
                    interrupted = True
                    if result.latency is not None:
                        results.append(result)
                        if text:
                            for line in level_lines(result, context):
                                _out(line)
                    break
                if not result.stable:
                    what = f"concurrency {int(value)}" if context.concurrency else f"request rate {value:g}"
                    if result.latency is None:
                        failure = "No valid requests recorded within time interval. Please use a larger time window."
                        break
                    if strict:  # perf_analyzer's way: the run ends at the first unstable level
                        failure = (
                            f"Failed to obtain stable measurement within {settings.max_trials} measurement "
                            f"windows for {what}. Please try to increase the --measurement-interval."
                        )
                        break
                    over = settings.latency_threshold_ms and (
                        result.stabilizing_ns(settings.percentile)
                        >= settings.latency_threshold_ms * 1_000_000
                    )
                    if not over:  # a level cut short by the latency threshold is said so below
                        _err(unstable_warning(what, result, settings))
                if settings.latency_threshold_ms and (
                    result.stabilizing_ns(settings.percentile) >= settings.latency_threshold_ms * 1_000_000
                ):
                    _err(
                        f"Measured latency went over the set limit of {settings.latency_threshold_ms} msec. "
                    )
                    break
                results.append(result)
                if text:
                    for line in level_lines(result, context):
                        _out(line)
                if result.busy_pct > BUSY_WARNING_PCT:
                    _err(
                        f"a load generator process used {result.busy_pct:.0f}% of a core at this level: the "
                        f"client may be the limit; try --processes {settings.processes + 1}"
                    )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        profiler.close()
    _finish(info, results, context, filename, plot, output_format)
    if interrupted:
        partial = [r for r in results if r.interrupted]
        detail = ""
        if partial:
            used = min(len(partial[0].windows), 3)
            detail = (
                f"; the last level was not yet stable and is reported from its last {used} of "
                f"{len(partial[0].windows)} window(s)"
            )
        _err(f"interrupted: stopped measuring{detail}")
        return True
    if failure is not None:
        raise CliError(failure, STABILITY_EXIT)
    return False


def unstable_warning(what: str, result: LevelResult, settings: Settings) -> str:
    """One line (a terminal's width for the usual levels): the level is reported anyway, from its
    steadiest windows, and the summary marks it `(not stable)`."""
    return (
        f"Warning: {what} unstable ({len(result.windows)} windows {result.spread * 100:.0f}% apart, "
        f"> {settings.stability * 100:g}%): a longer -p helps"
    )


def _finish(
    info: Any,
    results: list[LevelResult],
    context: ReportContext,
    filename: Path | None,
    plot: Path | None,
    output_format: str,
) -> None:
    if output_format == "json":
        _out(
            json.dumps(
                report_json(info.name, info.version, results, context, context.settings.processes), indent=2
            )
        )
    elif results:
        for line in summary_lines(results, context):
            _out(line)
    if not results:
        return
    if filename is not None:
        content, warnings = csv_text(results, context)
        for warning in warnings:
            _err(warning)
        _write(filename, content, "-f")
        for path, extra in composing_csv_files(filename, results, context).items():
            _write(path, extra, "-f")
    if plot is not None:
        from tcli.perf.plot import write_plot

        write_plot(plot, results, info.name, context.concurrency)


def _write(path: Path, content: str, flag: str) -> None:
    try:
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{flag}: cannot write '{path}': {exc.strerror or exc}") from None
