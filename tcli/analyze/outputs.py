"""What `tcli analyze` reports and writes: the table of every config measured (the best under the
constraints first, the Pareto front marked), its JSON and CSV forms, and the best config written as a
repository (`OUT/MODEL/config.pbtxt` with the model's version folders beside it), validated as
`tcli repo validate` validates, with its difference from the model's own config."""

from __future__ import annotations

import csv
import difflib
import io
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tcli.analyze.results import Constraints, Level, Row
from tcli.analyze.space import DIMENSIONS
from tcli.errors import CliError

if TYPE_CHECKING:
    from rich.table import Table
    from tritonclient.grpc.model_config_pb2 import ModelConfig


@dataclass
class Report:
    model: str
    mode: str  # brute | quick
    constraints: Constraints
    rows: list[Row]
    pruned: int = 0
    resumed: int = 0
    seconds: float = 0.0


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def checked(report: Report) -> list[Row]:
    """The rows served over HTTP before the recommendation (verify.py)."""
    return [row for row in report.rows if row.served is not None]


def table(report: Report) -> Table:
    from rich.table import Table

    served = checked(report)
    title = (
        f"{report.model}: {len(report.rows)} configs measured ({report.mode} search"
        + (f", {report.pruned} pruned" if report.pruned else "")
        + (f", {report.resumed} from the checkpoint" if report.resumed else "")
        + f"), {report.constraints.describe()}"
        + (f"; the best {len(served)} also served over HTTP (below)" if served else "")
    )
    grid = Table(title=title, title_justify="left")
    grid.add_column("#", justify="right")
    grid.add_column("config")
    grid.add_column("concurrency", justify="right")
    grid.add_column("infer/sec", justify="right")
    grid.add_column("p50 ms", justify="right")
    grid.add_column("p99 ms", justify="right")
    grid.add_column("front", justify="center")
    grid.add_column("meets", justify="center")
    for row in report.rows:
        point = row.point
        if point is None:
            grid.add_row("", row.candidate.label(), "", "", "", "", "", row.measured.error or "failed")
            continue
        # the figures measured in-process; whether it meets the constraints served, when checked
        meets = row.served_meets if row.served is not None else row.meets
        grid.add_row(
            str(row.rank) if row.rank else "",
            row.candidate.label(),
            str(point.concurrency),
            f"{point.throughput:.1f}",
            _ms(point.p50_ms),
            _ms(point.p99_ms),
            "*" if row.front else "",
            "yes" if meets else "no",
            style="bold green" if row.rank == 1 else None,
        )
    return grid


def served_lines(report: Report) -> list[str]:
    """Each checked config's levels over HTTP, from its in-process concurrency down."""
    lines = []
    for row in checked(report):
        assert row.served is not None
        if row.served.error:
            levels = f"failed: {row.served.error}"
        else:
            levels = "; ".join(
                f"concurrency {level.concurrency}: {level.throughput:.1f} infer/s, p99 {level.p99_ms:.2f} ms"
                + ("" if report.constraints.meets(level) else " (misses the constraints)")
                for level in reversed(row.served.levels)
            )
        lines.append(f"served over HTTP, {row.candidate.label()}: {levels}")
    return lines


def _row_dict(row: Row) -> dict[str, Any]:
    point = row.point
    return {
        "rank": row.rank or None,
        "front": row.front,
        "meets": row.meets,
        "label": row.candidate.label(),
        "config": row.candidate.to_dict(),
        "concurrency": point.concurrency if point else None,
        "throughput": round(point.throughput, 3) if point else None,
        "p50_ms": round(point.p50_ms, 4) if point else None,
        "p99_ms": round(point.p99_ms, 4) if point else None,
        "levels": [level.to_dict() for level in row.measured.levels],
        "error": row.measured.error,
        "served": _served_dict(row),
    }


def _served_dict(row: Row) -> dict[str, Any] | None:
    """The config served over HTTP (verify.py), when it was checked: its operating point there."""
    if row.served is None:
        return None
    point = row.served_point
    return {
        "protocol": "http",
        "meets": row.served_meets,
        "concurrency": point.concurrency if point else None,
        "throughput": round(point.throughput, 3) if point else None,
        "p50_ms": round(point.p50_ms, 4) if point else None,
        "p99_ms": round(point.p99_ms, 4) if point else None,
        "levels": [level.to_dict() for level in row.served.levels],
        "error": row.served.error,
    }


def recommended(row: Row) -> Level | None:
    """Where a row's config is recommended to run: its served point when it was checked over HTTP
    (the in-process figure leaves the front end out), else its operating point."""
    return row.served_point if row.served is not None else row.point


def json_document(report: Report) -> dict[str, Any]:
    rows = report.rows
    best = rows[0] if rows and rows[0].rank == 1 else None
    misses = [row for row in rows if not row.meets and row.point is not None]
    closest_served = next((row for row in checked(report) if not row.served_meets), None)
    point = recommended(best) if best is not None else None
    return {
        "model": report.model,
        "search": report.mode,
        "constraints": {
            "latency_budget_ms": report.constraints.latency_budget_ms,
            "min_throughput": report.constraints.min_throughput,
            "objective": report.constraints.objective,
        },
        "measured": len(rows),
        "pruned": report.pruned,
        "resumed": report.resumed,
        "seconds": round(report.seconds, 2),
        "checked_over_http": len(checked(report)),
        "best": _row_dict(best) if best else None,
        # where to run the best config: its concurrency served over HTTP when it was checked there
        "recommended_concurrency": point.concurrency if point is not None else None,
        "closest": (
            _row_dict(closest_served or misses[0]) if best is None and (closest_served or misses) else None
        ),
        "configs": [_row_dict(row) for row in rows],
    }


CSV_COLUMNS = [
    "rank",
    "front",
    "meets",
    "label",
    *DIMENSIONS,
    "concurrency",
    "throughput",
    "p50_ms",
    "p99_ms",
    "served_concurrency",
    "served_throughput",
    "served_p50_ms",
    "served_p99_ms",
]


def csv_text(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in report.rows:
        meets = row.served_meets if row.served is not None else row.meets  # served, when checked
        writer.writerow(
            [row.rank or "", int(row.front), int(meets), row.candidate.label()]
            + [getattr(row.candidate, d) for d in DIMENSIONS]
            + _point_cells(row.point)
            + _point_cells(row.served_point)
        )
    return out.getvalue()


def _point_cells(point: Level | None) -> list[Any]:
    if point is None:
        return ["", "", "", ""]
    return [point.concurrency, f"{point.throughput:.3f}", f"{point.p50_ms:.4f}", f"{point.p99_ms:.4f}"]


# the best config, written -----------------------------------------------------------------------------
def write_model(output: Path, source: Path | None, name: str, config: ModelConfig, link: bool) -> Path:
    """OUT/MODEL/config.pbtxt, with every other entry of the model's folder (its version folders,
    label files) copied or linked beside it, so that OUT serves as a repository."""
    from server.config.write import to_pbtxt

    folder = output / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if source is not None:
            for entry in sorted(source.iterdir()):
                if entry.name == "config.pbtxt":
                    continue
                target = folder / entry.name
                if target.is_symlink() or target.is_file():
                    target.unlink()
                elif target.is_dir():
                    shutil.rmtree(target)
                if link:
                    target.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
                elif entry.is_dir():
                    shutil.copytree(entry, target, symlinks=True)
                else:
                    shutil.copy2(entry, target)
        written = folder / "config.pbtxt"
        written.write_text(to_pbtxt(config), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"--output-dir {output}: cannot write model '{name}': {exc.strerror or exc}") from None
    return written


def copy_model(output: Path, source: Path, link: bool) -> None:
    """A model written unchanged (an ensemble or BLS model whose composing models were analyzed)."""
    target = output / source.name
    try:
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        if link:
            target.symlink_to(source.resolve(), target_is_directory=True)
        else:
            shutil.copytree(source, target, symlinks=True)
    except OSError as exc:
        raise CliError(
            f"--output-dir {output}: cannot copy model '{source.name}': {exc.strerror or exc}"
        ) from None


def validate_written(output: Path, name: str) -> list[str]:
    """The written model checked as `tcli repo validate` checks it: its errors, one line each."""
    from server.config.model_folder import scan_model
    from server.repository.validation import validate_model

    report = validate_model(scan_model(output / name, output))
    return [
        f"{problem.message}" + (f" ({problem.fix})" if problem.fix else "")
        for problem in report.problems
        if problem.severity == "error"
    ]


def config_diff(original: ModelConfig, best: ModelConfig, before: str, after: str) -> list[str]:
    """The two configs' canonical text forms, compared line by line."""
    from server.config.write import to_pbtxt

    return list(
        difflib.unified_diff(
            to_pbtxt(original).splitlines(), to_pbtxt(best).splitlines(), before, after, lineterm="", n=1
        )
    )
