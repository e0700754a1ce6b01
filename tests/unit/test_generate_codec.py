"""The generate extension's JSON forms (server/frontends/http/app.py): request bodies to core requests,
with the shapes and errors real Triton 2.51 gives, and responses to JSON."""

from __future__ import annotations

import numpy as np
import pytest

from server.protocol.errors import ErrorCode, TritonError
from server.protocol.generate_codec import _generate_shape, decode_generate, encode_generate
from server.protocol.types import InferenceResponse, Tensor

SCHEMA = {
    "text_input": ("BYTES", (1,)),
    "count": ("INT32", (1,)),
    "V": ("FP32", (-1,)),
    "flag": ("BOOL", (1,)),
}


@pytest.mark.parametrize(
    ("count", "dims", "batching", "shape"),
    [
        (4, (4,), False, (4,)),
        (4, (2, 2), False, (2, 2)),
        (4, (-1, 2), False, (2, 2)),
        (3, (-1, 2), False, None),
        (2, (1,), False, None),
        (2, (1,), True, (2, 1)),  # the batch dimension takes the elements
        (2, (-1,), True, (1, 2)),  # a variable dimension: batch 1
        (0, (-1,), True, (1, 0)),
        (4, (-1, -1), False, None),
        (0, (0, -1), False, None),
    ],
)
def test_shape_from_the_element_count(
    count: int, dims: tuple[int, ...], batching: bool, shape: tuple[int, ...] | None
) -> None:
    assert _generate_shape(count, dims, batching) == shape


def test_inputs_parameters_and_id() -> None:
    body = b'{"id": "r1", "text_input": "hi", "V": [1, 2.5], "k": 3, "parameters": {"t": 0.5, "s": "x"}}'
    request = decode_generate(body, "m", "", True, SCHEMA)
    assert (request.model_name, request.id) == ("m", "r1")
    assert request.parameters == {"id": "r1", "k": 3, "t": 0.5, "s": "x"}
    text, values = request.inputs
    assert (text.datatype, text.shape, text.data.tolist()) == ("BYTES", (1, 1), [[b"hi"]])
    assert (values.datatype, values.shape, values.data.dtype) == ("FP32", (1, 2), np.float32)


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (b"", ErrorCode.INVALID_ARG, "failed to parse the request JSON buffer: The document is empty."),
        (b"[1]", ErrorCode.INVALID_ARG, "attempt to get members for non-object"),
        (
            b'{"id": 1}',
            ErrorCode.INVALID_ARG,
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        (b'{"parameters": [1]}', ErrorCode.INVALID_ARG, "Expected JSON object for keyword: 'parameters'"),
        (
            b'{"parameters": {"x": null}}',
            ErrorCode.INVALID_ARG,
            "Converting keyword: 'parameters': parameter 'x'",
        ),
        (b'{"x": {"a": 1}}', ErrorCode.INVALID_ARG, "parameter 'x' has invalid type"),
        (b'{"count": 1, "count": 2}', ErrorCode.INVALID_ARG, "input 'count' already exists in request"),
        (
            b'{"count": [1, 2]}',
            ErrorCode.INVALID_ARG,
            "can not convert input 'count' to tensor with proper shape",
        ),
        (b'{"count": [[1, 2]]}', ErrorCode.INVALID_ARG, "Shape does not match true shape of 'data' field"),
        (b'{"count": 1.5}', ErrorCode.INVALID_ARG, "non-signed-integer as signed-integer"),
        (b'{"text_input": 1}', ErrorCode.INVALID_ARG, "Unable to parse JSON bytes array"),
        (b'{"flag": 1}', ErrorCode.INVALID_ARG, "non-boolean as boolean"),
        (b'{"V": ["a"]}', ErrorCode.INVALID_ARG, "non-number as double"),
    ],
)
def test_request_errors(body: bytes, code: ErrorCode, message: str) -> None:
    with pytest.raises(TritonError) as caught:
        decode_generate(body, "m", "", False, SCHEMA)
    assert caught.value.code == code
    assert message in caught.value.message


def test_response_json() -> None:
    response = InferenceResponse(
        "m",
        "1",
        "r",
        [
            Tensor("text_output", "BYTES", (1, 1), np.array([[b"hi"]], dtype=object)),
            Tensor("B", "FP32", (2, 2), np.arange(4, dtype=np.float32).reshape(2, 2)),
            Tensor("A", "BOOL", (1,), np.array([True])),
        ],
    )
    assert encode_generate(response) == (
        b'{"A":true,"B":[0.0,1.0,2.0,3.0],"id":"r","model_name":"m","model_version":"1","text_output":"hi"}'
    )
    assert encode_generate(InferenceResponse("m", "1")) == b'{"model_name":"m","model_version":"1"}'
