"""Custom metrics as models create them: MetricFamily and its labelled Metric series, kept in the
registry the server exports (metric_registry.METRICS), or forwarded to it from an instance process.
"""

from __future__ import annotations

import contextlib
import weakref

import numpy as np

from server.backends.python.pb_utils.errors import TritonModelException
from server.backends.python.pb_utils.metric_registry import (
    MetricKind,
    _FamilyState,
    _MetricState,
    current_registry,
)


def _metric_value(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"metric value must be a number, got {type(value).__name__}")
    return float(value)


class Metric:
    """One labelled series of a MetricFamily (create it with `family.Metric(labels=..., buckets=...)`)."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str], bounds: tuple[float, ...] | None
    ) -> None:
        assert family._state is not None
        self._family_state: _FamilyState = family._state
        self._kind = family._kind
        self._registry = family._registry
        self._state: _MetricState | None = self._registry._acquire_metric(self._family_state, labels, bounds)

    def _apply(self, op: str, prefix: str, value: float = 0.0) -> float:
        state = self._state
        if state is None:
            raise TritonModelException(
                f"{prefix}: Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
                "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
                "been deleted."
            )
        try:
            return self._registry._update(state, self._kind, op, value)
        except ValueError as e:
            raise TritonModelException(f"{prefix}: {e}") from None

    def increment(self, value: float) -> None:
        self._apply("increment", "Failed to increment metric value", _metric_value(value))

    def set(self, value: float) -> None:
        self._apply("set", "Failed to set metric value", _metric_value(value))

    def observe(self, value: float) -> None:
        self._apply("observe", "Failed to observe metric value", _metric_value(value))

    def value(self) -> float:
        return self._apply("value", "Failed to get metric value")

    def _clear(self) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._registry._release_metric(self._family_state, state)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown there is nothing left to update
            self._clear()


class MetricFamily:
    """`MetricFamily(name, description, kind)` with kind MetricFamily.COUNTER, GAUGE or HISTOGRAM.

    Families live as long as the Python object (as in Triton): drop it and its series disappear."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str) or not isinstance(kind, MetricKind):
            raise TypeError(
                "MetricFamily(): expected (name: str, description: str, kind: MetricFamily.COUNTER|GAUGE|HISTOGRAM)"
            )
        self._registry = current_registry()  # the server's, or an instance process's forwarder
        self._kind = kind
        self._state: _FamilyState | None = None
        self._state = self._registry._acquire_family(name, description, kind)
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        bounds: tuple[float, ...] | None = None
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bounds = tuple(_metric_value(b) for b in buckets)
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        metric = Metric(self, labels or {}, bounds)
        self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        try:
            for metric in list(self._metrics):
                metric._clear()  # later operations on them fail, as Triton's do
            if self._state is not None:
                self._registry._release_family(self._state)
                self._state = None
        except Exception:  # interpreter shutdown
            pass
