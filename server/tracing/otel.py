"""OpenTelemetry mode (`--trace-config mode=opentelemetry`): each finished trace becomes spans exported
over OTLP/HTTP by the OpenTelemetry SDK's batch span processor, as Triton's OpenTelemetry mode does
(docs/user_guide/trace.md, "OpenTelemetry trace support").

Spans, as Triton names them: `InferRequest`, the request as the front end saw it (its receive, send
and INFER_RESPONSE_COMPLETE events), continuing the client's W3C `traceparent` when it sent one; under
it a span named after the model (REQUEST_START, QUEUE_START, REQUEST_END; attributes
triton.model_name, triton.model_version, triton.trace_id, triton.trace_parent_id, triton.request_id);
under that a `compute` span (the COMPUTE_* events), and for an ensemble its steps' model spans.
Timestamps were taken on the steady clock; spans carry them on the wall clock, shifted by one offset
taken at start, as Triton does.

The spans are built on a thread of their own and exported by the batch processor's thread: a traced
request's part ends when its finished trace is queued."""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from server.protocol import trace as names
from server.protocol.trace import Trace

if TYPE_CHECKING:
    from server.tracing.flags import OtelOptions
    from server.tracing.manager import Exporter

log = logging.getLogger("tcli.server.trace")

SERVICE_NAME = "triton-inference-server"  # Triton's default service.name
ROOT_SPAN = "InferRequest"
COMPUTE_SPAN = "compute"
_ROOT_EVENTS = {
    names.HTTP_RECV_START,
    names.HTTP_RECV_END,
    names.GRPC_WAITREAD_START,
    names.GRPC_WAITREAD_END,
    names.INFER_RESPONSE_COMPLETE,
    names.HTTP_SEND_START,
    names.HTTP_SEND_END,
    names.GRPC_SEND_START,
    names.GRPC_SEND_END,
}
_COMPUTE_EVENTS = {
    names.COMPUTE_START,
    names.COMPUTE_INPUT_END,
    names.COMPUTE_OUTPUT_START,
    names.COMPUTE_END,
}


class OtelExporter:
    def __init__(self, options: OtelOptions) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": SERVICE_NAME, **options.resource})
        self._provider = TracerProvider(resource=resource)
        bsp = options.bsp
        self._provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=options.url),
                max_queue_size=bsp.get("bsp_max_queue_size"),
                schedule_delay_millis=bsp.get("bsp_schedule_delay"),
                max_export_batch_size=bsp.get("bsp_max_export_batch_size"),
            )
        )
        self._tracer = self._provider.get_tracer("triton-server")
        self._offset = time.time_ns() - time.monotonic_ns()  # steady clock to wall clock
        self._queue: queue.SimpleQueue[Trace | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._build_forever, name="tcli-trace-otel", daemon=True)
        self._thread.start()

    def export(self, trace: Trace) -> None:
        self._queue.put(trace)

    def shutdown(self) -> None:
        """Build what is queued, then export every span still held and stop."""
        self._queue.put(None)
        self._thread.join(30)
        self._provider.shutdown()

    def _build_forever(self) -> None:
        while True:
            trace = self._queue.get()
            if trace is None:
                return
            try:
                self._spans(trace)
            except Exception:  # a trace that cannot be exported must not stop the next ones
                log.exception("exporting trace %d failed", trace.id)

    def _spans(self, trace: Trace) -> None:
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, set_span_in_context

        parent = None  # no client context: the trace starts here
        if isinstance(trace.context, str) and trace.context:
            parent = extract({"traceparent": trace.context})  # W3C trace context
        stamps = [(name, self._offset + ns) for name, ns in trace.stamps]
        times = [ns for _, ns in stamps] or [time.time_ns()]
        root = self._tracer.start_span(ROOT_SPAN, context=parent, kind=SpanKind.SERVER, start_time=min(times))
        for name, ns in stamps:
            if name in _ROOT_EVENTS:
                root.add_event(name, timestamp=ns)
        self._model_span(trace, set_span_in_context(root), SpanKind.SERVER)
        root.end(end_time=max(times))

    def _model_span(self, trace: Trace, parent: Any, kind: Any) -> None:
        from opentelemetry.trace import set_span_in_context

        stamps = [(name, self._offset + ns) for name, ns in list(trace.stamps)]
        request = [(n, ns) for n, ns in stamps if n not in _ROOT_EVENTS and n not in _COMPUTE_EVENTS]
        compute = [(n, ns) for n, ns in stamps if n in _COMPUTE_EVENTS]
        times = [ns for _, ns in request] or [ns for _, ns in stamps] or [time.time_ns()]
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model_name,
            "triton.model_version": trace.model_version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        span = self._tracer.start_span(
            trace.model_name, context=parent, kind=kind, start_time=min(times), attributes=attributes
        )
        for name, ns in request:
            span.add_event(name, timestamp=ns)
        inside = set_span_in_context(span)
        if compute:
            compute_times = [ns for _, ns in compute]
            child = self._tracer.start_span(
                COMPUTE_SPAN, context=inside, kind=kind, start_time=min(compute_times)
            )
            for name, ns in compute:
                child.add_event(name, timestamp=ns)
            child.end(end_time=max(compute_times))
        for step in list(trace.children):
            self._model_span(step, inside, kind)
        span.end(end_time=max(times))


def otel_exporter(options: OtelOptions) -> Exporter:
    """The exporter's two calls for the TraceManager: export a finished trace, shut down."""
    exporter = OtelExporter(options)
    return exporter.export, exporter.shutdown
