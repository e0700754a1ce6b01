"""The server's TraceManager from its tracing flags: Triton's file, or (mode=opentelemetry) spans
exported over OTLP/HTTP, whose SDK is imported only then."""

from __future__ import annotations

from server.tracing.changes import TRACE_DEFAULTS
from server.tracing.flags import TraceFlags
from server.tracing.manager import TraceManager


def make_tracer(flags: TraceFlags | None) -> TraceManager:
    if flags is None:
        return TraceManager(dict(TRACE_DEFAULTS))
    exporter = None
    if flags.values["trace_mode"] == "opentelemetry":
        from server.tracing.otel import otel_exporter

        exporter = otel_exporter(flags.otel)
    return TraceManager(flags.values, exporter)
