"""Triton's latency summaries on /metrics (`--metrics-config summary_latencies=true`): per loaded
model version, labels `model`, `version` and, on the quantile samples, `quantile`; samples in
Triton 2.51's order (`_count`, `_sum`, then one per quantile). The observations are kept by the
statistics (`server/scheduling/latency_summary.py`); this only writes them.

    nv_inference_request_summary_us         end-to-end duration of successful requests
    nv_inference_queue_summary_us           queueing
    nv_inference_compute_input_summary_us   input preparation
    nv_inference_compute_infer_summary_us   model execution
    nv_inference_compute_output_summary_us  output preparation
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from server.scheduling.latency_summary import LatencySummaries

# (stage of LatencySummaries, family name, HELP text as Triton 2.51 writes it)
SUMMARIES = (
    (
        "request",
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    (
        "queue",
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "compute_input",
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "compute_infer",
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "compute_output",
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
)


def summary_families(
    versions: Sequence[tuple[str, str, LatencySummaries | None]],
) -> Iterator[Metric]:
    """The five summary families over the loaded `versions` ((model, version, their summaries)); none
    when summaries are off or no version is loaded."""
    from prometheus_client.core import Metric

    rows = [(model, version, summaries) for model, version, summaries in versions if summaries is not None]
    if not rows:
        return
    for stage, name, documentation in SUMMARIES:
        family = Metric(name, documentation, "summary")
        for model, version, summaries in rows:
            summary = summaries.by_stage[stage]
            labels = {"model": model, "version": version}
            wanted = [q for q, _ in summaries.quantiles]
            family.add_sample(f"{name}_count", labels, summary.count)
            family.add_sample(f"{name}_sum", labels, summary.sum)
            for quantile, value in zip(wanted, summary.quantiles(wanted), strict=True):
                family.add_sample(name, {**labels, "quantile": f"{quantile:g}"}, value)
        yield family
