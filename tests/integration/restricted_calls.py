"""Every endpoint and RPC of Triton's restricted-API groups (tritonserver --http-restricted-api and
--grpc-restricted-protocol), as raw calls whose status and message a test compares: HTTP through
http.client (status, content type, body), gRPC through grpcio's channel with tritonclient's stubs
(status code name, details). The same calls run against tcli and against real Triton.

The model is add_sub (python backend, both servers load it); requests that would change the server
(load, unload, shared-memory registration, log and trace settings) are sent with arguments that fail
or change nothing, so that only the restriction tells two answers apart.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

MODEL = "add_sub"
_INFER_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
        ]
    }
).encode()


@dataclass(frozen=True)
class HttpCall:
    group: str
    method: str
    path: str
    body: bytes = b""


HTTP_CALLS = (
    HttpCall("health", "GET", "/v2/health/live"),
    HttpCall("health", "GET", "/v2/health/ready"),
    HttpCall("health", "GET", f"/v2/models/{MODEL}/ready"),
    HttpCall("health", "GET", f"/v2/models/{MODEL}/versions/1/ready"),
    HttpCall("metadata", "GET", "/v2"),
    HttpCall("metadata", "GET", f"/v2/models/{MODEL}"),
    HttpCall("metadata", "GET", f"/v2/models/{MODEL}/versions/1"),
    HttpCall("inference", "POST", f"/v2/models/{MODEL}/infer", _INFER_BODY),
    HttpCall("inference", "POST", f"/v2/models/{MODEL}/versions/1/infer", _INFER_BODY),
    HttpCall("inference", "POST", "/v2/models/no_such_model/infer", _INFER_BODY),
    HttpCall("inference", "POST", f"/v2/models/{MODEL}/generate", b'{"INPUT0": [1, 2, 3, 4]}'),
    HttpCall("inference", "POST", f"/v2/models/{MODEL}/generate_stream", b'{"INPUT0": [1, 2, 3, 4]}'),
    HttpCall("shared-memory", "GET", "/v2/systemsharedmemory/status"),
    HttpCall("shared-memory", "GET", "/v2/systemsharedmemory/region/nothing/status"),
    HttpCall("shared-memory", "POST", "/v2/systemsharedmemory/unregister"),
    HttpCall("shared-memory", "POST", "/v2/systemsharedmemory/region/r/register", b"{}"),
    HttpCall("shared-memory", "GET", "/v2/cudasharedmemory/status"),
    HttpCall("shared-memory", "POST", "/v2/cudasharedmemory/unregister"),
    HttpCall("model-config", "GET", f"/v2/models/{MODEL}/config"),
    HttpCall("model-repository", "POST", "/v2/repository/index"),
    HttpCall("model-repository", "POST", "/v2/repository/models/no_such_model/load"),
    HttpCall("model-repository", "POST", "/v2/repository/models/no_such_model/unload"),
    HttpCall("statistics", "GET", "/v2/models/stats"),
    HttpCall("statistics", "GET", f"/v2/models/{MODEL}/stats"),
    HttpCall("trace", "GET", "/v2/trace/setting"),
    HttpCall("trace", "GET", f"/v2/models/{MODEL}/trace/setting"),
    HttpCall("logging", "GET", "/v2/logging"),
)

# a known route with the wrong method: the restriction is checked first, as in Triton
HTTP_WRONG_METHOD = (
    HttpCall("health", "POST", "/v2/health/live"),
    HttpCall("inference", "GET", f"/v2/models/{MODEL}/infer"),
    HttpCall("logging", "DELETE", "/v2/logging"),
)


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    content_type: str | None
    body: bytes


def http_call(address: str, call: HttpCall, headers: Mapping[str, str] | None = None) -> HttpAnswer:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        connection.request(call.method, call.path, body=call.body or None, headers=all_headers)
        response = connection.getresponse()
        return HttpAnswer(response.status, response.getheader("content-type"), response.read())
    finally:
        connection.close()


@dataclass(frozen=True)
class GrpcCall:
    group: str
    rpc: str
    request: Callable[[], Any]


def _infer_request() -> Any:
    request = pb.ModelInferRequest(model_name=MODEL)
    for name, values in (("INPUT0", [1.0, 2.0, 3.0, 4.0]), ("INPUT1", [1.0, 1.0, 1.0, 1.0])):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[4])
        tensor.contents.fp32_contents.extend(values)
    return request


GRPC_CALLS = (
    GrpcCall("health", "ServerLive", pb.ServerLiveRequest),
    GrpcCall("health", "ServerReady", pb.ServerReadyRequest),
    GrpcCall("health", "ModelReady", lambda: pb.ModelReadyRequest(name=MODEL)),
    GrpcCall("health", "grpc.health.v1.Health/Check", lambda: b""),
    GrpcCall("metadata", "ServerMetadata", pb.ServerMetadataRequest),
    GrpcCall("metadata", "ModelMetadata", lambda: pb.ModelMetadataRequest(name=MODEL)),
    GrpcCall("inference", "ModelInfer", _infer_request),
    GrpcCall("inference", "ModelStreamInfer", _infer_request),
    GrpcCall("shared-memory", "SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest),
    GrpcCall("shared-memory", "SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest),
    GrpcCall("shared-memory", "CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest),
    GrpcCall("shared-memory", "CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest),
    GrpcCall("model-config", "ModelConfig", lambda: pb.ModelConfigRequest(name=MODEL)),
    GrpcCall("model-repository", "RepositoryIndex", pb.RepositoryIndexRequest),
    GrpcCall(
        "model-repository",
        "RepositoryModelUnload",
        lambda: pb.RepositoryModelUnloadRequest(model_name="none"),
    ),
    GrpcCall("statistics", "ModelStatistics", lambda: pb.ModelStatisticsRequest(name=MODEL)),
    GrpcCall("trace", "TraceSetting", pb.TraceSettingRequest),
    GrpcCall("logging", "LogSettings", pb.LogSettingsRequest),
)


@dataclass(frozen=True)
class GrpcAnswer:
    code: str  # grpc.StatusCode name: "OK", "UNAVAILABLE", ...
    details: str


def grpc_call(address: str, call: GrpcCall, metadata: Mapping[str, str] | None = None) -> GrpcAnswer:
    pairs = tuple((metadata or {}).items())
    with grpc.insecure_channel(address) as channel:
        try:
            if call.rpc == "grpc.health.v1.Health/Check":
                check = channel.unary_unary("/grpc.health.v1.Health/Check")
                check(b"", metadata=pairs, timeout=30)
            elif call.rpc == "ModelStreamInfer":
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                for _ in stub.ModelStreamInfer(iter([call.request()]), metadata=pairs, timeout=30):
                    break  # one answer is enough: the stream was let through
            else:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                getattr(stub, call.rpc)(call.request(), metadata=pairs, timeout=30)
        except grpc.RpcError as error:
            return GrpcAnswer(error.code().name, error.details() or "")
    return GrpcAnswer("OK", "")
