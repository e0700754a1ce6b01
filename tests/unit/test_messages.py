"""The service's typed answers as each front end encodes them (REST JSON, gRPC protobuf), and the one
tensor module where the two front ends word a failure differently, as Triton's do."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from server.protocol import grpc_messages, json_messages
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.messages import (
    LogSettingsResponse,
    ModelIndex,
    ModelMetadataResponse,
    RepositoryIndexResponse,
    TensorMetadata,
    TraceSettingResponse,
)
from server.protocol.tensors import GRPC, HTTP, from_buffer, write_shm
from server.protocol.types import Tensor

INDEX = RepositoryIndexResponse(
    [ModelIndex("idle"), ModelIndex("m", "1", "READY"), ModelIndex("m", "2", "UNAVAILABLE", "unloaded")]
)


def test_repository_index_rows_leave_out_what_they_do_not_have_in_json() -> None:
    assert orjson.loads(json_messages.encode(INDEX)) == [
        {"name": "idle"},
        {"name": "m", "version": "1", "state": "READY"},
        {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
    ]
    rows = grpc_messages.repository_index_response(INDEX).models
    assert [(r.name, r.version, r.state, r.reason) for r in rows] == [
        ("idle", "", "", ""),
        ("m", "1", "READY", ""),
        ("m", "2", "UNAVAILABLE", "unloaded"),
    ]


def test_metadata_is_written_in_tritons_key_order() -> None:
    metadata = ModelMetadataResponse("m", ["1"], "python", [TensorMetadata("IN", "FP32", [-1, 4])], [])
    assert json_messages.encode(metadata) == (
        b'{"name":"m","versions":["1"],"platform":"python",'
        b'"inputs":[{"name":"IN","datatype":"FP32","shape":[-1,4]}],"outputs":[]}'
    )
    message = grpc_messages.model_metadata_response(metadata)
    assert (message.inputs[0].name, list(message.inputs[0].shape)) == ("IN", [-1, 4])


def test_settings_are_the_same_on_both_front_ends() -> None:
    trace = TraceSettingResponse(["TIMESTAMPS"], "1000", "-1", "0", "trace.json", "triton")
    assert list(orjson.loads(json_messages.encode(trace))) == [
        "trace_level",
        "trace_rate",
        "trace_count",
        "log_frequency",
        "trace_file",
        "trace_mode",
    ]
    settings = grpc_messages.trace_settings_response(trace).settings
    assert {key: list(value.value) for key, value in settings.items()} == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": ["1000"],
        "trace_count": ["-1"],
        "log_frequency": ["0"],
        "trace_file": ["trace.json"],
        "trace_mode": ["triton"],
    }
    log = LogSettingsResponse("", True, False, True, 3, "ISO8601")
    assert orjson.loads(json_messages.encode(log))["log_verbose_level"] == 3
    answer = grpc_messages.log_settings_response(log).settings
    assert (answer["log_verbose_level"].uint32_param, answer["log_warning"].bool_param) == (3, False)


def failure(call: object, *args: object) -> tuple[ErrorCode, str]:
    with pytest.raises(TritonError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.code, caught.value.message


def test_a_cut_short_bytes_length_is_worded_per_front_end() -> None:
    data = b"\x01\x00\x00\x00a\x02\x00"
    args = (data, 0, len(data), "S", "BYTES", (2,), "r", "m")
    assert failure(from_buffer, *args, HTTP) == (
        ErrorCode.INVALID_ARG,
        "incomplete string length for inference input 'S', expecting 4 bytes but only 2 bytes available",
    )
    assert failure(from_buffer, *args, GRPC) == (
        ErrorCode.INVALID_ARG,
        "[request id: r] incomplete string length indicator for inference input 'S' for model 'm', "
        "expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is "
        "in one buffer.",
    )


def test_an_output_too_large_for_its_region_is_coded_per_front_end() -> None:
    region = bytearray(8)
    tensor = Tensor("OUT", "FP32", (4,), np.arange(4, dtype=np.float32))

    def view(name: str, offset: int, size: int) -> memoryview:
        return memoryview(region)[offset : offset + size]

    message = (
        "shared memory size specified with the request for output 'OUT' (8 bytes) should be at least 16 "
        "bytes to hold the results"
    )
    assert failure(write_shm, tensor, view, "r", 0, 8, HTTP) == (ErrorCode.INVALID_ARG, message)
    assert failure(write_shm, tensor, view, "r", 0, 8, GRPC) == (ErrorCode.INTERNAL, message)
    region.extend(bytes(8))
    write_shm(tensor, view, "r", 0, 16, GRPC)
    assert np.frombuffer(bytes(region), np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]
