"""The KServe v2 JSON / binary tensor codec: what the real tritonclient encodes decodes to the same tensors,
what the codec encodes tritonclient reads back, and malformed bodies fail with Triton's messages as
INVALID_ARG (never an INTERNAL error, never an exception of another type)."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from server.protocol.config_json import from_json_dict
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.json_binary import decode_raw_request
from server.protocol.json_codec import decode_request, parse_header_length
from server.protocol.json_response import encode_response
from server.protocol.tensors import SHM_DISABLED
from server.protocol.types import InferenceResponse, RequestedOutput, Tensor

NUMERIC = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "FP64": np.float64,
}


def client_body(
    arrays: dict[str, np.ndarray],
    *,
    binary: bool = True,
    datatypes: dict[str, str] | None = None,
    outputs: list[httpclient.InferRequestedOutput] | None = None,
    **kwargs: Any,
) -> tuple[bytes, int | None]:
    """The body and Inference-Header-Content-Length tritonclient.http would send."""
    inputs = []
    for name, array in arrays.items():
        datatype = (datatypes or {}).get(name) or _wire(array)
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs, **kwargs)
    return body, json_size


def _wire(array: np.ndarray) -> str:
    if array.dtype == np.object_:
        return "BYTES"
    return {np.dtype(v): k for k, v in NUMERIC.items()}[array.dtype] if array.dtype != np.float16 else "FP16"


def decode(body: bytes | bytearray, header_length: int | None = None, **kwargs: Any) -> Any:
    return decode_request(body, "m", "", header_length=header_length, **kwargs)


def client_result(response: InferenceResponse, requested: list[RequestedOutput], binary: bool = False) -> Any:
    body, header_length = encode_response(response, requested, binary)
    return httpclient.InferenceServerClient.parse_response_body(body, header_length=header_length)


def error_of(call: Any, *args: Any, **kwargs: Any) -> TritonError:
    with pytest.raises(TritonError) as caught:
        call(*args, **kwargs)
    return caught.value


# ------------------------------------------------------------------------------------ round trips
@settings(max_examples=60, deadline=None)
@given(
    datatype=st.sampled_from(sorted(NUMERIC)),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    binary=st.booleans(),
    data=st.data(),
)
def test_numeric_tensors_from_tritonclient_decode_to_the_same_array(
    datatype: str, shape: tuple[int, ...], binary: bool, data: st.DataObject
) -> None:
    dtype = np.dtype(NUMERIC[datatype])
    elements = hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False)
    array = data.draw(hnp.arrays(dtype, shape, elements=elements))
    body, json_size = client_body({"X": array}, binary=binary)
    request, binary_default = decode(body, json_size)
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("X", datatype, shape)
    assert tensor.data.dtype == dtype
    np.testing.assert_array_equal(tensor.data, array)
    assert binary_default is True  # tritonclient asks for binary outputs when it names none


@settings(max_examples=40, deadline=None)
@given(
    datatype=st.sampled_from(sorted(NUMERIC)),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
    binary=st.booleans(),
    data=st.data(),
)
def test_numeric_outputs_encode_to_what_tritonclient_reads(
    datatype: str, shape: tuple[int, ...], binary: bool, data: st.DataObject
) -> None:
    dtype = np.dtype(NUMERIC[datatype])
    elements = hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False)
    array = data.draw(hnp.arrays(dtype, shape, elements=elements))
    response = InferenceResponse("m", "1", "", [Tensor("Y", datatype, shape, array)])
    result = client_result(response, [RequestedOutput("Y", parameters={"binary_data": binary})])
    np.testing.assert_array_equal(result.as_numpy("Y"), array)
    assert result.get_output("Y")["shape"] == list(shape)


@settings(max_examples=40, deadline=None)
@given(
    strings=st.lists(st.binary(max_size=20), min_size=0, max_size=6),
    binary=st.booleans(),
)
def test_bytes_tensors_round_trip(strings: list[bytes], binary: bool) -> None:
    if not binary:  # JSON carries text
        strings = [s.decode("latin-1").encode() for s in strings]
    array = np.array(strings, dtype=object).reshape(1, len(strings))
    body, json_size = client_body({"S": array}, binary=binary)
    request, _ = decode(body, json_size)
    (tensor,) = request.inputs
    assert tensor.datatype == "BYTES" and tensor.shape == (1, len(strings))
    assert list(tensor.data.reshape(-1)) == strings
    response = InferenceResponse("m", "1", "", [tensor])
    result = client_result(response, [RequestedOutput("S", parameters={"binary_data": True})])
    assert list(result.as_numpy("S").reshape(-1)) == strings


def test_binary_inputs_are_views_on_the_body_not_copies() -> None:
    body, json_size = client_body({"A": np.arange(6, dtype=np.float32).reshape(2, 3)})
    request, _ = decode(body, json_size)
    tensor = request.inputs[0].data
    assert not tensor.flags.owndata
    assert np.shares_memory(tensor, np.frombuffer(body, np.uint8))


def test_fp16_and_bf16_travel_binary_only() -> None:
    half = np.array([1.5, -2.0], dtype=np.float16)
    body, json_size = client_body({"H": half})
    request, _ = decode(body, json_size)
    np.testing.assert_array_equal(request.inputs[0].data, half)

    bits = np.array([0x3FC0, 0xC000], dtype=np.uint16)  # bfloat16 1.5 and -2.0
    header = {
        "inputs": [{"name": "B", "shape": [2], "datatype": "BF16", "parameters": {"binary_data_size": 4}}]
    }
    head = json.dumps(header).encode()
    request, _ = decode(head + bits.tobytes(), len(head))
    assert request.inputs[0].datatype == "BF16"
    np.testing.assert_array_equal(request.inputs[0].data, bits)

    json_half = {"inputs": [{"name": "H", "shape": [1], "datatype": "FP16", "data": [1.0]}]}
    error = error_of(decode, json.dumps(json_half).encode())
    assert error.message == (
        "receiving FP16 data via JSON is not supported. Please use the binary data format for input H"
    )
    response = InferenceResponse("m", "1", "", [Tensor("H", "FP16", (2,), half)])
    error = error_of(encode_response, response, [RequestedOutput("H")])
    assert error.message == (
        "sending FP16 data via JSON is not supported. Please use the binary data format for output"
    )
    result = client_result(response, [RequestedOutput("H", parameters={"binary_data": True})])
    np.testing.assert_array_equal(result.as_numpy("H"), half)


def test_nested_json_data_is_read_row_major() -> None:
    body = {"inputs": [{"name": "X", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]}]}
    request, _ = decode(json.dumps(body).encode())
    np.testing.assert_array_equal(request.inputs[0].data, [[1, 2], [3, 4]])
    ragged = {"inputs": [{"name": "X", "shape": [3], "datatype": "FP32", "data": [[1], [2, 3]]}]}
    request, _ = decode(json.dumps(ragged).encode())
    np.testing.assert_array_equal(request.inputs[0].data, [1.0, 2.0, 3.0])


def test_request_fields_and_parameters() -> None:
    outputs = [
        httpclient.InferRequestedOutput("OUT", binary_data=True, class_count=3),
        httpclient.InferRequestedOutput("OTHER", binary_data=False),
    ]
    body, json_size = client_body(
        {"X": np.zeros(2, np.float32)},
        outputs=outputs,
        request_id="req-7",
        sequence_id="corr",
        sequence_start=True,
        priority=2,
        timeout=1000,
        parameters={"custom": "v", "n": 3, "flag": True},
    )
    request, binary_default = decode(body, json_size)
    assert request.id == "req-7"
    assert request.correlation_id == "corr" and request.sequence_start and not request.sequence_end
    assert request.priority == 2 and request.timeout_us == 1000
    assert request.parameters["custom"] == "v" and request.parameters["n"] == 3
    assert [(o.name, o.class_count, o.parameters.get("binary_data")) for o in request.outputs] == [
        ("OUT", 3, True),
        ("OTHER", 0, False),
    ]
    assert binary_default is False
    request, binary_default = decode(b'{"inputs":[],"parameters":{"binary_data_output":true}}')
    assert binary_default is True and "binary_data_output" not in request.parameters


def test_response_header_id_version_and_output_kinds() -> None:
    response = InferenceResponse(
        "m",
        "3",
        "abc",
        [
            Tensor("A", "FP32", (2,), np.array([1.0, 2.0], np.float32)),
            Tensor("B", "INT64", (1,), np.array([5])),
        ],
        {"note": "x"},
    )
    body, header_length = encode_response(response, [], binary_default=False)
    assert header_length is None
    assert json.loads(body) == {
        "id": "abc",
        "model_name": "m",
        "model_version": "3",
        "parameters": {"note": "x"},
        "outputs": [
            {"name": "A", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]},
            {"name": "B", "datatype": "INT64", "shape": [1], "data": [5]},
        ],
    }
    body, header_length = encode_response(response, [], binary_default=True)
    assert header_length is not None
    header = json.loads(body[:header_length])
    assert [o["parameters"] for o in header["outputs"]] == [{"binary_data_size": 8}, {"binary_data_size": 8}]
    assert body[header_length:] == np.array([1.0, 2.0], np.float32).tobytes() + np.array([5]).tobytes()
    # an empty id is not echoed
    response.id = ""
    assert "id" not in json.loads(encode_response(response, [])[0])


# ------------------------------------------------------------------------------------ raw requests
def test_raw_request_is_the_single_input_with_batch_one() -> None:
    config = {
        "max_batch_size": 8,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1, 2]}],
    }
    data = np.arange(6, dtype=np.float32)
    request, binary_default = decode_raw_request(data.tobytes(), "m", "", from_json_dict(config))
    (tensor,) = request.inputs
    assert tensor.shape == (1, 3, 2) and binary_default is True
    np.testing.assert_array_equal(tensor.data.reshape(-1), data)

    strings = {"max_batch_size": 0, "input": [{"name": "S", "data_type": "TYPE_STRING", "dims": [1]}]}
    request, _ = decode_raw_request(b"hello", "m", "", from_json_dict(strings))
    assert list(request.inputs[0].data) == [b"hello"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}] * 2},
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got "
            "2 inputs in 'm' model configuration",
        ),
        (
            {"input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [-1, -1]}]},
            "[request id: <id_unknown>] The shape of the raw input 'A' can not be deduced because there are "
            "more than one variable-sized dimension",
        ),
        (
            {"input": [{"name": "S", "data_type": "TYPE_STRING", "dims": [-1]}]},
            "[request id: <id_unknown>] For BYTE datatype raw input 'S', the model must have input shape [1]",
        ),
        (
            {"input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}]},
            "[request id: <id_unknown>] input byte size mismatch for input 'A' for model 'm'. Expected 16, "
            "got 5",
        ),
    ],
)
def test_raw_request_errors(config: dict[str, Any], message: str) -> None:
    error = error_of(decode_raw_request, b"12345", "m", "", from_json_dict(config))
    assert (error.code, error.message) == (ErrorCode.INVALID_ARG, message)


# ------------------------------------------------------------------------------------ shared memory
def test_shared_memory_inputs_and_outputs_go_through_the_view_function() -> None:
    region = bytearray(64)
    region[0:16] = np.arange(4, dtype=np.float32).tobytes()
    calls: list[tuple[str, int, int]] = []

    def view(name: str, offset: int, byte_size: int) -> memoryview:
        calls.append((name, offset, byte_size))
        return memoryview(region)[offset : offset + byte_size]

    body = {
        "inputs": [
            {
                "name": "X",
                "shape": [4],
                "datatype": "FP32",
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 16},
            }
        ],
        "outputs": [
            {
                "name": "Y",
                "parameters": {
                    "shared_memory_region": "r",
                    "shared_memory_offset": 32,
                    "shared_memory_byte_size": 16,
                },
            }
        ],
    }
    request, _ = decode(json.dumps(body).encode(), shm=view)
    np.testing.assert_array_equal(request.inputs[0].data, [0, 1, 2, 3])
    response = InferenceResponse("m", "1", "", [Tensor("Y", "FP32", (4,), request.inputs[0].data * 2)])
    payload, header_length = encode_response(response, request.outputs, shm=view)
    assert header_length is None
    assert json.loads(payload)["outputs"] == [{"name": "Y", "datatype": "FP32", "shape": [4]}]
    np.testing.assert_array_equal(np.frombuffer(region[32:48], np.float32), [0, 2, 4, 6])
    assert calls[0] == ("r", 0, 16) and ("r", 32, 16) in calls

    error = error_of(decode, json.dumps(body).encode())
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, SHM_DISABLED)
    small = {"shared_memory_region": "r", "shared_memory_byte_size": 8}
    request.outputs[0].parameters.update(small)
    error = error_of(encode_response, response, request.outputs, shm=view)
    assert error.message == (
        "shared memory size specified with the request for output 'Y' (8 bytes) should be at least 16 bytes "
        "to hold the results"
    )


# ------------------------------------------------------------------------------------ malformed input
def _input(**fields: Any) -> dict[str, Any]:
    return {"name": "X", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4], **fields}


def _without(key: str) -> dict[str, Any]:
    entry = _input()
    del entry[key]
    return entry


BAD_JSON_BODIES: list[tuple[str, Any, str]] = [
    ("not JSON", b'{"inputs": [', "failed to parse the request JSON buffer: "),
    ("empty", b"", "failed to parse the request JSON buffer: The document is empty."),
    (
        "top-level array",
        [1],
        "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
    ),
    (
        "inputs not array",
        {"inputs": {}},
        "Unable to parse 'inputs': attempt to access JSON non-array as array",
    ),
    (
        "id not string",
        {"id": 5, "inputs": []},
        "Unable to parse 'id': attempt to access JSON non-string as string",
    ),
    (
        "no data",
        {"inputs": [_without("data")]},
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But no field is set",
    ),
    (
        "data and binary",
        {"inputs": [_input(parameters={"binary_data_size": 16})]},
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
        "'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'",
    ),
    (
        "no name",
        {"inputs": [_without("name")]},
        "Unable to parse 'name': attempt to access non-existing object member 'name'",
    ),
    (
        "name not string",
        {"inputs": [_input(name=5)]},
        "Unable to parse 'name': attempt to access JSON non-string as string",
    ),
    (
        "no datatype",
        {"inputs": [_without("datatype")]},
        "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'",
    ),
    (
        "no shape",
        {"inputs": [_without("shape")]},
        "Unable to parse 'shape': attempt to access non-existing object member 'shape'",
    ),
    (
        "shape not array",
        {"inputs": [_input(shape=4)]},
        "Unable to parse 'shape': attempt to access JSON non-array as array",
    ),
    (
        "negative dim",
        {"inputs": [_input(shape=[-4])]},
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "float dim",
        {"inputs": [_input(shape=[4.0])]},
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "dim over int64",
        {"inputs": [_input(shape=[2**63])]},
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    ("unknown datatype", {"inputs": [_input(datatype="FOO")]}, "invalid datatype for input X"),
    (
        "too few elements",
        {"inputs": [_input(data=[1, 2, 3])]},
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "too many elements",
        {"inputs": [_input(data=[1, 2, 3, 4, 5])]},
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "ragged too few",
        {"inputs": [_input(data=[[1, 2], [3]])]},
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "string in FP32",
        {"inputs": [_input(data=[1, 2, "a", 4])]},
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "null in FP32",
        {"inputs": [_input(data=[None, 2, 3, 4])]},
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "bools in FP32",
        {"inputs": [_input(data=[True, False, True, False])]},
        "Unable to parse 'data': attempt to access JSON non-number as double",
    ),
    (
        "float in INT32",
        {"inputs": [_input(datatype="INT32", data=[1.5, 2, 3, 4])]},
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    (
        "negative UINT8",
        {"inputs": [_input(datatype="UINT8", data=[-1, 0, 1, 2])]},
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "ints in BOOL",
        {"inputs": [_input(datatype="BOOL", data=[1, 0, 1, 0])]},
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
    ),
    (
        "data not array",
        {"inputs": [_input(data=5)]},
        "Unable to parse 'data': attempt to access JSON non-array as array",
    ),
    (
        "BYTES non-string",
        {"inputs": [_input(datatype="BYTES", data=[1, 2, 3, 4])]},
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    (
        "BYTES count",
        {"inputs": [_input(datatype="BYTES", data=["a", "b"])]},
        "[request id: <id_unknown>] expected 4 string elements for inference input 'X' for model 'm', got 2",
    ),
    (
        "BF16 JSON",
        {"inputs": [_input(datatype="BF16")]},
        "receiving BF16 data via JSON is not supported. Please use the binary data format for input X",
    ),
    (
        "absurd shape",
        {"inputs": [_input(shape=[2**40])]},
        "JSON input 'X' has a byte_size (4398046511104 bytes) that exceeds the maximum allowed value of "
        "67108864 bytes. Use --http-max-input-size to increase the limit.",
    ),
    (
        "element count past int64",
        {"inputs": [_input(shape=[2**4, 2**60 + 2])]},
        "[request id: <id_unknown>] input 'X' with shape [16,1152921504606846978] causes total element "
        "count to exceed maximum size of 9223372036854775807",
    ),
    (
        "byte size past int64",
        {"inputs": [_input(shape=[2**2, 2**60 + 2])]},
        "byte size overflow for input 'X': shape [4,1152921504606846978] of FP32 is more than "
        "9223372036854775807 bytes",
    ),
    (
        "data nested deeper than 100",
        {"inputs": [_input(shape=[1], data=json.loads("[" * 101 + "1" + "]" * 101))]},
        "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)",
    ),
    (
        "duplicate input",
        {"inputs": [_input(), _input()]},
        "[request id: <id_unknown>] input 'X' already exists in request",
    ),
    (
        "params not object",
        {"inputs": [], "parameters": [1]},
        "failed to get request params.: attempt to get members for non-object",
    ),
    (
        "triton_ parameter",
        {"inputs": [], "parameters": {"triton_x": 1}},
        "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    ),
    (
        "list parameter",
        {"inputs": [], "parameters": {"x": [1]}},
        "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.",
    ),
    (
        "negative sequence_id",
        {"inputs": [], "parameters": {"sequence_id": -1}},
        "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
    ),
    (
        "sequence_start string",
        {"inputs": [], "parameters": {"sequence_start": "true"}},
        "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean",
    ),
    (
        "negative priority",
        {"inputs": [], "parameters": {"priority": -1}},
        "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "timeout string",
        {"inputs": [], "parameters": {"timeout": "5"}},
        "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "binary_data_output int",
        {"inputs": [], "parameters": {"binary_data_output": 1}},
        "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean",
    ),
    (
        "outputs not array",
        {"inputs": [], "outputs": {}},
        "Unable to parse 'outputs': attempt to access JSON non-array as array",
    ),
    (
        "output without name",
        {"inputs": [], "outputs": [{}]},
        "Unable to parse 'name': attempt to access non-existing object member 'name'",
    ),
    (
        "negative classification",
        {"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": -2}}]},
        "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "binary_data string",
        {"inputs": [], "outputs": [{"name": "Y", "parameters": {"binary_data": "yes"}}]},
        "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean",
    ),
    (
        "shm and classification",
        {
            "inputs": [],
            "outputs": [{"name": "Y", "parameters": {"shared_memory_region": "r", "classification": 2}}],
        },
        "Output can't set both 'shared_memory_region' and 'classification'",
    ),
    (
        "shm and binary",
        {
            "inputs": [],
            "outputs": [{"name": "Y", "parameters": {"shared_memory_region": "r", "binary_data": True}}],
        },
        "Output can't set both 'shared_memory_region' and 'binary_data'",
    ),
]


@pytest.mark.parametrize(("case", "body", "message"), BAD_JSON_BODIES, ids=[c[0] for c in BAD_JSON_BODIES])
def test_malformed_json_requests_are_invalid_arguments(case: str, body: Any, message: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    error = error_of(decode, raw)
    assert error.code == ErrorCode.INVALID_ARG
    assert error.message.startswith(message) if case == "not JSON" else error.message == message


def _binary(inputs: list[tuple[str, str, list[int], int]], blob: bytes) -> tuple[bytes, int]:
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": size}}
                for n, d, s, size in inputs
            ]
        }
    ).encode()
    return header + blob, len(header)


FOUR = np.arange(4, dtype=np.float32).tobytes()
BAD_BINARY_BODIES: list[tuple[str, tuple[bytes, int], str]] = [
    (
        "short",
        _binary([("A", "FP32", [4], 16), ("B", "FP32", [4], 16)], FOUR + FOUR[:8]),
        "unexpected size for input 'B', expecting 8 additional bytes for model 'm'",
    ),
    (
        "extra",
        _binary([("A", "FP32", [4], 16)], FOUR + b"xx"),
        "unexpected additional input data for model 'm'",
    ),
    (
        "size not shape",
        _binary([("A", "FP32", [4], 12)], FOUR[:12]),
        "[request id: <id_unknown>] input byte size mismatch for input 'A' for model 'm'. Expected 16, got 12",
    ),
    (
        "absurd shape",
        _binary([("A", "FP32", [2**40], 16)], FOUR),
        "[request id: <id_unknown>] input byte size mismatch for input 'A' for model 'm'. Expected "
        "4398046511104, got 16",
    ),
    (
        "negative size",
        _binary([("A", "FP32", [4], -16)], FOUR),
        "Unable to parse 'binary_data_size': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    (
        "string length beyond data",
        _binary([("S", "BYTES", [2], 9)], struct.pack("<I", 1) + b"a" + struct.pack("<I", 100)),
        "incomplete string data for inference input 'S', expecting string of length 100 but only 0 bytes "
        "available",
    ),
    (
        "truncated length",
        _binary([("S", "BYTES", [2], 7)], struct.pack("<I", 1) + b"a" + b"\x01\x00"),
        "incomplete string length for inference input 'S', expecting 4 bytes but only 2 bytes available",
    ),
    (
        "too few strings",
        _binary([("S", "BYTES", [2], 5)], struct.pack("<I", 1) + b"a"),
        "[request id: <id_unknown>] expected 2 string elements for inference input 'S' for model 'm', got 1",
    ),
    (
        "too many strings",
        _binary([("S", "BYTES", [2], 15)], (struct.pack("<I", 1) + b"a") * 3),
        "[request id: <id_unknown>] unexpected number of string elements 3 for inference input 'S' for model "
        "'m', expecting 2",
    ),
    (
        "absurd string count",
        _binary([("S", "BYTES", [2**40], 5)], struct.pack("<I", 1) + b"a"),
        "[request id: <id_unknown>] expected 1099511627776 string elements for inference input 'S' for model "
        "'m', got 1",
    ),
]


@pytest.mark.parametrize(
    ("case", "request_", "message"), BAD_BINARY_BODIES, ids=[c[0] for c in BAD_BINARY_BODIES]
)
def test_malformed_binary_requests_are_invalid_arguments(
    case: str, request_: tuple[bytes, int], message: str
) -> None:
    body, header_length = request_
    error = error_of(decode, body, header_length)
    assert (error.code, error.message) == (ErrorCode.INVALID_ARG, message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"abc", "Unable to parse Inference-Header-Content-Length, got: abc"),
        (b"-1", "inference header size should be in range (0, 10), got: -1"),
        (b"11", "inference header size should be in range (0, 10), got: 11"),
    ],
)
def test_header_length_must_fit_the_body(value: bytes, message: str) -> None:
    assert parse_header_length(b"10", 10) == 10
    error = error_of(parse_header_length, value, 10)
    assert (error.code, error.message) == (ErrorCode.INVALID_ARG, message)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=220))
def test_arbitrary_bytes_never_raise_anything_but_invalid_arg(body: bytes, header_length: int) -> None:
    try:
        decode(body, min(header_length, len(body)) or None)
    except TritonError as error:
        assert error.code == ErrorCode.INVALID_ARG


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "id": json_values,
            "parameters": json_values,
            "inputs": st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "name": st.sampled_from(["X", "Y"]) | json_values,
                        "datatype": st.sampled_from(["FP32", "INT8", "BYTES", "BOOL", "FP16"]) | json_values,
                        "shape": st.lists(st.integers(min_value=-2, max_value=3), max_size=3) | json_values,
                        "data": json_values,
                        "parameters": json_values,
                    },
                ),
                max_size=3,
            )
            | json_values,
            "outputs": json_values,
        },
    )
)
def test_arbitrary_json_documents_never_raise_anything_but_invalid_arg(document: dict[str, Any]) -> None:
    try:
        decode(json.dumps(document).encode())
    except TritonError as error:
        assert error.code == ErrorCode.INVALID_ARG
