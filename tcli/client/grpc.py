"""gRPC client over grpcio and the service definitions shipped with tritonclient."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from server.protocol import bytes_codec, datatypes
from tcli.client.tls import ClientTls
from tcli.client.types import ClientError, InferInput, InferResult, RequestedOutput

MAX_MESSAGE_BYTES = 2**31 - 1  # real tensors exceed gRPC's 4 MB default


class GrpcClient:
    def __init__(self, url: str, timeout: float = 60.0, tls: ClientTls | None = None) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.url = url.split("://", 1)[-1]
        self.timeout = timeout
        self._pb = service_pb2
        self._grpc = grpc
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        credentials = None if tls is None else tls.grpc_credentials()
        if credentials is None:
            self._channel = grpc.insecure_channel(self.url, options=options)
        else:
            self._channel = grpc.secure_channel(self.url, credentials, options=options)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout)
        except self._grpc.RpcError as exc:
            code = exc.code()
            if code == self._grpc.StatusCode.UNAVAILABLE and "connect" in (exc.details() or "").lower():
                raise ClientError(
                    f"cannot reach {self.url}: {exc.details()} (is the server running? check -u, and "
                    "--ssl-grpc-use-ssl if it serves TLS)"
                ) from None
            raise ClientError(exc.details() or code.name, code.name) from None

    # health and metadata ---------------------------------------------------------------------------
    def is_live(self) -> bool:
        return bool(self._call("ServerLive", self._pb.ServerLiveRequest()).live)

    def is_ready(self) -> bool:
        return bool(self._call("ServerReady", self._pb.ServerReadyRequest()).ready)

    def server_metadata(self) -> dict[str, Any]:
        answer = self._call("ServerMetadata", self._pb.ServerMetadataRequest())
        return {"name": answer.name, "version": answer.version, "extensions": list(answer.extensions)}

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        answer = self._call("ModelMetadata", self._pb.ModelMetadataRequest(name=model, version=version))

        def tensors(items: Any) -> list[dict[str, Any]]:
            return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]

        return {
            "name": answer.name,
            "versions": list(answer.versions),
            "platform": answer.platform,
            "inputs": tensors(answer.inputs),
            "outputs": tensors(answer.outputs),
        }

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        from server.protocol.config_json import to_json_dict

        answer = self._call("ModelConfig", self._pb.ModelConfigRequest(name=model, version=version))
        return to_json_dict(answer.config)

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return bool(self._call("ModelReady", self._pb.ModelReadyRequest(name=model, version=version)).ready)

    # repository and statistics ---------------------------------------------------------------------
    def repository_index(self) -> list[dict[str, Any]]:
        answer = self._call("RepositoryIndex", self._pb.RepositoryIndexRequest())
        rows = []
        for model in answer.models:
            row = {"name": model.name}
            if model.version or model.state:
                row.update({"version": model.version, "state": model.state})
            if model.reason:
                row["reason"] = model.reason
            rows.append(row)
        return rows

    def load_model(self, model: str, config: str | None = None) -> None:
        request = self._pb.RepositoryModelLoadRequest(model_name=model)
        if config:
            request.parameters["config"].string_param = config
        self._call("RepositoryModelLoad", request)

    def unload_model(self, model: str, unload_dependents: bool = False) -> None:
        request = self._pb.RepositoryModelUnloadRequest(model_name=model)
        request.parameters["unload_dependents"].bool_param = unload_dependents
        self._call("RepositoryModelUnload", request)

    def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        from google.protobuf import json_format

        answer = self._call("ModelStatistics", self._pb.ModelStatisticsRequest(name=model, version=version))
        data = json_format.MessageToDict(
            answer, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        return _numbers(data)

    # inference -------------------------------------------------------------------------------------
    def infer(
        self,
        model: str,
        inputs: list[InferInput],
        outputs: list[RequestedOutput] | None = None,
        version: str = "",
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> InferResult:
        request = self._build_request(model, inputs, outputs, version, request_id, parameters)
        return _parse_response(self._call("ModelInfer", request))

    def stream_infer(
        self,
        model: str,
        requests: list[tuple[list[InferInput], list[RequestedOutput] | None, str]],
        version: str = "",
    ) -> Iterator[InferResult]:
        """Send (inputs, outputs, request_id) requests over one ModelStreamInfer stream; yields a result
        per response as it arrives (match them by id). A response carrying an error raises ClientError."""
        messages = [self._build_request(model, i, o, version, rid, None) for i, o, rid in requests]
        try:
            for answer in self._stub.ModelStreamInfer(iter(messages), timeout=self.timeout):
                if answer.error_message:
                    raise ClientError(answer.error_message)
                yield _parse_response(answer.infer_response)
        except self._grpc.RpcError as exc:
            raise ClientError(exc.details() or exc.code().name, exc.code().name) from None

    def _build_request(
        self,
        model: str,
        inputs: list[InferInput],
        outputs: list[RequestedOutput] | None,
        version: str,
        request_id: str,
        parameters: dict[str, Any] | None,
    ) -> Any:
        request = self._pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
        for key, value in (parameters or {}).items():
            _set_parameter(request.parameters[key], value)
        for tensor in inputs:
            # data travels in raw_input_contents, as tritonclient sends it
            request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
            raw = (
                bytes_codec.serialize(tensor.data)
                if tensor.datatype == "BYTES"
                else np.ascontiguousarray(tensor.data).tobytes()
            )
            request.raw_input_contents.append(raw)
        for output in outputs or []:
            requested = request.outputs.add(name=output.name)
            if output.class_count:
                requested.parameters["classification"].int64_param = output.class_count
        return request


def _parse_response(answer: Any) -> InferResult:
    result = InferResult(answer.model_name, answer.model_version, answer.id)
    for index, output in enumerate(answer.outputs):
        shape = list(output.shape)
        if index < len(answer.raw_output_contents):
            raw = answer.raw_output_contents[index]
            if output.datatype == "BYTES":
                array = bytes_codec.object_array(
                    bytes_codec.deserialize(raw, f"output '{output.name}'"), tuple(shape)
                )
            else:
                array = np.frombuffer(raw, dtype=datatypes.wire_to_numpy(output.datatype)).reshape(shape)
        else:
            array = np.array(list(output.contents.bytes_contents), dtype=object).reshape(shape)
        result.outputs[output.name] = array
        result.datatypes[output.name] = output.datatype
    return result


def _set_parameter(parameter: Any, value: Any) -> None:
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


def _numbers(value: Any) -> Any:
    """protobuf's JSON writes 64-bit integers as strings; statistics are numbers."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value
