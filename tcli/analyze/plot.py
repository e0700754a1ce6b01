"""`tcli analyze --plot FILE.png`: throughput against p99 latency, one line per config through its
concurrency levels, each config's operating point marked, the Pareto front drawn through the front's
points, and the latency budget as a vertical line. matplotlib is imported here only."""

from __future__ import annotations

from pathlib import Path

from tcli.analyze.results import Constraints, Row
from tcli.errors import CliError
from tcli.perf.plot import save_png

LABELLED = 8  # configs named in the legend: the best ones (the rest are drawn grey)


def write_plot(path: Path, model: str, rows: list[Row], constraints: Constraints) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'tcli[plot]'") from None
    drawn = [row for row in rows if row.point is not None and row.measured.levels]
    if not drawn:
        raise CliError("--plot: nothing was measured")
    figure, axes = plt.subplots(figsize=(10, 6))
    for position, row in enumerate(drawn):
        levels = [level for level in row.measured.levels if level.throughput > 0]
        xs = [level.p99_ms for level in levels]
        ys = [level.throughput for level in levels]
        named = position < LABELLED
        axes.plot(
            xs,
            ys,
            "o-" if named else ".-",
            color=None if named else "0.75",
            linewidth=1.2 if named else 0.8,
            markersize=4 if named else 3,
            label=row.candidate.label() if named else None,
            zorder=2 if named else 1,
        )
    front = sorted(
        (row.point for row in drawn if row.front and row.point is not None), key=lambda p: p.p99_ms
    )
    axes.plot(
        [p.p99_ms for p in front],
        [p.throughput for p in front],
        "k--",
        linewidth=1.5,
        label="Pareto front",
        zorder=3,
    )
    axes.scatter(
        [p.p99_ms for p in front],
        [p.throughput for p in front],
        s=60,
        facecolors="none",
        edgecolors="k",
        zorder=4,
    )
    if rows and rows[0].rank == 1 and rows[0].point is not None:
        best = rows[0].point
        axes.scatter(
            [best.p99_ms], [best.throughput], marker="*", s=250, color="gold", edgecolors="k", zorder=5
        )
        axes.annotate(
            f"best: {rows[0].candidate.label()} @ c={best.concurrency}",
            (best.p99_ms, best.throughput),
            textcoords="offset points",
            xytext=(8, -14),
            fontsize="small",
        )
    if constraints.latency_budget_ms is not None:
        axes.axvline(constraints.latency_budget_ms, color="red", linestyle=":", label="latency budget")
    if constraints.min_throughput is not None:
        axes.axhline(constraints.min_throughput, color="orange", linestyle=":", label="min throughput")
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (infer/sec)")
    axes.set_title(f"{model}: throughput against p99 latency, one line per config (points: concurrency)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", loc="lower right")
    save_png(figure, path)
