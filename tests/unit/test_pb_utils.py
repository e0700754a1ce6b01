"""tcli's triton_python_backend_utils behaves as Triton 2.51's for what model authors rely on.

Expected messages and values were checked against the real 2.51 python backend stub."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.utils as client_utils
from google.protobuf import json_format, text_format
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2

from server.backends.python import triton_python_backend_utils as pb_utils
from server.protocol import datatypes
from server.protocol.errors import ErrorCode
from tests.torch_needed import import_torch

WIRE_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
WIRE_TYPES += ["FP16", "FP32", "FP64", "BYTES"]


@pytest.fixture(autouse=True)
def no_hooks() -> Iterator[None]:
    """Every test starts and ends without server hooks installed."""
    pb_utils.set_bls_executor(None)
    pb_utils.set_model_manager(None)
    yield
    pb_utils.set_bls_executor(None)
    pb_utils.set_model_manager(None)


# --- data types ------------------------------------------------------------------------------------


@pytest.mark.parametrize("enum_value,wire", list(enumerate(WIRE_TYPES, start=1)))
def test_dtype_mappings_agree_with_tritonclient(enum_value: int, wire: str) -> None:
    client_dtype = np.dtype(client_utils.triton_to_np_dtype(wire))
    assert np.dtype(pb_utils.triton_to_numpy_type(enum_value)) == client_dtype
    assert pb_utils.numpy_to_triton_type(client_dtype) == enum_value
    assert client_utils.np_to_triton_dtype(np.dtype(pb_utils.triton_to_numpy_type(enum_value))) == wire
    config_name = datatypes.wire_to_config(wire)
    assert np.dtype(pb_utils.triton_string_to_numpy(config_name)) == client_dtype
    assert pb_utils.dtype_to_wire(enum_value) == wire and pb_utils.wire_to_dtype(wire) == enum_value
    assert pb_utils.config_to_dtype(config_name) == enum_value


def test_bf16_and_str_have_no_numpy_mapping_as_in_triton() -> None:
    assert pb_utils.triton_to_numpy_type(14) is None
    assert pb_utils.triton_to_numpy_type(0) is None
    assert pb_utils.dtype_to_wire(14) == "BF16" and pb_utils.config_to_dtype("TYPE_BF16") == 14
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
    assert pb_utils.numpy_to_triton_type(np.dtype("U3")) is None
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.dtype("S3")) == 13


def test_triton_dtype_values_follow_the_config_enum_order() -> None:
    # TRITONSERVER_DataType and the config enum share the order BOOL=1 ... STRING/BYTES=13, BF16=14
    for index, config_name in enumerate(datatypes.CONFIG_TYPE_NAMES, start=1):
        assert pb_utils.config_to_dtype(config_name) == index
        assert pb_utils.dtype_to_wire(index) == datatypes.config_to_wire(config_name)
    # the one datatype table numbers its rows as the config's protobuf enum does, in row order
    for index, row in enumerate(datatypes.TYPES, start=1):
        assert row.number == index == model_config_pb2.DataType.Value(row.config)
    assert len(datatypes.TYPES) == len(model_config_pb2.DataType.values()) - 1  # all but TYPE_INVALID


# --- BYTES tensors -----------------------------------------------------------------------------------


def test_serialize_uses_four_byte_little_endian_length_prefixes() -> None:
    tensor = np.array([[b"ab", b""], ["é", 7]], dtype=np.object_)
    assert pb_utils.serialize_byte_tensor(tensor) == (
        b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9" + b"\x01\x00\x00\x007"
    )
    assert pb_utils.serialize_byte_tensor(np.array([1, 2])) is None
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""


def object_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


byte_arrays = st.lists(st.binary(max_size=40), max_size=12).flatmap(
    lambda items: st.sampled_from([(len(items),), (1, len(items)), (len(items), 1)]).map(
        lambda shape: object_array(items, shape)
    )
)


@settings(max_examples=200, deadline=None)  # a loaded CI machine is slow; no time bound here
@given(byte_arrays)
def test_bytes_tensor_round_trip(tensor: np.ndarray[Any, Any]) -> None:
    encoded = pb_utils.serialize_byte_tensor(tensor)
    assert encoded is not None
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_
    assert decoded.tolist() == tensor.ravel().tolist()
    # the same bytes as tritonclient puts on the wire
    if tensor.size:
        assert client_utils.serialize_byte_tensor(tensor).item() == encoded
    # the real stub hands deserialize a uint8 array
    assert pb_utils.deserialize_bytes_tensor(np.frombuffer(encoded, np.uint8)).tolist() == decoded.tolist()


def test_truncated_bytes_tensor_is_refused() -> None:
    """A ValueError a model can catch, worded as the server words a bad BYTES input."""
    with pytest.raises(ValueError, match="expecting string of length 5 but only 2 bytes available"):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")
    with pytest.raises(ValueError, match="expecting 4 bytes but only 2 bytes available"):
        pb_utils.deserialize_bytes_tensor(b"\x01\x00")


# --- Tensor ------------------------------------------------------------------------------------------


def test_tensor_basics() -> None:
    tensor = pb_utils.Tensor("OUT", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert tensor.name() == "OUT"
    assert tensor.shape() == [2, 3]
    assert tensor.triton_dtype() == 11
    assert tensor.is_cpu()
    assert tensor.as_numpy().dtype == np.float32
    transposed = pb_utils.Tensor("T", np.arange(6).reshape(2, 3).T)
    assert transposed.as_numpy().flags.c_contiguous and transposed.shape() == [3, 2]
    text = pb_utils.Tensor("S", np.array([b"a", "b"], dtype=np.object_))
    assert text.triton_dtype() == 13 and text.as_numpy().tolist() == [b"a", "b"]


def test_tensor_refuses_what_triton_refuses() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"^NumPy dtype is not supported\.$"):
        pb_utils.Tensor("S", np.array(["x", "y"]))
    with pytest.raises(
        pb_utils.TritonModelException, match=re.escape("Tensor name cannot be an empty string.")
    ):
        pb_utils.Tensor("", np.zeros(2))
    with pytest.raises(TypeError):
        pb_utils.Tensor("L", [1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb_utils.Tensor("S", np.float32(3))  # type: ignore[arg-type]


def test_dlpack_round_trip_shares_memory_with_numpy_and_torch() -> None:
    torch = import_torch()
    source = np.arange(4, dtype=np.int16)
    tensor = pb_utils.Tensor.from_dlpack("A", source)
    assert tensor.triton_dtype() == 7 and tensor.as_numpy().tolist() == [0, 1, 2, 3]
    as_torch = torch.from_dlpack(tensor)
    as_torch[0] = 42
    assert source[0] == 42  # zero-copy all the way
    capsule = pb_utils.Tensor("B", np.ones((2, 2), np.float32)).to_dlpack()
    assert pb_utils.Tensor.from_dlpack("B", capsule).shape() == [2, 2]
    from_torch = pb_utils.Tensor.from_dlpack("C", torch.tensor([[True, False]]))
    assert from_torch.triton_dtype() == 1 and from_torch.as_numpy().tolist() == [[True, False]]
    legacy_capsule = torch.utils.dlpack.to_dlpack(torch.arange(3, dtype=torch.int64))
    assert pb_utils.Tensor.from_dlpack("D", legacy_capsule).as_numpy().tolist() == [0, 1, 2]
    # inputs the server decodes straight from request bytes are read-only arrays
    read_only = pb_utils.Tensor("E", np.frombuffer(b"\x01\x00\x00\x00\x02\x00\x00\x00", np.int32))
    assert torch.from_dlpack(read_only).tolist() == [1, 2]
    assert torch.utils.dlpack.from_dlpack(read_only.to_dlpack()).tolist() == [1, 2]


def test_bf16_travels_through_dlpack_but_not_numpy() -> None:
    torch = import_torch()
    values = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    tensor = pb_utils.Tensor.from_dlpack("BF", values)
    assert tensor.triton_dtype() == 14 and tensor.shape() == [3]
    with pytest.raises(pb_utils.TritonModelException, match="Tensor dtype is BF16 and cannot be converted"):
        tensor.as_numpy()
    back = torch.from_dlpack(tensor.to_dlpack())
    assert back.dtype == torch.bfloat16 and back.tolist() == [1.5, -2.0, 3.25]
    bits = pb_utils.tensor_storage(tensor)
    assert (
        bits.dtype == np.uint16 and bits.tolist() == values.view(torch.int16).numpy().view(np.uint16).tolist()
    )


def test_dlpack_refusals() -> None:
    with pytest.raises(
        pb_utils.TritonModelException, match=re.escape("DLPack does not have support for string tensors.")
    ):
        pb_utils.Tensor("S", np.array([b"x"], dtype=np.object_)).to_dlpack()
    with pytest.raises(pb_utils.TritonModelException, match="Provided tensor is not supported"):
        pb_utils.Tensor.from_dlpack("X", 5)
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("X", np.arange(6).reshape(2, 3).T)


# --- errors and responses ------------------------------------------------------------------------


def test_triton_error_codes_match_triton_and_the_server() -> None:
    names = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED"]
    names += ["ALREADY_EXISTS", "CANCELLED"]
    assert [int(getattr(pb_utils.TritonError, n)) for n in names] == list(range(8))
    for name in names:
        error = pb_utils.TritonError("m", getattr(pb_utils.TritonError, name))
        assert ErrorCode[pb_utils.error_code_name(error)].name == name
    default = pb_utils.TritonError("bad input")
    assert default.code() == pb_utils.TritonError.INTERNAL and default.message() == "bad input"
    assert not isinstance(default, BaseException)  # as in Triton: attach it, don't raise it
    with pytest.raises(TypeError):
        pb_utils.TritonError(None)  # type: ignore[arg-type]


def test_inference_response_accessors() -> None:
    out = pb_utils.Tensor("OUTPUT0", np.ones(2, np.float32))
    response = pb_utils.InferenceResponse(output_tensors=[out], parameters={"a": 1, "b": True, "c": "s"})
    assert not response.has_error() and response.error() is None
    assert pb_utils.get_output_tensor_by_name(response, "OUTPUT0") is out
    assert pb_utils.get_output_tensor_by_name(response, "NOPE") is None
    assert json.loads(response.parameters()) == {"a": 1, "b": True, "c": "s"}
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("no", pb_utils.TritonError.INVALID_ARG))
    assert failed.has_error() and failed.output_tensors() == [] and failed.error().message() == "no"  # type: ignore[union-attr]
    assert pb_utils.InferenceResponse().parameters() == "{}"


def test_inference_response_refusals() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="should not be empty"):
        pb_utils.InferenceResponse([None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([], "oops")  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="values to have type bool/int/str"):
        pb_utils.InferenceResponse(parameters={"a": 1.5})  # type: ignore[dict-item]
    with pytest.raises(pb_utils.TritonModelException, match="keys to have type str"):
        pb_utils.InferenceResponse(parameters={1: 1})  # type: ignore[dict-item]


def test_argument_checks_raise_what_tritons_binding_raises() -> None:
    """The exception type for each bad argument as Triton 2.51's binding raises it (run there by a
    model, as Triton's qa argument_validation model checks them): TypeError where a value is not of
    the argument's type (None included), TritonModelException where Triton's own check refuses it."""
    a = np.asarray([1, 2], dtype=np.int32)

    def request(**kwargs: Any) -> Any:
        return pb_utils.InferenceRequest(
            **{"inputs": [], "model_name": "m", "requested_output_names": ["o"], **kwargs}
        )

    type_errors = [
        lambda: request(inputs=[1]),
        lambda: request(inputs=None),
        lambda: request(correlation_id=None),
        lambda: pb_utils.InferenceResponse(output_tensors=None),  # type: ignore[arg-type]
        lambda: pb_utils.InferenceResponse(output_tensors=[1]),  # type: ignore[list-item]
        lambda: pb_utils.Tensor("", None),  # type: ignore[arg-type]
        lambda: pb_utils.Tensor("x", None),  # type: ignore[arg-type]
        lambda: pb_utils.Tensor(None, a),  # type: ignore[arg-type]
    ]
    for case in type_errors:
        with pytest.raises(TypeError):
            case()
    refused = {
        "Input tensor for request with id '' and model name 'm' should not be empty.": lambda: request(
            inputs=[None]
        ),
        "Requested output name for request with id '' and model name 'm' should not be empty.": lambda: (
            request(requested_output_names=[""])
        ),
        "Correlation ID must be integer or string": lambda: request(correlation_id=1.5),
        "Output tensor for inference response should not be empty.": lambda: pb_utils.InferenceResponse(
            [None]
        ),  # type: ignore[list-item]
        "Tensor name cannot be an empty string.": lambda: pb_utils.Tensor("", a),
    }
    for message, case in refused.items():
        with pytest.raises(pb_utils.TritonModelException, match=f"^{re.escape(message)}$"):
            case()
    assert pb_utils.InferenceResponse().output_tensors() == []


# --- requests, BLS ------------------------------------------------------------------------------------


def bls_request(**kwargs: Any) -> pb_utils.InferenceRequest:
    args: dict[str, Any] = {
        "model_name": "add_sub",
        "requested_output_names": ["OUTPUT0"],
        "inputs": [pb_utils.Tensor("INPUT0", np.ones(4, np.float32))],
    }
    return pb_utils.InferenceRequest(**{**args, **kwargs})


def test_bls_request_fields() -> None:
    request = bls_request(request_id="r1", correlation_id="seq-7", parameters={"k": 1})
    assert request.request_id() == "r1" and request.correlation_id() == "seq-7"
    assert request.requested_output_names() == {"OUTPUT0"}
    assert request.parameters() == '{"k": 1}' and request.flags() == 0 and request.timeout() == 0
    assert pb_utils.get_input_tensor_by_name(request, "INPUT0") is request.inputs()[0]
    assert pb_utils.get_input_tensor_by_name(request, "INPUT9") is None
    assert request.trace().get_context() is None
    positional = pb_utils.InferenceRequest("id", 5, [], ["o"], "m")
    assert positional.request_id() == "id" and positional.correlation_id() == 5
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID must be integer or string"):
        bls_request(correlation_id=1.5)
    with pytest.raises(TypeError, match="model_name"):
        pb_utils.InferenceRequest(inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="Cannot determine request cancellation"):
        bls_request().is_cancelled()


def test_bls_request_takes_bytes_where_it_takes_str() -> None:
    """The python backend's examples pass a TYPE_STRING input's element (bytes) as the model name."""
    model = np.array([b"add_sub"], dtype=np.object_)[0]
    request = bls_request(model_name=model, request_id=b"r2", requested_output_names=[b"OUTPUT0"])
    assert request.request_id() == "r2" and request.requested_output_names() == {"OUTPUT0"}
    with pytest.raises(pb_utils.TritonModelException, match="BLS request for model 'add_sub'"):
        request.exec()  # no server here: the error names the model, decoded
    with pytest.raises(TypeError, match="model_name"):
        bls_request(model_name=5)


def test_bls_without_a_server_raises_a_clear_error() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="BLS request for model 'add_sub'"):
        bls_request().exec()


def test_bls_exec_calls_the_installed_executor() -> None:
    calls: list[tuple[str, int, bool]] = []

    def executor(
        request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        calls.append((model_name, model_version, decoupled))
        doubled = pb_utils.Tensor("OUTPUT0", request.inputs()[0].as_numpy() * 2)
        if decoupled:
            return pb_utils.ResponseIterator([pb_utils.InferenceResponse([doubled])] * 2)
        return pb_utils.InferenceResponse([doubled])

    pb_utils.set_bls_executor(executor)
    response = bls_request(model_version=3).exec()
    assert isinstance(response, pb_utils.InferenceResponse)
    assert pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy().tolist() == [2.0] * 4  # type: ignore[union-attr]
    assert len(list(bls_request().exec(decoupled=True))) == 2  # type: ignore[arg-type]

    async def run() -> Any:
        return await asyncio.gather(bls_request().async_exec(), bls_request().async_exec())

    assert all(isinstance(r, pb_utils.InferenceResponse) for r in asyncio.run(run()))
    assert calls[:2] == [("add_sub", 3, False), ("add_sub", -1, True)] and len(calls) == 4

    def broken(*_: Any) -> pb_utils.InferenceResponse:
        raise RuntimeError("scheduler gone")

    pb_utils.set_bls_executor(broken)
    with pytest.raises(pb_utils.TritonModelException, match="scheduler gone"):
        bls_request().exec()


def test_a_response_iterator_is_made_once_the_first_response_is_in() -> None:
    """As Triton's exec(decoupled=True) returns: the first response is read when the iterator is
    made (so async_exec's executor thread waits for it, not the model's event loop); what reading
    it raised comes out of the first next()."""
    pulled: list[int] = []

    def stream() -> Any:
        for n in (1, 2):
            pulled.append(n)
            yield pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array([n]))])

    iterator = pb_utils.ResponseIterator(stream())
    assert pulled == [1]
    assert [int(r.output_tensors()[0].as_numpy()[0]) for r in iterator] == [1, 2]

    def failing() -> Any:
        raise pb_utils.TritonModelException("model 'x' is gone")
        yield  # a generator

    broken = pb_utils.ResponseIterator(failing())
    with pytest.raises(pb_utils.TritonModelException, match="is gone"):
        next(broken)
    assert list(pb_utils.ResponseIterator(iter([]))) == []


# --- execute-side requests and response senders -------------------------------------------------


class Transport:
    def __init__(self) -> None:
        self.sent: list[tuple[pb_utils.InferenceResponse | None, int]] = []
        self.cancelled = False

    def send(self, response: pb_utils.InferenceResponse | None, flags: int) -> None:
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return self.cancelled

    def abandoned(self) -> None:
        self.sent.append((None, -1))


def received(decoupled: bool) -> tuple[pb_utils.InferenceRequest, Transport]:
    transport = Transport()
    sender = pb_utils.InferenceResponseSender(transport, decoupled=decoupled)
    request = pb_utils.new_execute_request(
        inputs=[pb_utils.Tensor("IN", np.ones(2, np.float32))],
        requested_output_names=["OUT"],
        request_id="rid7",
        correlation_id=12,
        timeout=1000,
        parameters={"pk": "pv", "n": 3},
        response_sender=sender,
        is_cancelled=lambda: transport.cancelled,
    )
    return request, transport


def test_received_request_looks_like_tritons() -> None:
    request, transport = received(decoupled=False)
    assert request.request_id() == "rid7" and request.correlation_id() == 12 and request.timeout() == 1000
    assert request.parameters() == '{"pk":"pv","n":3}'  # compact, as real Triton hands it over
    assert request.requested_output_names() == {"OUT"}
    assert request.get_response_sender() is request.get_response_sender()
    assert not request.is_cancelled()
    transport.cancelled = True
    assert request.is_cancelled() and request.get_response_sender().is_cancelled()
    assert pb_utils.release_flags(request) == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert pb_utils.release_flags(request) == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def test_decoupled_sender_sends_many_then_final() -> None:
    request, transport = received(decoupled=True)
    sender = request.get_response_sender()
    response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ones(2, np.float32))])
    sender.send(response)
    sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert [flags for _, flags in transport.sent] == [0, 0, 1] and transport.sent[2][0] is None
    assert sender.closed and sender.response_count == 3
    with pytest.raises(pb_utils.TritonModelException, match="Response sender has been closed"):
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_a_decoupled_sender_dropped_before_its_final_flag_tells_the_server() -> None:
    """Dropping it (the model's thread raised) ends the request: the transport hears it once; a
    closed sender, or a default model's, says nothing when dropped."""
    for decoupled, final, told in ((True, False, True), (True, True, False), (False, False, False)):
        transport = Transport()
        sender = pb_utils.InferenceResponseSender(transport, decoupled=decoupled)
        sender.send(pb_utils.InferenceResponse([]))
        if final:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        del sender  # its last reference: CPython finalizes it here
        assert ((None, -1) in transport.sent) is told, (decoupled, final)
        assert transport.sent.count((None, -1)) <= 1


def test_sender_rules_follow_triton() -> None:
    request, transport = received(decoupled=False)
    sender = request.get_response_sender()
    response = pb_utils.InferenceResponse([])
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag provided"):
        sender.send(response, flags=7)
    with pytest.raises(
        pb_utils.TritonModelException, match="must be provided when the response flags is set to zero"
    ):
        sender.send(None, 0)
    with pytest.raises(
        pb_utils.TritonModelException, match="cannot send complete final before sending a response"
    ):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    sender.send(response)
    with pytest.raises(pb_utils.TritonModelException, match="cannot send more than one response"):
        sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert len(transport.sent) == 2
    with pytest.raises(
        pb_utils.TritonModelException, match="only available on the requests passed to execute"
    ):
        bls_request().get_response_sender()


# --- config helpers -----------------------------------------------------------------------------------

ADD_SUB_PBTXT = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
"""


def model_config_json(pbtxt: str) -> dict[str, Any]:
    """What a model gets from json.loads(args["model_config"])."""
    config = text_format.Parse(pbtxt, model_config_pb2.ModelConfig())
    text = json_format.MessageToJson(config, preserving_proto_field_name=True)
    result: dict[str, Any] = json.loads(text)
    return result


def test_config_lookup_on_a_real_config() -> None:
    config = model_config_json(ADD_SUB_PBTXT)
    output1 = pb_utils.get_output_config_by_name(config, "OUTPUT1")
    assert output1 is not None and output1["data_type"] == "TYPE_INT32"
    assert pb_utils.triton_string_to_numpy(output1["data_type"]) == np.int32
    input0 = pb_utils.get_input_config_by_name(config, "INPUT0")
    assert input0 is not None and input0["data_type"] == "TYPE_FP32"
    assert pb_utils.get_output_config_by_name(config, "INPUT0") is None
    assert pb_utils.get_input_config_by_name({}, "INPUT0") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)
    decoupled = model_config_json(ADD_SUB_PBTXT + "model_transaction_policy { decoupled: true }")
    assert pb_utils.using_decoupled_model_transaction_policy(decoupled)


# --- ModelConfig --------------------------------------------------------------------------------------


def test_model_config_conflicts_raise_tritons_messages() -> None:
    config = pb_utils.ModelConfig(json.dumps(model_config_json(ADD_SUB_PBTXT)))
    assert config.as_dict()["input"][0]["dims"] == [4]  # int64 strings from protobuf JSON become numbers
    with pytest.raises(
        ValueError,
        match="configuration expects datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT32",
    ):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(
        ValueError, match=r"the model expects dims \[8\] but the model configuration specifies dims \[4\]"
    ):
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [8]})
    with pytest.raises(
        ValueError,
        match=re.escape("contains property other than 'name', 'data_type', 'dims' and 'optional'."),
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "format": "FORMAT_NCHW"})
    with pytest.raises(
        ValueError, match=re.escape("contains property other than 'name', 'data_type' and 'dims'.")
    ):
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "input 'X' in auto-complete-config function for model 'add_sub' is missing 'dims' property."
        ),
    ):
        config.add_input({"name": "X", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="is missing 'name' property"):
        config.add_output({"data_type": "TYPE_FP32", "dims": [1]})
    with pytest.raises(
        ValueError,
        match="configuration specified max_batch_size 8, but in auto-complete-config function for model 'add_sub' specified max_batch_size 4",
    ):
        config.set_max_batch_size(4)
    config.set_max_batch_size(16)
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        config.set_model_transaction_policy({"other": 1})
    sequence = pb_utils.ModelConfig({"name": "s", "sequence_batching": {}})
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        sequence.set_dynamic_batching()


def test_model_config_completes_a_partial_input() -> None:
    config = pb_utils.ModelConfig(
        {"name": "m", "input": [{"name": "IN", "data_type": "TYPE_INVALID", "dims": []}]}
    )
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [-1], "optional": True})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]})  # the same again is fine
    assert config.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [-1], "optional": True}
    ]
    with pytest.raises(
        ValueError,
        match="the model expects optional False but the model configuration specifies optional True",
    ):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [-1], "optional": False})
    config.set_dynamic_batching()
    config.set_dynamic_batching()
    assert config.as_dict()["dynamic_batching"] == {} and config.as_dict()["max_batch_size"] == 0


# --- logging, metrics, model management, model dir ------------------------------------------------


def test_logger_writes_to_python_logging_with_the_callers_location(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="tcli.python_model")
    scope = pb_utils.ModelScope("add_sub", "1", "/models/add_sub/1")
    with pb_utils.model_scope(scope):
        pb_utils.Logger.log_info("info line")
        pb_utils.Logger.log_warn("warn line")
        pb_utils.Logger.log_error("error line")
        pb_utils.Logger.log_verbose("verbose line")
        pb_utils.Logger.log("explicit", pb_utils.Logger.WARNING)
    records = [r for r in caplog.records if r.name == "tcli.python_model"]
    levels = [(r.levelname, r.getMessage()) for r in records]
    assert levels == [
        ("INFO", "info line"),
        ("WARNING", "warn line"),
        ("ERROR", "error line"),
        ("DEBUG", "verbose line"),
        ("WARNING", "explicit"),
    ]
    assert {Path(r.pathname).name for r in records} == {"test_pb_utils.py"}  # the caller, not pb_utils
    assert {getattr(r, "model_name", None) for r in records} == {"add_sub"}


def test_counter_and_gauge_metrics() -> None:
    family = pb_utils.MetricFamily("tcli_test_requests", "Requests seen", pb_utils.MetricFamily.COUNTER)
    first = family.Metric(labels={"route": "a"})
    same = family.Metric(labels={"route": "a"})
    first.increment(2)
    assert same.value() == 2.0  # equal labels are the same series
    with pytest.raises(
        pb_utils.TritonModelException, match="can only be incremented monotonically by non-negative values"
    ):
        first.increment(-1)
    with pytest.raises(
        pb_utils.TritonModelException, match="TRITONSERVER_METRIC_KIND_COUNTER does not support Set"
    ):
        first.set(5)
    gauge_family = pb_utils.MetricFamily("tcli_test_queue", "Queue depth", pb_utils.MetricFamily.GAUGE)
    gauge = gauge_family.Metric()
    gauge.set(10)
    gauge.increment(-3)
    assert gauge.value() == 7.0
    with pytest.raises(pb_utils.TritonModelException, match="GAUGE does not support Observe"):
        gauge.observe(1)
    text = pb_utils.METRICS.render_prometheus()
    assert "# HELP tcli_test_requests Requests seen\n# TYPE tcli_test_requests counter\n" in text
    assert 'tcli_test_requests{route="a"} 2\n' in text and "tcli_test_queue 7\n" in text
    del first, same, family
    gc.collect()
    assert "tcli_test_requests" not in {f.name for f in pb_utils.METRICS.collect()}


def test_histogram_metric() -> None:
    family = pb_utils.MetricFamily("tcli_test_latency", "Latency", pb_utils.MetricFamily.HISTOGRAM)
    histogram = family.Metric(labels={"model": "m"}, buckets=[0.1, 1.0])
    for value in (0.05, 0.5, 3.0):
        histogram.observe(value)
    (snapshot,) = [f for f in pb_utils.METRICS.collect() if f.name == "tcli_test_latency"]
    (sample,) = snapshot.samples
    assert snapshot.kind == "histogram" and sample.bucket_counts == (1, 2) and sample.count == 3
    assert sample.sum == pytest.approx(3.55)
    text = pb_utils.METRICS.render_prometheus()
    assert 'tcli_test_latency_bucket{model="m",le="0.1"} 1\n' in text
    assert 'tcli_test_latency_bucket{model="m",le="+Inf"} 3\n' in text
    assert 'tcli_test_latency_count{model="m"} 3\n' in text
    with pytest.raises(pb_utils.TritonModelException, match="HISTOGRAM does not support Value"):
        histogram.value()
    with pytest.raises(pb_utils.TritonModelException, match="Missing required buckets"):
        family.Metric()


def test_metric_refusals() -> None:
    gauge = pb_utils.MetricFamily("tcli_test_refusals", "d", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match="Unexpected buckets found"):
        gauge.Metric(buckets=[1.0])
    with pytest.raises(pb_utils.TritonModelException, match="Labels must be a dictionary"):
        gauge.Metric(labels=[1])  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="attempt to access JSON non-string as string"):
        gauge.Metric(labels={"a": 1})  # type: ignore[dict-item]
    with pytest.raises(pb_utils.TritonModelException, match="Invalid label name"):
        gauge.Metric(labels={"bad label": "x"})
    with pytest.raises(pb_utils.TritonModelException, match="Family name already exists with different type"):
        pb_utils.MetricFamily("tcli_test_refusals", "d", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(pb_utils.TritonModelException, match="Invalid metric name"):
        pb_utils.MetricFamily("bad name!", "d", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(TypeError):
        pb_utils.MetricFamily("tcli_test_kind", "d", 1)  # type: ignore[arg-type]


def test_model_management_needs_the_server() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to load model: "):
        pb_utils.load_model("other")
    with pytest.raises(pb_utils.TritonModelException, match=r"^Failed to check model readiness: "):
        pb_utils.is_model_ready("other")

    class Manager:
        def __init__(self) -> None:
            self.calls: list[tuple[Any, ...]] = []

        def load_model(self, model_name: str, config: str, files: dict[str, bytes]) -> None:
            if model_name == "broken":
                raise RuntimeError("load failed: no version is available")
            self.calls.append(("load", model_name, config, files))

        def unload_model(self, model_name: str, unload_dependents: bool) -> None:
            self.calls.append(("unload", model_name, unload_dependents))

        def is_model_ready(self, model_name: str, model_version: int) -> bool:
            self.calls.append(("ready", model_name, model_version))
            return True

    manager = Manager()
    pb_utils.set_model_manager(manager)
    pb_utils.load_model("other", config='{"backend": "python"}', files={"file:1/model.py": b"x"})
    pb_utils.unload_model("other", unload_dependents=True)
    assert pb_utils.is_model_ready("other") and pb_utils.is_model_ready("other", "3")
    assert manager.calls == [
        ("load", "other", '{"backend": "python"}', {"file:1/model.py": b"x"}),
        ("unload", "other", True),
        ("ready", "other", -1),
        ("ready", "other", 3),
    ]
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^Failed to load model: load failed: no version"
    ):
        pb_utils.load_model("broken")
    with pytest.raises(pb_utils.TritonModelException, match="version should be an integral value > 0"):
        pb_utils.is_model_ready("other", "latest")


def test_get_model_dir_inside_and_outside_a_model() -> None:
    with pb_utils.model_scope(pb_utils.ModelScope("m", "1", "/repo/m/1")):
        assert pb_utils.get_model_dir() == "/repo/m/1"
    with pytest.raises(pb_utils.TritonModelException, match="only available while the server runs the model"):
        pb_utils.get_model_dir()


def test_models_import_the_same_module_object() -> None:
    import triton_python_backend_utils

    assert triton_python_backend_utils is pb_utils
    assert triton_python_backend_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert int(pb_utils.TRITONSERVER_MEMORY_CPU) == 1 and int(pb_utils.TRITONSERVER_MEMORY_GPU) == 0


# names real Triton 2.51 puts in triton_python_backend_utils (dir() inside its stub)
TRITON_251_NAMES = [
    "InferenceRequest",
    "InferenceResponse",
    "Logger",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "json",
    "load_model",
    "np",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]


def test_every_name_triton_offers_is_there() -> None:
    assert [name for name in TRITON_251_NAMES if not hasattr(pb_utils, name)] == []


def test_a_triton_model_file_runs_unchanged(tmp_path: Path) -> None:
    from server.backends.python.model_import import import_model_file

    model_file = tmp_path / "add_sub" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text(PYTHON_ADD_SUB)
    module = import_model_file(model_file, "add_sub")
    model = module.TritonPythonModel()
    config = model_config_json(ADD_SUB_PBTXT)
    model.initialize({"model_config": json.dumps(config), "model_name": "add_sub", "model_version": "1"})
    requests = [
        pb_utils.new_execute_request(
            inputs=[
                pb_utils.Tensor("INPUT0", np.full((1, 4), float(i), np.float32)),
                pb_utils.Tensor("INPUT1", np.ones((1, 4), np.float32)),
            ],
            requested_output_names=["OUTPUT0", "OUTPUT1"],
        )
        for i in range(3)
    ]
    responses = model.execute(requests)
    assert len(responses) == 3
    for i, response in enumerate(responses):
        out0 = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        out1 = pb_utils.get_output_tensor_by_name(response, "OUTPUT1")
        assert out0 is not None and out0.as_numpy().tolist() == [[i + 1.0] * 4]
        assert out1 is not None and out1.as_numpy().dtype == np.int32  # cast to the configured type
        assert out1.as_numpy().tolist() == [[i - 1] * 4]


PYTHON_ADD_SUB = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        out0 = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        out1 = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.out0_dtype = pb_utils.triton_string_to_numpy(out0["data_type"])
        self.out1_dtype = pb_utils.triton_string_to_numpy(out1["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0 = in_0.as_numpy() + in_1.as_numpy()
            out_1 = in_0.as_numpy() - in_1.as_numpy()
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.out0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.out1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("Cleaning up...")
"""


# --- the facade over server/backends/python/pb_utils/ ------------------------------------------------

# what a Triton python model reaches for; the facade must keep offering every one
MODEL_API_NAMES = [
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

# every public name of the module when it was one file: its own definitions, the host API, and `json`
# and `np`, which Triton's module imports too (the standard-library and typing names it happened to import
# are gone: no model of Triton's could reach them there)
ONE_FILE_PUBLIC_NAMES = [
    "BLSExecutor",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "METRICS",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricFamilySnapshot",
    "MetricKind",
    "MetricRegistry",
    "MetricSample",
    "ModelConfig",
    "ModelManager",
    "ModelScope",
    "PreferredMemory",
    "ResponseIterator",
    "ResponseTransport",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "TYPE_BF16",
    "TYPE_BOOL",
    "TYPE_BYTES",
    "TYPE_INVALID",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "config_to_dtype",
    "current_model_scope",
    "deserialize_bytes_tensor",
    "dtype_to_wire",
    "error_code_name",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "json",
    "load_model",
    "model_scope",
    "new_execute_request",
    "np",
    "numpy_to_triton_type",
    "release_flags",
    "request_parameters",
    "response_parameters",
    "serialize_byte_tensor",
    "set_bls_executor",
    "set_default_model_scope",
    "set_model_manager",
    "tensor_from_storage",
    "tensor_storage",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
    "wire_to_dtype",
]


def test_the_facade_offers_the_model_api() -> None:
    assert [name for name in MODEL_API_NAMES if not hasattr(pb_utils, name)] == []
    kinds = (pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE, pb_utils.MetricFamily.HISTOGRAM)
    assert [int(kind) for kind in kinds] == [0, 1, 2]
    assert pb_utils.Logger.LogLevel is pb_utils.LogLevel
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


def test_the_facade_keeps_every_public_name_of_the_one_file_module() -> None:
    public = {name for name in dir(pb_utils) if not name.startswith("_")}
    assert public == set(ONE_FILE_PUBLIC_NAMES)
    assert sorted(pb_utils.__all__) == sorted(ONE_FILE_PUBLIC_NAMES)  # `import *` gives what it gave


def test_state_lives_once_in_the_module_that_owns_it() -> None:
    from server.backends.python.pb_utils import metric_registry, model_control, requests, scope

    for name in ("_bls_executor", "_bls_async_executor", "_model_manager", "_default_scope", "_MODEL_SCOPE"):
        assert not hasattr(pb_utils, name), f"{name} copied into the facade"
    assert pb_utils.METRICS is metric_registry.METRICS

    def executor(request: Any, model_name: str, model_version: int, decoupled: bool) -> Any:
        return pb_utils.InferenceResponse([])

    pb_utils.set_bls_executor(executor)  # through the facade: the owning module sees it
    assert requests._bls_executor is executor
    requests.set_bls_executor(None)  # through the owner: the facade's classes see it
    with pytest.raises(pb_utils.TritonModelException, match="no BLS executor is installed"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[]).exec()
    manager = object()
    pb_utils.set_model_manager(manager)  # type: ignore[arg-type]
    assert model_control._model_manager is manager
    scope.set_default_model_scope(scope.ModelScope("m", "1", "/repo/m/1"))
    try:
        assert pb_utils.get_model_dir() == "/repo/m/1"
    finally:
        pb_utils.set_default_model_scope(None)
    assert scope._default_scope is None


def test_every_pb_utils_module_says_its_one_concept_and_stays_short() -> None:
    import ast

    folder = Path(pb_utils.__file__).parent / "pb_utils"
    modules = sorted(folder.glob("*.py"))
    assert len(modules) > 10
    for path in modules:
        text = path.read_text()
        assert ast.get_docstring(ast.parse(text)), f"{path.name} has no docstring"
        assert text.count("\n") < 300, f"{path.name} is {text.count(chr(10))} lines"


FACADE_PROBE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    PB_UTILS = pb_utils

    def execute(self, requests):
        return [pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[]).exec()]
"""


def test_a_model_and_the_server_share_one_module_and_its_hooks(tmp_path: Path) -> None:
    import sys

    from server.backends.python.model_import import import_model_file
    from server.backends.python.pb_utils import requests

    model_file = tmp_path / "probe" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text(FACADE_PROBE_MODEL)
    model = import_model_file(model_file, "probe").TritonPythonModel()
    assert model.PB_UTILS is pb_utils
    assert sys.modules["triton_python_backend_utils"] is sys.modules[pb_utils.__name__] is pb_utils

    calls: list[str] = []

    def executor(request: Any, model_name: str, model_version: int, decoupled: bool) -> Any:
        calls.append(model_name)
        return pb_utils.InferenceResponse([])

    requests.set_bls_executor(executor)  # installed as tcli's server does
    (response,) = model.execute([])
    assert calls == ["other"] and isinstance(response, pb_utils.InferenceResponse)
