"""The server's tracing: the setting in force for each model (its own, or the global one), which
requests get a trace, and where finished traces go.

Front ends ask `sample(model)` for each inference request, behind one check of `enabled`: with
tracing off everywhere (the default) that attribute is the whole cost. The settings API
(server/service.py) validates changes and hands the resulting values to `apply`, which replaces the
settings whose values changed, as Triton does."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from server.protocol.trace import Trace
from server.tracing.setting import SettingValues, TraceSetting
from server.tracing.trace_file import TraceFile

# the OpenTelemetry exporter (server/tracing/otel.py): export a finished trace, and shut down
Exporter = tuple[Callable[[Trace], None], Callable[[], None]]


class TraceManager:
    def __init__(self, global_values: dict[str, Any], exporter: Exporter | None = None) -> None:
        self._ids = itertools.count(1)
        self._files: dict[str, TraceFile] = {}
        self._lock = threading.Lock()
        self._exporter = exporter
        self.global_setting = self._make(SettingValues.of(global_values))
        self.model_settings: dict[str, TraceSetting] = {}
        self.enabled = self.global_setting.active

    def _make(self, values: SettingValues) -> TraceSetting:
        if values.mode == "opentelemetry" and self._exporter is not None:
            return TraceSetting(values, self._ids, None, self._exporter[0])
        file = None
        if values.file:
            file = self._files.get(values.file)
            if file is None:
                file = self._files[values.file] = TraceFile(values.file)
        return TraceSetting(values, self._ids, file)

    def sample(self, model: str, traceparent: str = "") -> Trace | None:
        """A trace for the next request to `model` when its setting samples it, else None.
        `traceparent`: the client's W3C trace context (OpenTelemetry mode continues it)."""
        setting = self.model_settings.get(model, self.global_setting)
        # OpenTelemetry: a request that carries its client's context is traced whatever the rate and
        # count say, as in Triton (rate=0 traces only those)
        propagated = bool(traceparent) and setting.propagates
        if not (propagated or setting.sample()):
            return None
        trace = Trace(setting, setting.next_id(), tensors_on=setting.tensors)
        if propagated:
            trace.context = traceparent  # parsed by the exporter, off the request's path
        return trace

    def count_left(self, model: str) -> int:
        """The traces the setting in force for `model` may still start (-1: no limit), which Triton
        answers as its trace_count."""
        return self.model_settings.get(model, self.global_setting).count_left

    def apply(self, global_values: dict[str, Any], model_values: dict[str, dict[str, Any]]) -> None:
        """The settings now in force: the global one and each model's that has its own."""
        with self._lock:
            retired = []
            values = SettingValues.of(global_values)
            if values != self.global_setting.values:
                retired.append(self.global_setting)
                self.global_setting = self._make(values)
            settings = {}
            for model, raw in model_values.items():
                values = SettingValues.of(raw)
                current = self.model_settings.get(model)
                if current is not None and current.values == values:
                    settings[model] = current
                else:
                    settings[model] = self._make(values)
                    if current is not None:
                        retired.append(current)
            retired += [s for m, s in self.model_settings.items() if m not in settings]
            self.model_settings = settings
            self.enabled = self.global_setting.active or any(s.active for s in settings.values())
        for setting in retired:
            setting.retire()

    def close(self) -> None:
        """The server stops: write every trace still held, close the files, flush the exporter."""
        self.enabled = False
        for setting in [self.global_setting, *self.model_settings.values()]:
            setting.retire()
        for file in self._files.values():
            file.close()
        if self._exporter is not None:
            self._exporter[1]()
