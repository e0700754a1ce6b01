"""The LLM figures as a Rich table per concurrency level (AIPerf's layout: one row per metric, its
avg, min, max, p99, p90, p50 and std), as CSV (one row per level and metric) and as JSON (AIPerf's
metric tags, each with its unit and statistics)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from tcli.perf.llm.metrics import DISTRIBUTIONS, STATS, TOTALS, LevelMetrics

SHOWN = ("avg", "min", "max", "p99", "p90", "p50", "std")


def _number(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "N/A"
    return f"{value:,.2f}"


def level_table(level: LevelMetrics, title: str) -> Any:
    from rich.table import Table

    table = Table(title=f"{title} | concurrency {level.concurrency}")
    table.add_column("Metric", style="bold", no_wrap=True)
    for stat in SHOWN:
        table.add_column(stat, justify="right")
    for tag, name, unit in DISTRIBUTIONS:
        stats = level.distributions.get(tag) or {}
        table.add_row(f"{name} ({unit})", *(_number(stats[s]) if s in stats else "N/A" for s in SHOWN))
    for tag, name, unit in TOTALS:
        value = level.totals.get(tag, float("nan"))
        shown = f"{value:,.0f}" if unit == "requests" else _number(value)
        table.add_row(f"{name} ({unit})", shown, *("" for _ in SHOWN[1:]))
    return table


def csv_text(levels: Sequence[LevelMetrics]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["Concurrency", "Metric", "Unit", *STATS])
    for level in levels:
        for tag, _, unit in DISTRIBUTIONS:
            stats = level.distributions.get(tag) or {}
            writer.writerow(
                [level.concurrency, tag, unit, *(f"{stats[s]:.4f}" if s in stats else "" for s in STATS)]
            )
        for tag, _, unit in TOTALS:
            writer.writerow([level.concurrency, tag, unit, f"{level.totals.get(tag, 0.0):.4f}"])
    return out.getvalue()


def report_json(model: str, target: dict[str, Any], levels: Sequence[LevelMetrics]) -> dict[str, Any]:
    units = {tag: unit for tag, _, unit in (*DISTRIBUTIONS, *TOTALS)}
    answer_levels = []
    for level in levels:
        entry: dict[str, Any] = {"concurrency": level.concurrency}
        for tag, stats in level.distributions.items():
            entry[tag] = {"unit": units[tag], **stats}
        for tag, value in level.totals.items():
            entry[tag] = {"unit": units[tag], "avg": value}
        if level.first_error:
            entry["first_error"] = level.first_error
        answer_levels.append(entry)
    return {"model": model, **target, "levels": answer_levels}
