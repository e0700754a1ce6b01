"""Custom metrics of the in-process API, as `tritonserver.MetricFamily` and `tritonserver.Metric`: a
family (a counter or a gauge, its name and description) and its labelled series, reported with the
server's own metrics (`server.metrics()`, the Metrics front end's /metrics).

They live in the registry python models' `pb_utils.MetricFamily` families live in, so a family of the
same name and kind is one family whichever side made it. A series keeps its family alive (as in
`tritonserver`); dropping both drops the series from the report. Errors carry the C API's texts.
"""

from __future__ import annotations

import enum

from server.backends.python.pb_utils.errors import TritonModelException
from server.backends.python.pb_utils.metric_registry import MetricKind as RegistryKind
from server.backends.python.pb_utils.metric_registry import check_operation
from server.backends.python.pb_utils.metrics import Metric as RegistryMetric
from server.backends.python.pb_utils.metrics import MetricFamily as RegistryFamily
from tcli.inprocess._errors import InternalError, InvalidArgumentError, UnsupportedError


class MetricKind(enum.IntEnum):
    """TRITONSERVER_MetricKind, as `tritonserver` exports it."""

    COUNTER = 0
    GAUGE = 1


class MetricFamily:
    """`MetricFamily(kind, name, description)`."""

    def __init__(self, kind: MetricKind, name: str, description: str) -> None:
        if not isinstance(kind, MetricKind):
            raise TypeError(f"MetricFamily(): kind must be a tritonserver.MetricKind, not {kind!r}")
        if not isinstance(name, str) or not isinstance(description, str):
            raise TypeError("MetricFamily(): name and description must be str")
        self.kind = kind
        try:
            self._family = RegistryFamily(name, description, RegistryKind(int(kind)))
        except TritonModelException as error:
            raise InvalidArgumentError(str(error)) from None


class Metric:
    """`Metric(family, labels=None)`: one series of `family`; `increment`, `set_value`, `value`."""

    def __init__(self, family: MetricFamily, labels: dict[str, str] | None = None) -> None:
        if not isinstance(family, MetricFamily):
            raise TypeError(
                f"Metric(): family must be a tritonserver.MetricFamily, not {type(family).__name__}"
            )
        self._kind = family.kind
        self._owner = family  # a series keeps its family alive, as tritonserver's does
        try:
            self._metric: RegistryMetric = family._family.Metric(labels=labels)
        except TritonModelException as error:
            raise InvalidArgumentError(str(error)) from None

    @property
    def kind(self) -> MetricKind:
        return self._kind

    @property
    def value(self) -> float:
        return self._apply("value", "get", 0.0)

    def increment(self, value: float) -> None:
        self._apply("increment", "increment", float(value))

    def set_value(self, value: float) -> None:
        self._apply("set", "set", float(value))

    def _apply(self, op: str, verb: str, value: float) -> float:
        try:
            check_operation(RegistryKind(int(self._kind)), op, value)
        except ValueError as error:
            kind = UnsupportedError if "does not support" in str(error) else InvalidArgumentError
            raise kind(str(error)) from None
        try:
            if op == "increment":
                self._metric.increment(value)
            elif op == "set":
                self._metric.set(value)
            return self._metric.value()
        except TritonModelException:  # its family was dropped from the registry
            raise InternalError(f"Could not {verb} metric value. Metric has been invalidated.") from None
