"""Every table and annotation the CLI prints: domain results in, Rich renderables or text out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from server.config.problems import Problem, RepositoryReport

_STATUS_STYLE = {"ok": "[green]OK[/]", "warning": "[yellow]WARN[/]", "error": "[red]ERROR[/]"}


def _where(problem: Problem) -> str:
    if problem.file is None:
        return ""
    location = _relative(problem.file)
    if problem.line:
        location += f":{problem.line}"
        if problem.column:
            location += f":{problem.column}"
    return location


def _relative(path: Path | str) -> str:
    if isinstance(path, str):  # a file in object storage
        return path
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def validation_table(report: RepositoryReport) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Model repository check")
    table.add_column("model", style="bold")
    table.add_column("versions")
    table.add_column("backend")
    table.add_column("status")
    table.add_column("problems")
    for model in report.models:
        errors = sum(p.severity == "error" for p in model.problems)
        warnings = len(model.problems) - errors
        counts = [f"[red]{errors} error{'s' * (errors != 1)}[/]"] if errors else []
        counts += [f"[yellow]{warnings} warning{'s' * (warnings != 1)}[/]"] if warnings else []
        table.add_row(
            escape(model.name),
            ", ".join(str(v) for v in model.versions) or "-",
            escape(model.backend or "?"),
            _STATUS_STYLE[model.status],
            ", ".join(counts) or "[dim]-[/]",
        )
    return table


def problem_lines(report: RepositoryReport) -> list[str]:
    """Each problem as Rich markup: location, message, and the fix on its own line."""
    from rich.markup import escape

    lines = []
    for model_name, problem in [("", p) for p in report.problems] + [
        (m.name, p) for m in report.models for p in m.problems
    ]:
        colour = "red" if problem.severity == "error" else "yellow"
        where = _where(problem) or model_name
        lines.append(f"[{colour}]{problem.severity}[/] [bold]{escape(where)}[/]: {escape(problem.message)}")
        if problem.fix:
            lines.append(f"    [cyan]fix:[/] {escape(problem.fix)}")
    return lines


def validation_summary(report: RepositoryReport) -> str:
    problems = report.all_problems()
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    broken = sum(m.status == "error" for m in report.models)
    verdict = "[red]invalid[/]" if errors else "[green]valid[/]"
    return (
        f"{verdict}: {len(report.models)} models, {broken} with errors; {errors} errors, {warnings} warnings"
    )


def validation_json(report: RepositoryReport) -> str:
    return json.dumps(report.as_dict(), indent=2)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(report: RepositoryReport) -> str:
    """GitHub Actions workflow commands: one ::error/::warning per problem at its file and line."""
    out = []
    for model_name, problem in [("", p) for p in report.problems] + [
        (m.name, p) for m in report.models for p in m.problems
    ]:
        properties = []
        if problem.file is not None:
            properties.append(f"file={_escape_property(_relative(problem.file))}")
        if problem.line:
            properties.append(f"line={problem.line}")
        if problem.column:
            properties.append(f"col={problem.column}")
        title = f"tcli repo validate: {model_name}" if model_name else "tcli repo validate"
        properties.append(f"title={_escape_property(title)}")
        out.append(f"::{problem.severity} {','.join(properties)}::{_escape_data(problem.one_line())}")
    return "\n".join(out)


def keep_whole(table: Table, optional: Sequence[str] = (), width: int | None = None) -> Table:
    """Fit `table` to the terminal (or `width`) without cutting a name or a header word: columns wrap
    between words but are never narrower than their longest word, and the `optional` columns are
    dropped, in that order, until the rest fits (a caption says which). Rich alone cuts cells to fit
    (`densenet_on…`)."""
    from rich.console import Console
    from rich.text import Text

    def words(cell: Any) -> list[str]:
        text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
        return text.split() or [""]

    def narrowest(column: Any) -> int:
        return max(len(word) for cell in (column.header, *column.cells) for word in words(cell))

    def natural(column: Any) -> int:
        return max(len(" ".join(words(cell))) for cell in (column.header, *column.cells))

    available = width if width is not None else Console().width

    def room() -> int:  # for the cells: less one space of padding each side and the vertical lines
        return available - 3 * len(table.columns) - 1

    dropped = []
    for name in optional:
        if sum(narrowest(c) for c in table.columns) <= room():
            break
        for index, column in enumerate(table.columns):
            if column.header == name:
                del table.columns[index]
                dropped.append(name)
                break
    if dropped:
        table.caption = f"left out at this width: {', '.join(dropped)} (--format json has every column)"
    lows = [narrowest(c) for c in table.columns]
    highs = [natural(c) for c in table.columns]
    if sum(highs) > room() and sum(lows) <= room():
        # each column its longest word, then what is left to the columns that wrap, in order
        spare = room() - sum(lows)
        for column, low, high in zip(table.columns, lows, highs, strict=True):
            extra = min(spare, high - low)
            spare -= extra
            column.width = low + extra
    for column in table.columns:
        column.overflow = "fold"  # a word wider than the whole terminal folds, never ends in …
    return table


def index_table(rows: list[dict[str, Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Model repository index")
    for column in ("model", "versions", "served", "backend", "config", "repository"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            escape(row["name"]),
            ", ".join(row["versions"]) or "-",
            ", ".join(row["served"]) or "-",
            escape(row["backend"] or "?"),
            row["config"],
            escape(row["repository"]),
        )
    return keep_whole(table, ("config", "repository", "served"))


def startup_tables(server: Any) -> list[Table]:
    """tritonserver's start-up tables: backends, model/version status, and options."""
    from rich.markup import escape
    from rich.table import Table

    models = server.manager.models()
    backends = Table(title="Backends")
    backends.add_column("Backend")
    backends.add_column("Models")
    by_backend: dict[str, list[str]] = {}
    for name, model in sorted(models.items()):
        if model.config is not None:
            by_backend.setdefault(model.config.backend or model.config.platform, []).append(name)
    for backend, names in sorted(by_backend.items()):
        backends.add_row(escape(backend), escape(", ".join(names)))

    status = Table(title="Models")
    status.add_column("Model")
    status.add_column("Version")
    status.add_column("Status")
    for row in server.manager.index():
        state = row.get("state", "UNAVAILABLE: not loaded")
        if row.get("reason"):
            state = f"{state}: {row['reason']}"
        colour = "green" if state == "READY" else "red"
        status.add_row(escape(row["name"]), row.get("version", "-"), f"[{colour}]{escape(state)}[/]")
    for repository, error in server.manager.repository_errors().items():
        status.add_row(escape(f"(repository) {repository}"), "-", f"[red]UNAVAILABLE: {escape(error)}[/]")

    settings = server.settings
    options = Table(title="Options")
    options.add_column("Option")
    options.add_column("Value")
    for option, value in (
        ("model_repository_path", ", ".join(str(p) for p in settings.model_repositories)),
        ("model_control_mode", str(settings.model_control_mode)),
        ("strict_readiness", str(settings.strict_readiness).lower()),
        ("exit_timeout", str(settings.exit_timeout_secs)),
        ("http_port", str(server.http_port or "disabled")),
        ("grpc_port", str(server.grpc_port or "disabled")),
        ("metrics_port", str(server.metrics_port or "disabled")),
        ("allow_client_shm", str(settings.allow_client_shm).lower()),
        ("cache_enabled", "1" if settings.response_cache_byte_size > 0 else "0"),
    ):
        options.add_row(option, escape(value))
    return [backends, status, options]


def print_table(table: Table) -> None:
    from rich.console import Console

    Console().print(table)


def model_index_table(rows: list[dict[str, Any]], title: str = "Models") -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title)
    for column in ("model", "version", "state", "reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        state = row.get("state", "")
        colour = "green" if state == "READY" else "yellow" if state in ("LOADING", "UNLOADING") else "red"
        table.add_row(
            escape(row.get("name", "")),
            row.get("version", "-"),
            f"[{colour}]{escape(state or 'not loaded')}[/]",
            escape(row.get("reason", "")),
        )
    return table


def metadata_table(data: dict[str, Any]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    versions = ", ".join(data.get("versions", []))
    table = Table(title=f"{data.get('name', '')} ({data.get('platform', '')}, versions {versions})")
    for column in ("", "name", "datatype", "shape"):
        table.add_column(column)
    for kind in ("inputs", "outputs"):
        for tensor in data.get(kind, []):
            shape = "[" + ", ".join(str(d) for d in tensor.get("shape", [])) + "]"
            table.add_row(kind[:-1], escape(tensor["name"]), tensor["datatype"], shape)
    return table


def statistics_table(stats: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title="Inference statistics")
    for column in (
        "model",
        "version",
        "success",
        "fail",
        "inferences",
        "executions",
        "avg queue us",
        "avg infer us",
        "avg request us",
    ):
        table.add_column(column, justify="right" if column not in ("model", "version") else "left")

    def average_us(entry: dict[str, Any]) -> str:
        count = int(entry.get("count", 0))
        return f"{int(entry.get('ns', 0)) / count / 1000:.0f}" if count else "-"

    for row in stats:
        inference = row.get("inference_stats", {})
        table.add_row(
            row.get("name", ""),
            str(row.get("version", "")),
            str(inference.get("success", {}).get("count", 0)),
            str(inference.get("fail", {}).get("count", 0)),
            str(row.get("inference_count", 0)),
            str(row.get("execution_count", 0)),
            average_us(inference.get("queue", {})),
            average_us(inference.get("compute_infer", {})),
            average_us(inference.get("success", {})),
        )
    return keep_whole(table, ("avg queue us", "avg infer us", "executions", "inferences"))


def _output_values(array: Any) -> Any:
    """An output as JSON-ready values: BYTES decoded as UTF-8 text where they are text."""
    import numpy as np

    if array.dtype == object or array.dtype.kind in ("S", "U"):
        items = [
            v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)
        ]
        return np.array(items, dtype=object).reshape(array.shape).tolist()
    return array.tolist()


def output_json(name: str, datatype: str, array: Any) -> dict[str, Any]:
    """One output as KServe v2 writes it (name, datatype, shape), with the data nested by shape."""
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": _output_values(array)}


def infer_result_json(result: Any) -> dict[str, Any]:
    """`tcli infer --format json`: the response's model, version, id and every output."""
    answer: dict[str, Any] = {"model_name": result.model_name, "model_version": result.model_version}
    if result.id:
        answer["id"] = result.id
    answer["outputs"] = [
        output_json(name, result.datatypes.get(name, ""), array) for name, array in result.outputs.items()
    ]
    return answer


def infer_outputs_table(result: Any, part: str = "") -> Table:
    """`tcli infer` in the generic mode: one row per output with its values (long ones elided);
    `part` names the response among several (a decoupled model's)."""
    import numpy as np
    from rich.markup import escape
    from rich.table import Table

    version = f" version {result.model_version}" if result.model_version else ""
    title = f"{result.model_name}{version}{', ' + part if part else ''}"
    table = Table(title=title, min_width=len(title))  # the title on one line
    for column in ("output", "datatype", "shape", "values"):
        table.add_column(column, overflow="fold")
    for name, array in result.outputs.items():
        values = np.asarray(_output_values(array), dtype=object) if array.dtype == object else array
        text = np.array2string(values, threshold=200, edgeitems=4, max_line_width=100, separator=", ")
        shape = "[" + ", ".join(str(d) for d in array.shape) + "]"
        table.add_row(escape(name), result.datatypes.get(name, ""), shape, escape(text))
    return table


def perf_progress(
    label: str, trial: int, max_trials: int, fraction: float, windows: list[Any], percentile: int
) -> Any:
    """`tcli perf` while it measures: the load level, the current window's progress, and the windows so
    far with their throughput and latency (the stability rule compares the last three)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    from tcli.perf.stats import cpp_double

    heading = Text.assemble(
        (label, "bold"), f"  window {min(trial + 1, max_trials)} of at most {max_trials}", style="cyan"
    )
    done = max(0.0, min(fraction, 1.0))
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=1.0, completed=done, width=40), Text(f"{done:.0%} of this window", style="dim")
    )
    table = Table(box=None, padding=(0, 2), show_edge=False)
    latency_name = "avg latency" if percentile == -1 else f"p{percentile} latency"
    for column in ("window", "requests", "infer/sec", latency_name, "p99 latency"):
        table.add_column(column, justify="right")
    for index, window in enumerate(windows[-6:], start=max(1, len(windows) - 5)):
        if window.latency is None:
            table.add_row(str(index), "0", "-", "-", "-")
            continue
        table.add_row(
            str(index),
            str(window.client.request_count),
            cpp_double(window.infer_per_sec),
            f"{window.stabilizing_ns(percentile) / 1000:.0f} usec",
            f"{window.latency.percentiles_ns[99] / 1000:.0f} usec",
        )
    return Group(heading, bar, table)


def trace_summary_table(files: list[Path], models: list[Any]) -> Table:
    """`tcli trace summary`: a row per model, p50 / p99 microseconds per phase (tcli/trace/summary.py)."""
    from rich.markup import escape
    from rich.table import Table

    from tcli.trace.summary import PHASE_TITLES, PHASES, percentile_us

    shown = files[0].name if len(files) == 1 else f"{files[0].name} … ({len(files)} files)"
    table = Table(title=f"Trace summary: {escape(shown)} (p50/p99, usec)")
    table.add_column("model", style="bold")
    table.add_column("traces", justify="right")
    for phase in PHASES:
        table.add_column(PHASE_TITLES[phase], justify="right")
    for model in models:
        cells = [  # one word each: a narrow terminal wraps between cells' words, never inside a pair
            f"{percentile_us(model.ns[p], 50):.0f}/{percentile_us(model.ns[p], 99):.0f}"
            if model.ns[p]
            else "[dim]-[/]"
            for p in PHASES
        ]
        table.add_row(f"{escape(model.model)} (v{model.version})", str(model.traces), *cells)
    # the phases that are usually small go first when the terminal is narrow
    optional = [PHASE_TITLES[p] for p in ("compute_input", "compute_output", "network_out", "network_in")]
    return keep_whole(table, optional)
