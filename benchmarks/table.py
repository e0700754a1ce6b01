"""The benchmark's one table: a row per scenario (tcli's figure, the reference's, their ratio, the
target and whether it is met), printed with Rich and optionally written as JSON."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table


@dataclass
class Row:
    scenario: str
    tcli: str
    reference: str
    ratio: float | None
    target: str  # e.g. ">= 1.00", "<= 3 s", "info"
    passed: bool | None  # None: an info row, or not measurable (see note)
    note: str = ""
    runs: dict[str, list[float]] = field(default_factory=dict)  # each side's raw figures (JSON only)

    @property
    def verdict(self) -> str:
        if self.target == "info":
            return "info"
        return "n/a" if self.passed is None else ("pass" if self.passed else "FAIL")


def at_least(ratio: float | None, target: float) -> bool | None:
    return None if ratio is None else ratio >= target


def ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours is not None and theirs else None


def machine() -> str:
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def render(rows: Sequence[Row], title: str, console: Console | None = None) -> None:
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("scenario", overflow="fold")
    table.add_column("tcli", justify="right")
    table.add_column("reference", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target", justify="right")
    table.add_column("result")
    table.add_column("note", overflow="fold")
    styles = {"pass": "green", "FAIL": "bold red", "info": "dim", "n/a": "yellow"}
    for row in rows:
        verdict = row.verdict
        table.add_row(
            row.scenario,
            row.tcli,
            row.reference,
            "—" if row.ratio is None else f"{row.ratio:.2f}",
            row.target,
            f"[{styles[verdict]}]{verdict}[/]",
            row.note,
        )
    (console or Console(width=200)).print(table)


def write_json(path: Path, rows: Sequence[Row], meta: dict[str, object]) -> None:
    payload = {**meta, "rows": [{**asdict(row), "result": row.verdict} for row in rows]}
    path.write_text(json.dumps(payload, indent=2) + "\n")
