"""The custom-metrics registry: every metric family python models hold, kept in-process, collected
and rendered in Prometheus text format for the server to export.

In an instance process the models' families go to a registry that forwards to the server's
(`server/backends/python/metric_forwarding.py`, installed with `set_registry`); the server's one,
`METRICS`, holds every series, so that instances of a model counting into one family and label set
count into one series, as Triton's stubs count into the core's.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
import threading
from dataclasses import dataclass

from server.backends.python.pb_utils.errors import TritonModelException


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_KIND_NAMES = {MetricKind.COUNTER: "COUNTER", MetricKind.GAUGE: "GAUGE", MetricKind.HISTOGRAM: "HISTOGRAM"}


class _MetricState:
    """One time series (family + label values); shared by every Metric object with those labels."""

    def __init__(self, labels: tuple[tuple[str, str], ...], bounds: tuple[float, ...] | None) -> None:
        self.labels = labels
        self.value = 0.0
        self.bounds = bounds
        self.bucket_counts = [0] * len(bounds) if bounds is not None else None
        self.sum = 0.0
        self.count = 0
        self.refs = 0
        self.id = 0  # a forwarded registry's handle of the server's series


class _FamilyState:
    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: dict[tuple[tuple[str, str], ...], _MetricState] = {}
        self.refs = 0
        self.id = 0  # a forwarded registry's handle of the server's family


@dataclass(frozen=True)
class MetricSample:
    """One time series. Counters and gauges have `value`; histograms have `bucket_bounds` with
    cumulative `bucket_counts` (the +Inf bucket is `count`), `sum` and `count`."""

    labels: dict[str, str]
    value: float | None
    bucket_bounds: tuple[float, ...] | None = None
    bucket_counts: tuple[int, ...] | None = None
    sum: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class MetricFamilySnapshot:
    name: str
    description: str
    kind: str  # "counter" | "gauge" | "histogram", as the Prometheus TYPE line spells it
    samples: tuple[MetricSample, ...]


class MetricRegistry:
    """Every custom metric family python models created and still hold. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a Metric dropped by the GC while the lock is held releases here
        self._families: dict[str, _FamilyState] = {}

    # used by MetricFamily / Metric ----------------------------------------------------------------
    def _acquire_family(self, name: str, description: str, kind: MetricKind) -> _FamilyState:
        if not _METRIC_NAME.fullmatch(name):
            raise TritonModelException("Error when creating MetricFamily: Invalid metric name")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _FamilyState(name, description, kind)
            elif family.kind != kind:
                raise TritonModelException(
                    "Error when creating MetricFamily: Family name already exists with different type"
                )
            family.refs += 1  # same name and kind: the same family (the first description stays)
            return family

    def _release_family(self, family: _FamilyState) -> None:
        with self._lock:
            family.refs -= 1
            if family.refs <= 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    def _acquire_metric(
        self, family: _FamilyState, labels: dict[str, str], bounds: tuple[float, ...] | None
    ) -> _MetricState:
        check_metric(labels, bounds)
        series = tuple(sorted(labels.items()))
        with self._lock:
            metric = family.metrics.get(series)
            if metric is None:
                metric = family.metrics[series] = _MetricState(series, bounds)
            metric.refs += 1
            return metric

    def _release_metric(self, family: _FamilyState, metric: _MetricState) -> None:
        with self._lock:
            metric.refs -= 1
            if metric.refs <= 0 and family.metrics.get(metric.labels) is metric:
                del family.metrics[metric.labels]

    def _update(self, metric: _MetricState, kind: MetricKind, op: str, value: float) -> float:
        check_operation(kind, op, value)
        with self._lock:
            if op == "increment":
                metric.value += value
            elif op == "set":
                metric.value = value
            elif op == "observe":
                assert metric.bounds is not None and metric.bucket_counts is not None
                for i, bound in enumerate(metric.bounds):
                    if value <= bound:
                        metric.bucket_counts[i] += 1
                metric.sum += value
                metric.count += 1
            return metric.value

    def _merge(self, metric: _MetricState, update: PendingUpdate) -> None:
        """Updates an instance process batched for one series, applied in one go."""
        with self._lock:
            if update.set_value is not None:
                metric.value = update.set_value
            metric.value += update.delta
            if metric.bucket_counts is not None and update.bucket_counts is not None:
                for i, count in enumerate(update.bucket_counts):
                    metric.bucket_counts[i] += count
            metric.sum += update.sum
            metric.count += update.count

    def _value(self, metric: _MetricState) -> float:
        with self._lock:
            return metric.value

    # read by the server -----------------------------------------------------------------------------
    def collect(self) -> list[MetricFamilySnapshot]:
        """A consistent copy of every family and its series, sorted by name."""
        with self._lock:
            out = []
            for family in sorted(self._families.values(), key=lambda f: f.name):
                samples = []
                for metric in family.metrics.values():
                    histogram = family.kind == MetricKind.HISTOGRAM
                    samples.append(
                        MetricSample(
                            labels=dict(metric.labels),
                            value=None if histogram else metric.value,
                            bucket_bounds=metric.bounds if histogram else None,
                            bucket_counts=tuple(metric.bucket_counts)
                            if histogram and metric.bucket_counts is not None
                            else None,
                            sum=metric.sum,
                            count=metric.count,
                        )
                    )
                out.append(
                    MetricFamilySnapshot(
                        family.name, family.description, family.kind.name.lower(), tuple(samples)
                    )
                )
            return out

    def render_prometheus(self) -> str:
        """The families in Prometheus text exposition format (HELP, TYPE, one line per series)."""
        lines: list[str] = []
        for family in self.collect():
            lines.append(f"# HELP {family.name} {_escape_help(family.description)}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            for sample in family.samples:
                if sample.bucket_bounds is None:
                    lines.append(f"{family.name}{_labels_text(sample.labels)} {_number(sample.value or 0.0)}")
                    continue
                assert sample.bucket_counts is not None
                for bound, count in zip(sample.bucket_bounds, sample.bucket_counts, strict=True):
                    labels = _labels_text({**sample.labels, "le": _number(bound)})
                    lines.append(f"{family.name}_bucket{labels} {count}")
                lines.append(
                    f"{family.name}_bucket{_labels_text({**sample.labels, 'le': '+Inf'})} {sample.count}"
                )
                lines.append(f"{family.name}_sum{_labels_text(sample.labels)} {_number(sample.sum)}")
                lines.append(f"{family.name}_count{_labels_text(sample.labels)} {sample.count}")
        return "\n".join(lines) + "\n" if lines else ""

    def clear(self) -> None:
        with self._lock:
            self._families.clear()


def check_metric(labels: dict[str, str], bounds: tuple[float, ...] | None) -> None:
    """Triton's checks of a new Metric's labels and histogram buckets."""
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
            raise TritonModelException("Error when creating Metric: Invalid label name")
        if not isinstance(value, str):
            raise TritonModelException(
                "Error when creating Metric: attempt to access JSON non-string as string"
            )
    if bounds is not None and any(b >= c for b, c in itertools.pairwise(bounds)):
        raise TritonModelException("Error when creating Metric: Bucket Boundaries must be strictly sorted")


def check_operation(kind: MetricKind, op: str, value: float) -> None:
    """Whether a metric of `kind` supports `op` with `value` (Triton's words, as ValueError)."""
    kind_name = f"TRITONSERVER_METRIC_KIND_{_KIND_NAMES[kind]}"
    allowed = {
        MetricKind.COUNTER: ("increment", "value"),
        MetricKind.GAUGE: ("increment", "set", "value"),
        MetricKind.HISTOGRAM: ("observe",),
    }[kind]
    if op not in allowed:
        raise ValueError(f"{kind_name} does not support {op.capitalize()}")
    if op == "increment" and kind == MetricKind.COUNTER and value < 0.0:
        raise ValueError(f"{kind_name} can only be incremented monotonically by non-negative values.")


@dataclass
class PendingUpdate:
    """What an instance process did to one series since it last told the server: the last set() (a
    gauge's), the increments after it, and a histogram's observations as bucket counts, sum, count."""

    set_value: float | None = None
    delta: float = 0.0
    bucket_counts: list[int] | None = None
    sum: float = 0.0
    count: int = 0


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items()) + "}"


METRICS = MetricRegistry()
_current: MetricRegistry = METRICS


def set_registry(registry: MetricRegistry) -> None:
    """Where MetricFamily objects created from now on keep their series (an instance process's
    forwarding registry); the server keeps METRICS."""
    global _current
    _current = registry


def current_registry() -> MetricRegistry:
    return _current
