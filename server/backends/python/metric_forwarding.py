"""Custom metrics of python models whose instances run in processes of their own: the families and
series live in the server's registry (`pb_utils.metric_registry.METRICS`, exported on /metrics), and
the instance process forwards to it, as Triton's stubs forward to the core.

Both ends are here. In the instance process, `ForwardingRegistry` replaces the registry pb_utils
creates families in: creating a family or a series, and `Metric.value()`, are calls that wait for the
server's answer (its checks decide, and a series shared by several instances has its value there);
increments, sets and observations are checked at once but only batched, and the batch rides the pipe
ahead of the next message the process sends (a response among them: a client that got its answer
scrapes the increments made for it), or after `FLUSH_SECONDS` when nothing else is sent. In the
server, `ForwardedMetrics` holds what one process acquired, by handle, and releases it all when the
process ends, so the families of an unloaded model go with it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from server.backends.python.pb_utils.errors import TritonModelException
from server.backends.python.pb_utils.metric_registry import (
    METRICS,
    MetricKind,
    MetricRegistry,
    PendingUpdate,
    _FamilyState,
    _MetricState,
    check_metric,
    check_operation,
)

FLUSH_SECONDS = 1.0  # the longest a batched update waits when the process sends nothing else
# (handles released metrics, handles released families, updates by metric handle)
Batch = tuple[list[int], list[int], list[tuple[int, PendingUpdate]]]


class ForwardingRegistry(MetricRegistry):
    """The instance process's registry: `call(payload)` asks the server and returns its answer (its
    error raised as TritonModelException); `take()` hands the batch over to whoever sends next."""

    def __init__(self, call: Callable[[Any], Any], flush: Callable[[], None], instance: str = "") -> None:
        super().__init__()
        self._call = call
        # what Triton's stub puts in the middle of the core's refusals
        self._where = f"Failed to process the request for model '{instance}', message: "
        self._pending: dict[int, PendingUpdate] = {}
        self._released_metrics: list[int] = []
        self._released_families: list[int] = []
        self._dirty = threading.Event()
        self._flush = flush
        self._flusher: threading.Thread | None = None

    def _acquire_family(self, name: str, description: str, kind: MetricKind) -> _FamilyState:
        family = _FamilyState(name, description, kind)
        family.id = int(self._server(("family", name, description, int(kind))))
        return family

    def _release_family(self, family: _FamilyState) -> None:
        with self._lock:
            self._released_families.append(family.id)
        self._mark_dirty()

    def _acquire_metric(
        self, family: _FamilyState, labels: dict[str, str], bounds: tuple[float, ...] | None
    ) -> _MetricState:
        try:
            check_metric(labels, bounds)
        except TritonModelException as error:
            raise self._refused(error) from None
        metric = _MetricState(tuple(sorted(labels.items())), bounds)
        metric.id = int(self._server(("metric", family.id, dict(labels), bounds)))
        return metric

    def _release_metric(self, family: _FamilyState, metric: _MetricState) -> None:
        with self._lock:
            self._released_metrics.append(metric.id)
        self._mark_dirty()

    def _update(self, metric: _MetricState, kind: MetricKind, op: str, value: float) -> float:
        try:
            check_operation(kind, op, value)
        except ValueError as error:
            raise ValueError(f"{self._where}{error}") from None
        if op == "value":  # the series may be shared: its value is the server's (after our batch)
            return float(self._call(("value", metric.id)))
        with self._lock:
            update = self._pending.get(metric.id)
            if update is None:
                update = self._pending[metric.id] = PendingUpdate()
            if op == "increment":
                update.delta += value
            elif op == "set":
                update.set_value, update.delta = value, 0.0
            else:  # observe
                bounds = metric.bounds or ()
                if update.bucket_counts is None:
                    update.bucket_counts = [0] * len(bounds)
                for i, bound in enumerate(bounds):
                    if value <= bound:
                        update.bucket_counts[i] += 1
                update.sum += value
                update.count += 1
        self._mark_dirty()
        return 0.0

    def _server(self, payload: tuple[Any, ...]) -> Any:
        try:
            return self._call(payload)
        except TritonModelException as error:
            raise self._refused(error) from None

    def _refused(self, error: TritonModelException) -> TritonModelException:
        """ "Error when creating X: <why>" as Triton's stub words it: the model's instance in between."""
        head, _, why = str(error).partition(": ")
        return TritonModelException(f"{head}: {self._where}{why}")

    def take(self) -> Batch | None:
        """The batched updates and releases, emptied; None when there are none."""
        if not self._dirty.is_set():
            return None
        with self._lock:
            self._dirty.clear()
            batch = (self._released_metrics, self._released_families, list(self._pending.items()))
            self._released_metrics, self._released_families, self._pending = [], [], {}
        return batch if any(batch) else None

    def _mark_dirty(self) -> None:
        self._dirty.set()
        if self._flusher is None:
            with self._lock:
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._flush_loop, name="metrics", daemon=True)
                    self._flusher.start()

    def _flush_loop(self) -> None:
        """Sends a batch nothing else carried within FLUSH_SECONDS (a model thread counting between
        requests); lives as long as the process."""
        while self._dirty.wait():
            threading.Event().wait(FLUSH_SECONDS)  # let the batch grow and ride a message if one goes
            if self._dirty.is_set():
                self._flush()


class ForwardedMetrics:
    """The server's end for one instance process: the families and series it holds, by handle."""

    def __init__(self, registry: MetricRegistry = METRICS) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._families: dict[int, _FamilyState] = {}
        self._metrics: dict[int, tuple[_FamilyState, _MetricState]] = {}
        self._closed = False

    def call(self, payload: tuple[Any, ...]) -> Any:
        """A call of the process: ("family", name, description, kind) or ("metric", family, labels,
        bounds) answer a handle, ("value", metric) the series' value. Triton's refusals raise
        TritonModelException with Triton's words."""
        if payload[0] == "value":
            _, metric = self._metrics[payload[1]]
            return self._registry._value(metric)
        with self._lock:
            if self._closed:
                raise TritonModelException("the model is being unloaded")
            handle = next(self._ids)
        if payload[0] == "family":
            _, name, description, kind = payload
            family_state = self._registry._acquire_family(name, description, MetricKind(kind))
            with self._lock:
                self._families[handle] = family_state
            return handle
        _, family_id, labels, bounds = payload
        family = self._families[family_id]
        metric = self._registry._acquire_metric(family, labels, bounds)
        with self._lock:
            self._metrics[handle] = (family, metric)
        return handle

    def apply(self, batch: Batch) -> None:
        """A batch the process sent: its updates, then what it released."""
        released_metrics, released_families, updates = batch
        for handle, update in updates:
            entry = self._metrics.get(handle)
            if entry is not None:
                self._registry._merge(entry[1], update)
        for handle in released_metrics:
            with self._lock:
                entry = self._metrics.pop(handle, None)
            if entry is not None:
                self._registry._release_metric(*entry)
        for handle in released_families:
            with self._lock:
                family = self._families.pop(handle, None)
            if family is not None:
                self._registry._release_family(family)

    def close(self) -> None:
        """The process ended: release everything it still held."""
        with self._lock:
            self._closed = True
            metrics, self._metrics = list(self._metrics.values()), {}
            families, self._families = list(self._families.values()), {}
        for family, metric in metrics:
            self._registry._release_metric(family, metric)
        for family in families:
            self._registry._release_family(family)
