"""OpenTelemetry tracing (`--trace-config mode=opentelemetry`) against a real server and a real OTLP/HTTP
receiver on loopback (the test's own, decoding what arrives with opentelemetry-proto): the spans
Triton names, nested as Triton nests them, with the resource attributes given by flag, continuing the
trace a client started with its W3C traceparent over HTTP (header) and gRPC (metadata)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from server.app import Server, ServerSettings
from server.tracing.flags import read_trace_flags
from tests.integration.conftest import REPO
from tests.integration.test_tracing import ENSEMBLE
from tests.waiting import wait_until

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


class Receiver:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                message = ExportTraceServiceRequest.FromString(body)
                with received.lock:
                    for resource_spans in message.resource_spans:
                        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                        for scope in resource_spans.scope_spans:
                            received.spans += [(resource, span) for span in scope.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of_trace(self, trace_id: str) -> list[tuple[dict[str, Any], Any]]:
        with self.lock:
            return [(r, s) for r, s in self.spans if s.trace_id.hex() == trace_id]


@pytest.fixture(scope="module")
def otel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    receiver = Receiver()
    repository = tmp_path_factory.mktemp("otel") / "models"
    repository.mkdir()
    (repository / "add_sub").symlink_to(REPO / "add_sub", target_is_directory=True)
    (repository / "ens" / "1").mkdir(parents=True)
    (repository / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    flags = read_trace_flags(
        [
            "mode=opentelemetry",
            # without a scheme, as Triton's docs and qa write it: http:// is assumed
            f"opentelemetry,url={receiver.url.removeprefix('http://')}",
            "opentelemetry,resource=service.name=tcli-test",
            "opentelemetry,resource=test.key=test.value",
            "opentelemetry,bsp_schedule_delay=50",
            "level=TIMESTAMPS",
            "rate=1",
        ]
    )
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, grpc_port=0, allow_metrics=False, trace=flags
    )
    server = Server(settings).start()
    try:
        yield server, receiver
    finally:
        server.stop()
        receiver.server.shutdown()
        receiver.server.server_close()  # the listening socket too, not only the serving loop


def _events(span: Any) -> list[str]:
    return [event.name for event in span.events]


def _check_nesting(spans: list[Any], model: str, root_events: list[str]) -> None:
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"InferRequest", model, "compute"}
    root, request, compute = by_name["InferRequest"], by_name[model], by_name["compute"]
    assert root.parent_span_id.hex() == CLIENT_SPAN  # the client's span is the root's parent
    assert request.parent_span_id == root.span_id
    assert compute.parent_span_id == request.span_id
    assert _events(root) == root_events
    assert _events(request) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert _events(compute) == ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
    attributes = {a.key: a.value for a in request.attributes}
    assert attributes["triton.model_name"].string_value == model
    assert attributes["triton.model_version"].int_value == 1


def test_http_request_continues_the_clients_trace(otel: tuple[Server, Receiver]) -> None:
    server, receiver = otel
    trace_id = CLIENT_TRACE
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    client.infer("add_sub", inputs, headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
    wait_until(lambda: len(receiver.of_trace(trace_id)) >= 3, "the request's three spans at the receiver")
    found = receiver.of_trace(trace_id)
    resource = found[0][0]
    assert resource["service.name"] == "tcli-test" and resource["test.key"] == "test.value"
    _check_nesting(
        [span for _, span in found],
        "add_sub",
        ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"],
    )


def test_grpc_request_continues_the_clients_trace(otel: tuple[Server, Receiver]) -> None:
    server, receiver = otel
    trace_id = "1bf7651916cd43dd8448eb211c80319d"
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    client.infer("add_sub", inputs, headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
    wait_until(lambda: len(receiver.of_trace(trace_id)) >= 3, "the request's three spans at the receiver")
    _check_nesting(
        [span for _, span in receiver.of_trace(trace_id)],
        "add_sub",
        [
            "GRPC_WAITREAD_START",
            "GRPC_WAITREAD_END",
            "INFER_RESPONSE_COMPLETE",
            "GRPC_SEND_START",
            "GRPC_SEND_END",
        ],
    )


def test_ensemble_steps_are_model_spans_under_the_ensembles(otel: tuple[Server, Receiver]) -> None:
    server, receiver = otel
    trace_id = "2cf7651916cd43dd8448eb211c80319e"
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inputs = [httpclient.InferInput("A", [4], "FP32"), httpclient.InferInput("B", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    client.infer("ens", inputs, headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
    # InferRequest, ens, and per step a model span and its compute span
    wait_until(lambda: len(receiver.of_trace(trace_id)) >= 6, "the ensemble's six spans at the receiver")
    spans = [span for _, span in receiver.of_trace(trace_id)]
    assert sorted(s.name for s in spans) == [
        "InferRequest",
        "add_sub",
        "add_sub",
        "compute",
        "compute",
        "ens",
    ]
    ens = next(s for s in spans if s.name == "ens")
    steps = [s for s in spans if s.name == "add_sub"]
    assert all(step.parent_span_id == ens.span_id for step in steps)
