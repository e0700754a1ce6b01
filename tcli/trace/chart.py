"""`tcli trace summary --png PATH`: each model's median phase times as one stacked bar. matplotlib is
imported here only."""

from __future__ import annotations

from pathlib import Path

from tcli.errors import CliError
from tcli.trace.summary import PHASE_TITLES, PHASES, ModelPhases, percentile_us


def write_chart(path: Path, models: list[ModelPhases]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--png needs matplotlib: pip install 'tcli[plot]'") from None
    if not models:
        raise CliError("--png: the trace file holds no traces")
    names = [f"{m.model} (v{m.version})" for m in models]
    figure, axes = plt.subplots(figsize=(max(6.0, 1.6 * len(models) + 3), 4.8))
    bottoms = [0.0] * len(models)
    for phase in PHASES:
        heights = [percentile_us(m.ns[phase], 50) if m.ns[phase] else 0.0 for m in models]
        axes.bar(names, heights, bottom=bottoms, label=PHASE_TITLES[phase])
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    axes.set_ylabel("median time (usec)")
    axes.set_title("Where a request's time goes, per model (p50 of each phase)")
    axes.legend()
    axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as exc:
        raise CliError(f"--png {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(figure)
