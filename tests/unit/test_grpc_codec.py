"""The protobuf codec of the gRPC front end: what the real tritonclient.grpc builds decodes to the same
tensors and parameters, what the codec encodes tritonclient reads back, typed `contents` work for every
datatype that has a field, and malformed requests fail with Triton's messages as INVALID_ARG."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._utils import _get_inference_request

from server.protocol import grpc_codec as codec
from server.protocol import grpc_messages as messages
from server.protocol.config_json import from_json_dict
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.grpc_parameters import model_version
from server.protocol.messages import ModelConfigResponse, ModelStatisticsResponse
from server.protocol.tensors import SHM_DISABLED
from server.protocol.types import InferenceResponse, RequestedOutput, Tensor
from server.scheduling.stats import ModelStats

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
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
CONTENT_FIELD = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def client_request(inputs: list[grpcclient.InferInput], **kwargs: Any) -> Any:
    """The ModelInferRequest tritonclient.grpc sends."""
    options: dict[str, Any] = {
        "model_version": "",
        "request_id": "",
        "outputs": None,
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout": None,
        "parameters": None,
    }
    options.update(kwargs)
    return _get_inference_request(model_name="m", inputs=inputs, **options)


def client_input(name: str, array: np.ndarray[Any, Any], datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def typed_input(name: str, datatype: str, shape: list[int], **contents: Any) -> Any:
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    for field, values in contents.items():
        getattr(tensor.contents, field).extend(values)
    return tensor


def error_of(call: Any, *args: Any, **kwargs: Any) -> TritonError:
    with pytest.raises(TritonError) as caught:
        call(*args, **kwargs)
    return caught.value


def invalid(message: Any, shm: Any = None) -> str:
    error = error_of(codec.decode_infer_request, message, shm)
    assert error.code == ErrorCode.INVALID_ARG
    return error.message


# ------------------------------------------------------------------------------------------ raw inputs
@pytest.mark.parametrize("datatype", sorted(NUMERIC))
def test_raw_inputs_of_every_datatype_decode_to_equal_arrays(datatype: str) -> None:
    array = (np.arange(12) % 7).astype(NUMERIC[datatype]).reshape(3, 4)
    request, empty_final = codec.decode_infer_request(client_request([client_input("X", array, datatype)]))
    tensor = request.inputs[0]
    assert (tensor.name, tensor.datatype, tensor.shape) == ("X", datatype, (3, 4))
    assert tensor.data.dtype == array.dtype
    np.testing.assert_array_equal(tensor.data, array)
    assert empty_final is False


def test_raw_inputs_are_views_on_the_request_bytes_not_copies() -> None:
    message = client_request([client_input("X", np.arange(1024, dtype=np.float32), "FP32")])
    request, _ = codec.decode_infer_request(message)
    assert request.inputs[0].data.base is not None
    assert not request.inputs[0].data.flags.owndata


def test_bytes_input_round_trips_arbitrary_bytes() -> None:
    array = np.array([[b"ab", b"\xff\x00", b""]], dtype=object)
    request, _ = codec.decode_infer_request(client_request([client_input("S", array, "BYTES")]))
    tensor = request.inputs[0]
    assert tensor.shape == (1, 3)
    assert tensor.data.dtype == object
    assert tensor.data.tolist() == [[b"ab", b"\xff\x00", b""]]


def test_bf16_travels_as_its_uint16_bits() -> None:
    bits = np.array([0x3F80, 0xC000], dtype=np.uint16)  # 1.0, -2.0
    message = client_request([])
    message.inputs.add(name="B", datatype="BF16", shape=[2])
    message.raw_input_contents.append(bits.tobytes())
    request, _ = codec.decode_infer_request(message)
    np.testing.assert_array_equal(request.inputs[0].data, bits)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(NUMERIC)).flatmap(
        lambda datatype: st.tuples(
            st.just(datatype),
            hnp.arrays(NUMERIC[datatype], hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
        )
    )
)
def test_any_numeric_array_round_trips_through_request_and_response(case: tuple[str, Any]) -> None:
    datatype, array = case
    request, _ = codec.decode_infer_request(client_request([client_input("X", array, datatype)]))
    decoded = request.inputs[0].data
    np.testing.assert_array_equal(decoded, array)
    response = InferenceResponse("m", "1", outputs=[Tensor("Y", datatype, array.shape, decoded)])
    result = grpcclient.InferResult(codec.encode_infer_response(response))
    back = result.as_numpy("Y")
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)


# ------------------------------------------------------------------------------------------ typed contents
@pytest.mark.parametrize("datatype", sorted(CONTENT_FIELD))
def test_typed_contents_of_every_datatype_decode_to_equal_arrays(datatype: str) -> None:
    values = [1, 0, 1, 1] if datatype == "BOOL" else [0, 1, 5, 7]
    message = client_request([])
    message.inputs.append(typed_input("X", datatype, [2, 2], **{CONTENT_FIELD[datatype]: values}))
    request, _ = codec.decode_infer_request(message)
    tensor = request.inputs[0]
    expected = np.array(values).astype(NUMERIC[datatype]).reshape(2, 2)
    assert tensor.data.dtype == expected.dtype
    np.testing.assert_array_equal(tensor.data, expected)


def test_typed_bytes_contents() -> None:
    message = client_request([])
    message.inputs.append(typed_input("S", "BYTES", [1, 2], bytes_contents=[b"ab", b"\x00"]))
    request, _ = codec.decode_infer_request(message)
    assert request.inputs[0].data.tolist() == [[b"ab", b"\x00"]]


def test_narrow_integers_keep_the_low_bytes_of_the_32_bit_values_as_triton_does() -> None:
    message = client_request([])
    message.inputs.append(typed_input("X", "INT8", [3], int_contents=[1, 255, -129]))
    message.inputs.append(typed_input("Y", "UINT16", [2], uint_contents=[65537, 2]))
    request, _ = codec.decode_infer_request(message)
    assert request.inputs[0].data.tolist() == [1, -1, 127]
    assert request.inputs[1].data.tolist() == [1, 2]


def test_typed_contents_in_the_wrong_field_are_refused_with_tritons_message() -> None:
    message = client_request([])
    message.inputs.append(typed_input("INPUT0", "FP32", [4], int_contents=[1, 2, 3, 4]))
    assert invalid(message) == (
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'm' of type 'INT32', "
        "expected datatype 'FP32'"
    )


def test_fp16_has_no_typed_field() -> None:
    message = client_request([])
    message.inputs.append(typed_input("INPUT0", "FP16", [2], fp32_contents=[1.0, 2.0]))
    assert invalid(message).endswith("of type 'FP32', expected datatype 'FP16'")


def test_unknown_datatype_in_typed_contents() -> None:
    message = client_request([])
    message.inputs.append(typed_input("INPUT0", "FP99", [1], fp32_contents=[1.0]))
    assert invalid(message).endswith("of type 'FP32', expected datatype '<invalid>'")


def test_two_typed_fields_for_one_input_are_refused() -> None:
    message = client_request([])
    message.inputs.append(typed_input("X", "INT32", [2], int_contents=[1, 2], int64_contents=[1, 2]))
    assert invalid(message) == (
        "unexpected explicit tensor data for input tensor 'X' for model 'm', binary data was already supplied."
    )


def test_typed_contents_with_too_few_values() -> None:
    message = client_request([], request_id="r7")
    message.inputs.append(typed_input("INPUT0", "FP32", [4], fp32_contents=[1.0, 2.0, 3.0]))
    assert invalid(message) == (
        "[request id: r7] input byte size mismatch for input 'INPUT0' for model 'm'. Expected 16, got 12"
    )


def test_contents_and_raw_contents_must_not_be_mixed() -> None:
    message = client_request([client_input("A", np.zeros(2, np.float32), "FP32")])
    message.inputs.append(typed_input("B", "FP32", [2], fp32_contents=[1.0, 2.0]))
    assert invalid(message) == (
        "contents field must not be specified when using raw_input_contents for 'B' for model 'm'"
    )


# ------------------------------------------------------------------------------------------ malformed raw
def test_raw_contents_of_the_wrong_size() -> None:
    message = client_request([client_input("INPUT0", np.zeros(4, np.float32), "FP32")])
    message.raw_input_contents[0] = message.raw_input_contents[0][:12]
    assert invalid(message) == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'm'. "
        "Expected 16, got 12"
    )


def test_missing_raw_contents() -> None:
    message = client_request(
        [
            client_input("INPUT0", np.zeros(4, np.float32), "FP32"),
            client_input("INPUT1", np.zeros(4, np.float32), "FP32"),
        ]
    )
    del message.raw_input_contents[1]
    assert invalid(message) == "unable to find data for input tensor 'INPUT1' for model 'm' in request."


def bytes_message(raw: bytes, shape: list[int]) -> Any:
    message = client_request([])
    message.inputs.add(name="INPUT0", datatype="BYTES", shape=shape)
    message.raw_input_contents.append(raw)
    return message


def test_bytes_with_a_cut_length_prefix() -> None:
    raw = struct.pack("<I", 2) + b"ab" + b"\x01\x00"
    assert invalid(bytes_message(raw, [2])) == (
        "[request id: <id_unknown>] incomplete string length indicator for inference input 'INPUT0' for "
        "model 'm', expecting 4 bytes but only 2 bytes available. Please make sure the string length "
        "indicator is in one buffer."
    )


def test_bytes_with_cut_data() -> None:
    raw = struct.pack("<I", 5) + b"ab"
    assert invalid(bytes_message(raw, [1])) == (
        "incomplete string data for inference input 'INPUT0', expecting string of length 5 but only 2 "
        "bytes available"
    )


def test_bytes_with_too_few_and_too_many_elements() -> None:
    one = struct.pack("<I", 1) + b"a"
    assert invalid(bytes_message(one, [2])) == (
        "[request id: <id_unknown>] expected 2 string elements for inference input 'INPUT0' for model "
        "'m', got 1"
    )
    assert invalid(bytes_message(one * 3, [2])) == (
        "[request id: <id_unknown>] unexpected number of string elements 3 for inference input 'INPUT0' "
        "for model 'm', expecting 2"
    )


def test_negative_dimensions_are_refused() -> None:
    message = bytes_message(struct.pack("<I", 1) + b"a", [-1, 1])
    assert "Dimensions must not be negative, got [-1,1]" in invalid(message)


def test_duplicate_inputs_are_refused() -> None:
    message = client_request(
        [client_input("X", np.zeros(1, np.int32), "INT32"), client_input("X", np.zeros(1, np.int32), "INT32")]
    )
    assert invalid(message) == "[request id: <id_unknown>] input 'X' already exists in request"


def test_an_unknown_datatype_is_left_for_the_core_to_name() -> None:
    message = client_request([])
    message.inputs.add(name="X", datatype="FP99", shape=[1])
    message.raw_input_contents.append(b"\x00" * 4)
    request, _ = codec.decode_infer_request(message)
    assert request.inputs[0].datatype == "<invalid>"


# ------------------------------------------------------------------------------------------ parameters
def test_request_parameters_as_tritonclient_sends_them() -> None:
    message = client_request(
        [],
        request_id="abc",
        model_version="2",
        sequence_id=42,
        sequence_start=True,
        sequence_end=False,
        priority=3,
        timeout=1000,
        parameters={"custom": "x", "flag": True, "n": 7, "ratio": 0.25},
    )
    request, _ = codec.decode_infer_request(message)
    assert (request.model_name, request.model_version, request.id) == ("m", "2", "abc")
    assert request.correlation_id == 42
    assert request.sequence_start and not request.sequence_end
    assert (request.priority, request.timeout_us) == (3, 1000)
    assert {k: request.parameters[k] for k in ("custom", "flag", "n", "ratio")} == {
        "custom": "x",
        "flag": True,
        "n": 7,
        "ratio": 0.25,  # a double_param, as Triton 2.51 takes it
    }


def test_string_sequence_ids() -> None:
    request, _ = codec.decode_infer_request(client_request([], sequence_id="corr-1", sequence_start=True))
    assert request.correlation_id == "corr-1"


def test_empty_final_response_flag() -> None:
    message = client_request([])
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    _, empty_final = codec.decode_infer_request(message)
    assert empty_final is True


@pytest.mark.parametrize(
    ("key", "field", "value", "message"),
    [
        (
            "sequence_id",
            "bool_param",
            True,
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        ),
        (
            "sequence_start",
            "int64_param",
            1,
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        (
            "priority",
            "string_param",
            "1",
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
        ),
        ("priority", "int64_param", -1, "invalid value for 'priority', expected value >= 0."),
        ("timeout", "string_param", "1", "invalid value type for 'timeout' parameter, expected int64_param."),
        (
            "custom",
            "uint64_param",
            15,
            "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param.",
        ),
        (
            "triton_x",
            "bool_param",
            True,
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
        ),
    ],
)
def test_bad_request_parameters(key: str, field: str, value: Any, message: str) -> None:
    request = client_request([])
    setattr(request.parameters[key], field, value)
    assert invalid(request) == message


@pytest.mark.parametrize(
    ("version", "expected"),
    [("", ""), ("1", "1"), ("1x", "1"), (" 3", "3"), ("+2", "2")],
)
def test_model_versions_read_as_triton_reads_them(version: str, expected: str) -> None:
    assert model_version(version) == expected


def test_bad_model_versions() -> None:
    assert error_of(model_version, "x").message == (
        "failed to get model version from specified version string 'x' (details: stol), version should "
        "be an integral value > 0"
    )
    assert error_of(model_version, "-1").message == (
        "invalid model version specified '-1' , version should be an integral value > 0"
    )
    assert "(details: stol)" in error_of(model_version, "99999999999999999999").message


# ------------------------------------------------------------------------------------------ outputs
def test_requested_outputs_and_classification() -> None:
    outputs = [grpcclient.InferRequestedOutput("A"), grpcclient.InferRequestedOutput("B", class_count=3)]
    request, _ = codec.decode_infer_request(client_request([], outputs=outputs))
    assert [(o.name, o.class_count) for o in request.outputs] == [("A", 0), ("B", 3)]


def test_bad_classification_parameters() -> None:
    request = client_request([])
    request.outputs.add(name="A").parameters["classification"].string_param = "2"
    assert invalid(request) == "invalid value type for 'classification' parameter, expected int64_param"
    request = client_request([])
    request.outputs.add(name="A").parameters["classification"].int64_param = 0
    assert invalid(request) == "invalid value for 'classification' parameter, expected >= 0"


def test_shared_memory_parameters_are_checked() -> None:
    request = client_request([])
    request.outputs.add(name="A").parameters["shared_memory_byte_size"].int64_param = 8
    assert invalid(request) == (
        "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for "
        "tensor 'A'"
    )
    request = client_request([])
    request.outputs.add(name="A").parameters["shared_memory_region"].string_param = "r"
    assert invalid(request) == (
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
        "tensor 'A'"
    )


def test_shared_memory_without_client_shm_enabled() -> None:
    request = client_request([])
    output = request.outputs.add(name="A")
    output.parameters["shared_memory_region"].string_param = "r"
    output.parameters["shared_memory_byte_size"].int64_param = 8
    error = error_of(codec.decode_infer_request, request, None)
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, SHM_DISABLED)


def test_shared_memory_inputs_and_outputs_use_the_views_given() -> None:
    region = bytearray(64)
    np.frombuffer(region, np.float32, 4)[:] = [1, 2, 3, 4]

    def view(name: str, offset: int, byte_size: int) -> memoryview:
        assert name == "r"
        return memoryview(region)[offset : offset + byte_size]

    tensor = grpcclient.InferInput("X", [4], "FP32")
    tensor.set_shared_memory("r", 16)
    output = grpcclient.InferRequestedOutput("Y")
    output.set_shared_memory("r", 16, offset=32)
    request, _ = codec.decode_infer_request(client_request([tensor], outputs=[output]), view)
    np.testing.assert_array_equal(request.inputs[0].data, [1, 2, 3, 4])
    result = np.arange(4, dtype=np.float32) * 10
    response = InferenceResponse("m", "1", outputs=[Tensor("Y", "FP32", (4,), result)])
    message = codec.encode_infer_response(response, request.outputs, view)
    assert list(message.raw_output_contents) == [b""]
    assert (message.outputs[0].name, list(message.outputs[0].shape)) == ("Y", [4])
    np.testing.assert_array_equal(np.frombuffer(region, np.float32, 4, 32), result)


# ------------------------------------------------------------------------------------------ responses
def test_response_for_tritonclient() -> None:
    response = InferenceResponse(
        "m",
        "1",
        id="abc",
        outputs=[
            Tensor("F", "FP32", (2, 2), np.arange(4, dtype=np.float32).reshape(2, 2)),
            Tensor("S", "BYTES", (2,), np.array([b"x", b"\xff"], dtype=object)),
            Tensor("H", "FP16", (3,), np.array([0.5, 1, 2], dtype=np.float16)),
        ],
        parameters={"p": 1, "q": "s", "r": True},
    )
    message = codec.encode_infer_response(response)
    assert (message.model_name, message.model_version, message.id) == ("m", "1", "abc")
    assert len(message.raw_output_contents) == len(message.outputs) == 3
    result = grpcclient.InferResult(message)
    np.testing.assert_array_equal(result.as_numpy("F"), np.arange(4).reshape(2, 2))
    assert result.as_numpy("S").tolist() == [b"x", b"\xff"]
    np.testing.assert_array_equal(result.as_numpy("H"), np.array([0.5, 1, 2], dtype=np.float16))
    parameters = message.parameters
    assert (parameters["p"].int64_param, parameters["q"].string_param, parameters["r"].bool_param) == (
        1,
        "s",
        True,
    )


def test_outputs_of_another_dtype_are_converted_to_the_wire_type() -> None:
    response = InferenceResponse("m", "1", outputs=[Tensor("F", "FP32", (2,), np.array([1.5, 2.5]))])
    assert (
        codec.encode_infer_response(response).raw_output_contents[0]
        == np.array([1.5, 2.5], np.float32).tobytes()
    )


def test_stream_answers() -> None:
    final = codec.stream_response(codec.encode_infer_response(InferenceResponse("m", "1", id="a")))
    assert final.infer_response.parameters["triton_final_response"].bool_param is True
    assert final.error_message == ""
    error = codec.stream_error("boom", "a")
    assert (error.error_message, error.infer_response.id, error.infer_response.model_name) == (
        "boom",
        "a",
        "",
    )


def test_requested_output_defaults() -> None:
    assert RequestedOutput("x").class_count == 0


# ------------------------------------------------------------------------------------------ other RPCs
def test_config_and_statistics_of_the_service_answers() -> None:
    served = from_json_dict(
        {
            "name": "m",
            "max_batch_size": 8,
            "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [-1, 4]}],
        }
    )
    config = messages.model_config_response(ModelConfigResponse(served)).config
    assert (config.name, config.max_batch_size, list(config.input[0].dims)) == ("m", 8, [-1, 4])
    recorded = ModelStats("m", "1")
    recorded.record_execution(1, 0, 7, 0)
    recorded.record_execution(1, 0, 0, 0)
    recorded.record_execution(1, 0, 0, 0)
    for _ in range(3):
        recorded.record_success(1, 33, 0, 0, 0, 0)
    statistics = messages.statistics_response(ModelStatisticsResponse([recorded.statistics()]))
    stats = statistics.model_stats[0]
    assert (stats.inference_count, stats.inference_stats.success.ns, stats.batch_stats[0].batch_size) == (
        3,
        99,
        1,
    )


def test_log_settings_types() -> None:
    request = pb.LogSettingsRequest()
    request.settings["log_verbose_level"].uint32_param = 2
    request.settings["log_info"].bool_param = False
    request.settings["unknown"].bool_param = True
    assert messages.log_settings_changes(request) == {"log_verbose_level": 2, "log_info": False}
    request = pb.LogSettingsRequest()
    request.settings["log_verbose_level"].bool_param = True
    assert error_of(messages.log_settings_changes, request).message == "expect int32 for 'log_verbose_level'"
    request = pb.LogSettingsRequest()
    request.settings["log_error"].string_param = "x"
    assert error_of(messages.log_settings_changes, request).message == "expect boolean for 'log_error'"


def test_trace_settings() -> None:
    request = pb.TraceSettingRequest()
    request.settings["trace_rate"].value.append("5")
    request.settings["trace_count"].value[:] = []
    request.settings["trace_level"].value.extend(["TIMESTAMPS", "TENSORS"])
    request.settings["trace_mode"].value.append("opentelemetry")  # not settable through gRPC: ignored
    assert messages.trace_settings_changes(request) == {
        "trace_rate": "5",
        "trace_count": None,
        "trace_level": ["TIMESTAMPS", "TENSORS"],
    }
    request = pb.TraceSettingRequest()
    request.settings["trace_rate"].value.extend(["1", "2"])
    assert (
        error_of(messages.trace_settings_changes, request).message == "expect only 1 value for 'trace_rate'"
    )


def test_load_and_unload_parameters() -> None:
    request = pb.RepositoryModelLoadRequest(model_name="m")
    assert messages.load_parameters(request) == (None, {})
    request.parameters["config"].string_param = "{}"
    request.parameters["file:1/model.py"].bytes_param = b"pass"
    assert messages.load_parameters(request) == ("{}", {"file:1/model.py": b"pass"})
    request.parameters["file:1/model.py"].string_param = "pass"
    assert error_of(messages.load_parameters, request).message == (
        "invalid value type for load parameter 'file:1/model.py', expected bytes_param."
    )
    del request.parameters["file:1/model.py"]
    request.parameters["config"].int64_param = 1
    assert error_of(messages.load_parameters, request).message == (
        "invalid value type for load parameter 'config', expected string_param."
    )
    request = pb.RepositoryModelLoadRequest(model_name="m")
    request.parameters["foo"].string_param = "x"
    assert error_of(messages.load_parameters, request).message == "unrecognized load parameter 'foo'."
    unload = pb.RepositoryModelUnloadRequest(model_name="m")
    assert messages.unload_dependents(unload) is False
    unload.parameters["unload_dependents"].bool_param = True
    assert messages.unload_dependents(unload) is True
    unload.parameters["unload_dependents"].int64_param = 1
    assert error_of(messages.unload_dependents, unload).code == ErrorCode.INVALID_ARG
