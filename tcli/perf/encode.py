"""Requests encoded once, before measuring: whole HTTP/1.1 messages with the binary tensor extension,
or serialized gRPC ModelInferRequest messages. The load generator only copies bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from urllib.parse import quote

from tcli.errors import CliError
from tcli.perf.data import Step, Stream, TensorData
from tcli.perf.load_spec import HttpRequestParts, LoadSpec
from tcli.perf.model import ModelInfo

DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


def split_url(url: str | None, protocol: str) -> tuple[str, int]:
    """-u as perf_analyzer takes it: host:port, optionally with http://, https:// (or grpc://)."""
    text = (url or f"localhost:{DEFAULT_PORTS[protocol]}").strip()
    if "://" in text:
        scheme, text = text.split("://", 1)
        if scheme == "https" and protocol != "http":
            raise CliError("-u: https:// is for -i http; gRPC over TLS is --ssl-grpc-use-ssl true")
    text = text.split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, DEFAULT_PORTS[protocol]
    host = host.strip("[]") or "localhost"
    try:
        return host, int(port)
    except ValueError:
        raise CliError(f"-u '{url}': the port must be a number (host:port)") from None


def batch_tensors(steps: Sequence[Step], info: ModelInfo) -> list[tuple[str, TensorData]]:
    """The inputs of one request made of len(steps) batch elements (one step each)."""
    tensors = []
    for spec in info.inputs:
        parts = [step[spec.name] for step in steps]
        shape = parts[0].shape
        if any(part.shape != shape for part in parts):
            raise CliError(
                f"input '{spec.name}': the data steps batched together have different shapes "
                f"({', '.join(str(list(p.shape)) for p in parts)}); use -b 1 or give steps of one shape"
            )
        full = (len(steps), *shape) if info.max_batch_size > 0 else shape
        tensors.append((spec.name, TensorData(spec.datatype, tuple(full), b"".join(p.raw for p in parts))))
    return tensors


def _http_header_open(tensors: list[tuple[str, TensorData]]) -> tuple[bytes, bytes]:
    inputs = [
        {
            "name": name,
            "shape": list(tensor.shape),
            "datatype": tensor.datatype,
            "parameters": {"binary_data_size": len(tensor.raw)},
        }
        for name, tensor in tensors
    ]
    header = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}, separators=(",", ":"))
    assert header.endswith("}}")
    return header[:-2].encode(), b"".join(tensor.raw for _, tensor in tensors)


def _grpc_message(info: ModelInfo, tensors: list[tuple[str, TensorData]]) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=info.name, model_version=info.version)
    for name, tensor in tensors:
        request.inputs.add(name=name, datatype=tensor.datatype, shape=list(tensor.shape))
        request.raw_input_contents.append(tensor.raw)
    return bytes(request.SerializeToString())


def build_load_spec(
    info: ModelInfo,
    streams: list[Stream],
    *,
    protocol: str,
    url: str | None,
    batch_size: int,
    headers: Sequence[tuple[str, str]] = (),
    streaming: bool = False,
    sequence_length: int = 20,
    sequence_length_variation: float = 20.0,
    sequence_length_given: bool = True,
    user_data: bool = False,
    sequence_id_start: int = 1,
    sequence_id_end: int = 0,
    num_of_sequences: int = 4,
) -> LoadSpec:
    host, port = split_url(url, protocol)
    spec = LoadSpec(
        protocol=protocol,
        host=host,
        port=port,
        streaming=streaming,
        sequence_length=sequence_length,
        sequence_length_variation=sequence_length_variation,
        sequence_length_from_data=user_data and not sequence_length_given,
        sequence_id_start=sequence_id_start,
        sequence_id_end=sequence_id_end,
        num_of_sequences=num_of_sequences,
    )
    if protocol == "http":
        path = f"/v2/models/{quote(info.name, safe='')}"
        if info.version:
            path += f"/versions/{quote(info.version, safe='')}"
        spec.http_path = path + "/infer"
        spec.http_headers = [
            ("Host", f"{host}:{port}"),
            ("Content-Type", "application/octet-stream"),
            *headers,
        ]
    else:
        spec.grpc_metadata = [(name.lower(), value) for name, value in headers]

    if info.sequence:
        # a sequence request is one batch element; its parameters are added per request
        for stream in streams:
            encoded: list[object] = []
            for step in stream:
                tensors = batch_tensors([step], info)
                if protocol == "http":
                    encoded.append(HttpRequestParts(*_http_header_open(tensors)))
                else:
                    encoded.append(_grpc_message(info, tensors))
            spec.sequence_streams.append(encoded)
        return spec

    steps = [step for stream in streams for step in stream]
    count = len(steps) // math.gcd(len(steps), batch_size)  # distinct requests before the data repeats
    for index in range(count):
        chosen = [steps[(index * batch_size + k) % len(steps)] for k in range(batch_size)]
        tensors = batch_tensors(chosen, info)
        if protocol == "http":
            header_open, blob = _http_header_open(tensors)
            header = header_open + b"}}"
            lines = [f"POST {spec.http_path} HTTP/1.1"]
            lines += [f"{name}: {value}" for name, value in spec.http_headers]
            lines.append(f"Inference-Header-Content-Length: {len(header)}")
            lines.append(f"Content-Length: {len(header) + len(blob)}")
            spec.requests.append(("\r\n".join(lines) + "\r\n\r\n").encode() + header + blob)
        else:
            spec.requests.append(_grpc_message(info, tensors))
    return spec
