"""`tcli perf --plot FILE.png`: latency against throughput, one point per load level, with the
latency split measured by the server beside it. matplotlib is imported here only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tcli.errors import CliError
from tcli.perf.profiler import LevelResult
from tcli.perf.stats import server_breakdown


def write_plot(path: Path, results: Sequence[LevelResult], model: str, concurrency: bool) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError("--plot needs matplotlib: pip install 'tcli[plot]'") from None
    measured = [r for r in results if r.latency is not None]
    if not measured:
        raise CliError("--plot: nothing was measured")
    label = "concurrency" if concurrency else "request rate"
    throughput = [r.client.infer_per_sec for r in measured]
    figure, (curve, split) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for key, style in ((50, "o-"), (90, "s--"), (95, "^--"), (99, "v:")):
        curve.plot(
            throughput,
            [r.latency.percentiles_ns[key] / 1000 for r in measured if r.latency],
            style,
            label=f"p{key}",
        )
    curve.plot(throughput, [r.latency.avg_ns / 1000 for r in measured if r.latency], "k.-", label="average")
    for result, x in zip(measured, throughput, strict=True):
        assert result.latency is not None
        value = f"{result.value:g}"
        curve.annotate(
            value, (x, result.latency.percentiles_ns[99] / 1000), textcoords="offset points", xytext=(4, 4)
        )
    curve.set_xlabel("throughput (infer/sec)")
    curve.set_ylabel("latency (usec)")
    curve.set_title(f"{model}: latency vs throughput (points labelled with the {label})")
    curve.grid(True, alpha=0.3)
    curve.legend()

    names = [f"{r.value:g}" for r in measured]
    bottoms = [0.0] * len(measured)
    parts: list[tuple[str, list[float]]] = []
    if all(r.server is not None and r.server.success_count for r in measured):
        splits = [server_breakdown(r.server) for r in measured if r.server is not None]
        composite = any(r.server is not None and r.server.composing for r in measured)
        parts.append(("queue", [float(s.queue_us) for s in splits]))
        if composite:
            parts.append(("compute", [float(s.compute_us) for s in splits]))
        else:
            parts.append(("compute input", [float(s.compute_input_us) for s in splits]))
            parts.append(("compute infer", [float(s.compute_infer_us) for s in splits]))
            parts.append(("compute output", [float(s.compute_output_us) for s in splits]))
        parts.append(("server overhead", [float(s.overhead_us) for s in splits]))
        client_rest = [
            max(r.latency.avg_ns / 1000 - s.request_us, 0.0)
            for r, s in zip(measured, splits, strict=True)
            if r.latency
        ]
        parts.append(("network + client", client_rest))
    else:
        parts.append(("client average", [r.latency.avg_ns / 1000 for r in measured if r.latency]))
    for name, values in parts:
        split.bar(names, values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    split.set_xlabel(label)
    split.set_ylabel("average latency (usec)")
    split.set_title("where the time goes")
    split.legend(fontsize="small")
    save_png(figure, path)


def save_png(figure: Any, path: Path) -> None:
    """Write `figure` as a PNG (a path that cannot be written is the user's error) and free it."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    try:
        figure.savefig(path, format="png", dpi=100)
    except OSError as exc:
        raise CliError(f"--plot: cannot write '{path}': {exc.strerror or exc}") from None
    finally:
        plt.close(figure)
