"""Python models' custom metrics (`pb_utils.MetricFamily` / `Metric`) on /metrics, beside Triton's
own families, as Triton's python backend exports them: counters and gauges one sample per label
set, histograms as `_bucket` (with `le`), `_sum` and `_count`. The families come from a callable
(the python backend's registry, wired by server/app.py), read at each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from server.backends.python.pb_utils.metric_registry import MetricFamilySnapshot

CustomFamilies = Callable[[], Sequence["MetricFamilySnapshot"]]


def custom_families(families: Sequence[MetricFamilySnapshot]) -> Iterator[Metric]:
    from prometheus_client.core import Metric

    for family in families:
        metric = Metric(family.name, family.description, family.kind)
        for sample in family.samples:
            if sample.bucket_bounds is None:
                metric.add_sample(family.name, sample.labels, sample.value or 0.0)
                continue
            counts = sample.bucket_counts or ()
            for bound, count in zip(sample.bucket_bounds, counts, strict=True):
                metric.add_sample(f"{family.name}_bucket", {**sample.labels, "le": _bound(bound)}, count)
            metric.add_sample(f"{family.name}_bucket", {**sample.labels, "le": "+Inf"}, sample.count)
            metric.add_sample(f"{family.name}_sum", sample.labels, sample.sum)
            metric.add_sample(f"{family.name}_count", sample.labels, sample.count)
        yield metric


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
