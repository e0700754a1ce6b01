"""Hypothesis strategies for a client's mistakes, shared by the fuzz tests (tests/integration/
test_fuzz.py, a bounded budget in `make test`) and the longer run (benchmarks/fuzz.py).

Each strategy starts near a valid request for the example models (`simple`: INT32 [-1, 16] pairs,
`add_sub`: FP32 [4] pairs, `simple_identity`: BYTES) and bends it: wrong and unknown datatypes,
negative, huge and non-integer shapes, data of the wrong kind and length, binary-data sizes that lie,
parameters of every JSON type, bodies that are not JSON at all. Whatever comes out, the server must
answer with a client error (or serve it), never a 5xx, a crash, a hang or growing memory.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

MODELS = ["simple", "add_sub", "simple_identity", "no_such_model"]
INPUT_NAMES = ["INPUT0", "INPUT1", "X", ""]
OUTPUT_NAMES = ["OUTPUT0", "OUTPUT1", "Z"]
DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "UINT32", "UINT64", "FP16", "FP32", "FP64"]
DATATYPES += ["BF16", "BYTES", "FOO", "", "int32"]
REQUEST_PARAMETERS = ["binary_data_output", "sequence_id", "sequence_start", "sequence_end", "priority"]
REQUEST_PARAMETERS += ["timeout", "headers", "x"]
TENSOR_PARAMETERS = ["binary_data", "binary_data_size", "shared_memory_region", "shared_memory_byte_size"]
TENSOR_PARAMETERS += ["shared_memory_offset", "classification", "x"]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5), max_leaves=24)
dims = st.one_of(
    st.lists(st.integers(-3, 20), max_size=4),
    st.lists(st.integers(-(2**66), 2**66), max_size=3),
    st.just([1, 16]),
    st.just([4]),
    json_scalars,
)


def _numbers(count: int) -> st.SearchStrategy[list[Any]]:
    return st.lists(
        st.one_of(st.integers(-(2**40), 2**40), st.floats(-1e6, 1e6), st.booleans()), max_size=count
    )


json_tensor = st.fixed_dictionaries(
    {"name": st.sampled_from(INPUT_NAMES), "datatype": st.sampled_from(DATATYPES), "shape": dims},
    optional={
        "data": st.one_of(json_values, _numbers(32), st.lists(_numbers(16), max_size=3)),
        "parameters": st.dictionaries(st.sampled_from(TENSOR_PARAMETERS), json_scalars, max_size=3),
    },
)
json_request = st.fixed_dictionaries(
    {"inputs": st.one_of(st.lists(json_tensor, max_size=3), json_scalars)},
    optional={
        "id": json_scalars,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(OUTPUT_NAMES)},
                optional={"parameters": st.dictionaries(st.sampled_from(TENSOR_PARAMETERS), json_scalars)},
            ),
            max_size=3,
        ),
        "parameters": st.one_of(
            st.dictionaries(st.sampled_from(REQUEST_PARAMETERS), json_scalars, max_size=3), json_scalars
        ),
    },
)


@st.composite
def http_infer(draw: st.DrawFn) -> tuple[str, dict[str, str], bytes]:
    """(model, headers, body) for POST /v2/models/{model}/infer: JSON, JSON with binary data after
    it (Inference-Header-Content-Length true or lying), or bytes that are no JSON at all."""
    model = draw(st.sampled_from(MODELS))
    kind = draw(st.sampled_from(["json", "binary", "garbage", "any_json"]))
    if kind == "garbage":
        return model, {}, draw(st.binary(max_size=256))
    if kind == "any_json":
        return model, {}, json.dumps(draw(json_values)).encode()
    header = json.dumps(draw(json_request)).encode()
    if kind == "json":
        return model, {"Content-Type": "application/json"}, header
    tail = draw(st.binary(max_size=256))
    length = draw(st.one_of(st.just(len(header)), st.integers(-5, len(header) + len(tail) + 5)))
    headers = {"Inference-Header-Content-Length": str(length), "Content-Type": "application/octet-stream"}
    return model, headers, header + tail


def _contents(draw: st.DrawFn, contents: pb.InferTensorContents) -> None:
    field = draw(st.sampled_from(["bool", "int", "int64", "uint", "uint64", "fp32", "fp64", "bytes", "none"]))
    count = st.integers(0, 40)
    if field == "bool":
        contents.bool_contents.extend(draw(st.lists(st.booleans(), max_size=40)))
    elif field == "int":
        contents.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40)))
    elif field == "int64":
        contents.int64_contents.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40)))
    elif field == "uint":
        contents.uint_contents.extend(draw(st.lists(st.integers(0, 2**32 - 1), max_size=40)))
    elif field == "uint64":
        contents.uint64_contents.extend(draw(st.lists(st.integers(0, 2**64 - 1), max_size=40)))
    elif field == "fp32":
        contents.fp32_contents.extend(np.float32(draw(st.floats(-1e6, 1e6))) for _ in range(draw(count)))
    elif field == "fp64":
        contents.fp64_contents.extend(draw(st.lists(st.floats(allow_nan=True), max_size=40)))
    elif field == "bytes":
        contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=16), max_size=20)))


@st.composite
def grpc_infer(draw: st.DrawFn) -> pb.ModelInferRequest:
    """A ModelInferRequest with random tensors: typed contents or raw bytes (or both, or neither),
    any datatype and shape, and parameters of every kind."""
    request = pb.ModelInferRequest(model_name=draw(st.sampled_from(MODELS)))
    request.model_version = draw(st.sampled_from(["", "1", "-1", "7", "x"]))
    request.id = draw(st.text(max_size=8))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(
            name=draw(st.sampled_from(INPUT_NAMES)), datatype=draw(st.sampled_from(DATATYPES))
        )
        tensor.shape.extend(draw(st.lists(st.integers(-3, 2**40), max_size=4)))
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=200)))
        elif draw(st.booleans()):
            _contents(draw, tensor.contents)
        for key in draw(st.lists(st.sampled_from(TENSOR_PARAMETERS), max_size=2)):
            _parameter(draw, tensor.parameters[key])
    if raw and draw(st.booleans()):
        request.raw_input_contents.append(draw(st.binary(max_size=64)))  # one more than inputs
    for name in draw(st.lists(st.sampled_from(OUTPUT_NAMES), max_size=3)):
        output = request.outputs.add(name=name)
        for key in draw(st.lists(st.sampled_from(TENSOR_PARAMETERS), max_size=1)):
            _parameter(draw, output.parameters[key])
    for key in draw(st.lists(st.sampled_from(REQUEST_PARAMETERS), max_size=3)):
        _parameter(draw, request.parameters[key])
    return request


def _parameter(draw: st.DrawFn, parameter: pb.InferParameter) -> None:
    kind = draw(st.sampled_from(["bool", "int64", "string", "double", "uint64"]))
    if kind == "bool":
        parameter.bool_param = draw(st.booleans())
    elif kind == "int64":
        parameter.int64_param = draw(st.integers(-(2**63), 2**63 - 1))
    elif kind == "string":
        parameter.string_param = draw(st.text(max_size=12))
    elif kind == "double":
        parameter.double_param = draw(st.floats(allow_nan=True))
    else:
        parameter.uint64_param = draw(st.integers(0, 2**64 - 1))


# pieces of config.pbtxt text, to splice into a valid config
CONFIG_TOKENS = [
    "name:", "platform:", "backend:", "max_batch_size:", "input", "output", "dims:", "data_type:",
    "TYPE_INT32", "TYPE_FP32", "TYPE_STRING", "TYPE_BOGUS", "instance_group", "count:", "kind:", "KIND_GPU",
    "KIND_CPU", "dynamic_batching", "preferred_batch_size:", "max_queue_delay_microseconds:", "sequence_batching",
    "control_input", "ensemble_scheduling", "step", "model_warmup", "reshape", "shape:", "label_filename:",
    "version_policy", "latest", "num_versions:", "specific", "versions:", "parameters", "key:", "value:",
    "string_value:", "optimization", "{", "}", "[", "]", ":", ",", '"', '"x"', '"../../etc/passwd"', "-1", "0",
    "1", "16", "-16", "99999999999999999999", "1e9", "true", "false", "#", "\n", " ",
]  # fmt: skip


@st.composite
def config_text(draw: st.DrawFn, base: str) -> str:
    """`base` with a few spans deleted, duplicated or replaced by config tokens."""
    text = base
    for _ in range(draw(st.integers(1, 6))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 40)))
        action = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        tokens = " ".join(draw(st.lists(st.sampled_from(CONFIG_TOKENS), min_size=1, max_size=6)))
        if action == "delete":
            text = text[:start] + text[end:]
        elif action == "insert":
            text = text[:start] + tokens + text[start:]
        elif action == "replace":
            text = text[:start] + tokens + text[end:]
        else:
            text = text[:end] + text[start:end] + text[end:]
    return text


config_overrides = st.one_of(
    st.dictionaries(
        st.sampled_from(
            ["name", "backend", "platform", "max_batch_size", "input", "output", "instance_group", "x"]
        ),
        json_values,
        max_size=4,
    ),
    json_values,
)
