"""Protobuf messages of `inference.GRPCInferenceService` <-> the core types: pure functions.

The messages are tritonclient's generated ones (`tritonclient.grpc.service_pb2`, `model_config_pb2`).
Inference requests become `InferenceRequest`s whose tensors are numpy views on the bytes objects
protobuf hands out for `raw_input_contents` (no further copy) or on shared memory, or arrays built
from the typed `contents` fields in C (no per-element Python work, BYTES aside); responses carry every output in `raw_output_contents`, as
Triton's do. The other RPCs go through the same dict forms the core facade gives the HTTP front end.

Checks and messages follow Triton's gRPC front end (server/src/grpc/infer_handler.cc, grpc_utils.h,
grpc_server.cc) and, for what its core checks on the tensor data (byte sizes, BYTES elements), the
gRPC answers of the real Triton 2.51; every failure is a TritonError with Triton's code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc import service_pb2 as pb

from server.protocol import datatypes
from server.protocol.bytes_tensor import serialize_bytes, split_bytes
from server.protocol.errors import TritonError, internal, invalid_arg, not_found, unavailable, unsupported
from server.protocol.json_codec import SHM_DISABLED
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

ShmView = Callable[[str, int, int], memoryview]
"""(region name, offset, byte size) -> a writable view of exactly those bytes of a registered region."""

MAX_GRPC_MESSAGE_SIZE = 2**31 - 1  # INT32_MAX, Triton's MAX_GRPC_MESSAGE_SIZE
RESERVED_REQUEST_PARAMETERS = ("triton_enable_empty_final_response",)
FINAL_RESPONSE = "triton_final_response"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MOD = 2**64

_DTYPES = datatypes.raw_dtypes()
_INVALID = "<invalid>"  # how Triton prints a datatype it does not know

# InferTensorContents fields in the order Triton reads them: (field, the datatypes it may carry, the
# numpy dtype its values are read as, the datatype named when it does not fit). int_contents and
# uint_contents carry the 8- and 16-bit types as 32-bit values of which the low bytes count.
_CONTENT_FIELDS: tuple[tuple[str, frozenset[str], str, str], ...] = (
    ("bool_contents", frozenset({"BOOL"}), "?", "BOOL"),
    ("int_contents", frozenset({"INT8", "INT16", "INT32"}), "<i4", "INT32"),
    ("int64_contents", frozenset({"INT64"}), "<i8", "INT64"),
    ("uint_contents", frozenset({"UINT8", "UINT16", "UINT32"}), "<u4", "UINT32"),
    ("uint64_contents", frozenset({"UINT64"}), "<u8", "UINT64"),
    ("fp32_contents", frozenset({"FP32"}), "<f4", "FP32"),
    ("fp64_contents", frozenset({"FP64"}), "<f8", "FP64"),
    ("bytes_contents", frozenset({"BYTES"}), "O", "BYTES"),
)

_InferInput = pb.ModelInferRequest.InferInputTensor
_OutputTensor = pb.ModelInferResponse.InferOutputTensor
_EMPTY_PARAMS: dict[str, Any] = {}


def _prefix(request_id: str) -> str:
    return f"[request id: {request_id or '<id_unknown>'}] "


def _fmt(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# ------------------------------------------------------------------------------------------ numbers
def _leading_integer(text: str) -> int | None:
    """The integer std::stol/stoi read at the start of `text` (leading whitespace, an optional sign,
    digits; the rest is ignored), or None when there is none."""
    stripped = text.lstrip(" \t\n\v\f\r")
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit() and stripped[end].isascii():
        end += 1
    digits = stripped[:end]
    if not digits or digits in ("+", "-"):
        return None
    return int(digits)


def model_version(version: str) -> str:
    """The model version a request names, as the core takes it ("" = the latest ready one); Triton's
    GetModelVersionFromString rules and messages."""
    if not version:
        return ""
    number = _leading_integer(version)
    if number is None or not _INT64_MIN <= number <= _INT64_MAX:
        raise invalid_arg(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )
    if number < 0:
        raise invalid_arg(
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return str(number)


# ------------------------------------------------------------------------------------------ parameters
def parameter_value(parameter: Any) -> Any:
    """The Python value of an InferParameter (None when no value is set)."""
    which = parameter.WhichOneof("parameter_choice")
    return None if which is None else getattr(parameter, which)


def set_parameter(parameter: Any, value: Any) -> None:
    """Fill an InferParameter from a Python value."""
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        if value > _INT64_MAX:
            parameter.uint64_param = value
        else:
            parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


def _request_parameters(parameters: Any) -> tuple[dict[str, Any], bool]:
    """Request parameters for the core, and the triton_enable_empty_final_response flag."""
    result: dict[str, Any] = {}
    empty_final = False
    for key, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if which == "int64_param":
                value = parameter.int64_param
                result[key] = value if value >= 0 else value + _UINT64_MOD  # Triton keeps it as uint64
            elif which == "string_param":
                result[key] = parameter.string_param
            else:
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if which != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            result[key] = parameter.bool_param
        elif key == "priority":
            if which == "int64_param":
                if parameter.int64_param < 0:
                    raise invalid_arg("invalid value for 'priority', expected value >= 0.")
                result[key] = parameter.int64_param
            elif which == "uint64_param":
                result[key] = parameter.uint64_param
            else:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
                )
        elif key == "timeout":
            if which != "int64_param":
                raise invalid_arg("invalid value type for 'timeout' parameter, expected int64_param.")
            result[key] = parameter.int64_param
        elif key.startswith("triton_"):
            if key not in RESERVED_REQUEST_PARAMETERS:
                raise invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                    "following keys starting with 'triton_' are allowed: "
                    + " ".join(RESERVED_REQUEST_PARAMETERS)
                )
            if which != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            empty_final = parameter.bool_param
        elif which in ("int64_param", "bool_param", "string_param"):
            result[key] = getattr(parameter, which)
        else:
            raise invalid_arg(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, or "
                "string_param."
            )
    return result, empty_final


def _shared_memory(tensor: Any) -> tuple[str, int, int] | None:
    """(region, offset, byte size) when a tensor's parameters name a shared memory region; Triton's
    ParseSharedMemoryParams checks and messages."""
    parameters = tensor.parameters
    region: str | None = None
    if "shared_memory_region" in parameters:
        parameter = parameters["shared_memory_region"]
        if parameter.WhichOneof("parameter_choice") != "string_param":
            raise invalid_arg(
                f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor.name}', "
                "expected string_param."
            )
        region = parameter.string_param
    offset = 0
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key not in parameters:
            continue
        if region is None:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor "
                f"'{tensor.name}'"
            )
        parameter = parameters[key]
        if parameter.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{tensor.name}', expected int64_param."
            )
        if key == "shared_memory_offset":
            offset = parameter.int64_param
    if region is None:
        return None
    if "shared_memory_byte_size" not in parameters:
        raise invalid_arg(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter "
            f"for tensor '{tensor.name}'"
        )
    byte_size = parameters["shared_memory_byte_size"].int64_param
    if offset < 0 or byte_size < 0:
        raise invalid_arg(
            f"invalid shared memory offset or byte size for tensor '{tensor.name}': expected values >= 0"
        )
    return region, offset, byte_size


# ------------------------------------------------------------------------------------------ requests
def decode_infer_request(message: Any, shm: ShmView | None = None) -> tuple[InferenceRequest, bool]:
    """A ModelInferRequest as the core's InferenceRequest, and whether the request asked for empty
    final responses (`triton_enable_empty_final_response`). Raises TritonError (INVALID_ARG mostly)
    with Triton's messages. `shm` gives views of registered shared memory regions; without it inputs
    and outputs naming a region fail as client shared memory disabled."""
    model_name: str = message.model_name
    version = model_version(message.model_version) if message.model_version else ""
    request_id: str = message.id
    if message.parameters:
        parameters, empty_final = _request_parameters(message.parameters)
    else:
        parameters, empty_final = {}, False

    raw_contents = message.raw_input_contents
    raw_count = len(raw_contents)
    raw_index = 0
    inputs: list[Tensor] = []
    seen: set[str] = set()
    for tensor in message.inputs:
        name: str = tensor.name
        if name in seen:
            raise invalid_arg(f"{_prefix(request_id)}input '{name}' already exists in request")
        seen.add(name)
        datatype: str = tensor.datatype
        shape = tuple(tensor.shape)
        region = _shared_memory(tensor) if tensor.parameters else None
        if region is not None:
            if tensor.HasField("contents"):
                raise invalid_arg(
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' "
                    f"for model '{model_name}'"
                )
            if shm is None:
                raise unavailable(SHM_DISABLED)
            data = _from_buffer(shm(*region), name, datatype, shape, request_id, model_name)
        elif tensor.HasField("contents"):
            if raw_count:
                raise invalid_arg(
                    f"contents field must not be specified when using raw_input_contents for '{name}' for "
                    f"model '{model_name}'"
                )
            data = _from_contents(tensor, request_id, model_name)
        elif raw_index < raw_count:
            data = _from_buffer(raw_contents[raw_index], name, datatype, shape, request_id, model_name)
            raw_index += 1
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model_name}' in request."
            )
        if datatype not in _DTYPES and datatype != "BYTES":
            datatype = _INVALID  # the core's type check names it so
        inputs.append(Tensor(name, datatype, shape, data))

    outputs: list[RequestedOutput] = []
    for output in message.outputs:
        outputs.append(_requested_output(output, shm) if output.parameters else RequestedOutput(output.name))
    request = InferenceRequest(model_name, version, request_id, inputs, outputs, parameters)
    return request, empty_final


def _check_shape(shape: tuple[int, ...], name: str, request_id: str, model_name: str) -> int:
    count = 1
    for dim in shape:
        if dim < 0:
            raise invalid_arg(
                f"{_prefix(request_id)}unexpected shape for input '{name}' for model '{model_name}'. "
                f"Dimensions must not be negative, got {_fmt(shape)}"
            )
        count *= dim
    return count


def _from_buffer(
    buffer: bytes | memoryview,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    """A numpy view (no copy) of a tensor's raw bytes: little-endian values, or BYTES elements each a
    4-byte little-endian length and that many bytes."""
    count = _check_shape(shape, name, request_id, model_name)
    dtype = _DTYPES.get(datatype)
    if dtype is None:
        if datatype == "BYTES":
            return _bytes_elements(buffer, count, name, shape, request_id, model_name)
        return np.frombuffer(buffer, np.uint8)  # an unknown datatype: the core rejects the input
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise invalid_arg(
            f"{_prefix(request_id)}input byte size mismatch for input '{name}' for model '{model_name}'. "
            f"Expected {expected}, got {len(buffer)}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    array = np.frombuffer(buffer, dtype)
    return array.reshape(shape) if len(shape) != 1 else array


def _bytes_elements(
    buffer: bytes | memoryview,
    expected: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    elements = split_bytes(
        memoryview(buffer),
        name,
        lambda available: (
            f"{_prefix(request_id)}incomplete string length indicator for inference input '{name}' for "
            f"model '{model_name}', expecting 4 bytes but only {available} bytes available. Please "
            "make sure the string length indicator is in one buffer."
        ),
    )
    return _bytes_array(elements, expected, name, shape, request_id, model_name)


def _bytes_array(
    elements: list[bytes],
    expected: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    if len(elements) < expected:
        raise invalid_arg(
            f"{_prefix(request_id)}expected {expected} string elements for inference input '{name}' for "
            f"model '{model_name}', got {len(elements)}"
        )
    if len(elements) > expected:
        raise invalid_arg(
            f"{_prefix(request_id)}unexpected number of string elements {len(elements)} for inference "
            f"input '{name}' for model '{model_name}', expecting {expected}"
        )
    array = np.empty(expected, dtype=object)
    array[:] = elements
    return array.reshape(shape)


def _from_contents(tensor: Any, request_id: str, model_name: str) -> np.ndarray[Any, Any]:
    """A tensor given in the typed `contents` fields; Triton's checks of which field may carry which
    datatype, then its byte size (or element count) check."""
    name: str = tensor.name
    datatype: str = tensor.datatype
    shape = tuple(tensor.shape)
    contents = tensor.contents
    declared = datatype if datatype in _DTYPES or datatype == "BYTES" else _INVALID
    chosen: tuple[Any, str] | None = None
    for field, carries, numpy_type, field_type in _CONTENT_FIELDS:
        values = getattr(contents, field)
        if not values:
            continue
        if chosen is not None:
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}', "
                "binary data was already supplied."
            )
        if declared not in carries:
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}' of "
                f"type '{field_type}', expected datatype '{declared}'"
            )
        chosen = (values, numpy_type)
    count = _check_shape(shape, name, request_id, model_name)
    if declared == "BYTES":
        elements = list(chosen[0]) if chosen is not None else []
        return _bytes_array(elements, count, name, shape, request_id, model_name)
    if declared == _INVALID:  # no field may carry it (only an empty `contents` gets here): the core
        return np.empty(0, np.uint8)  # rejects the datatype
    dtype = _DTYPES[declared]
    if chosen is None:
        array = np.empty(0, dtype)
    else:
        values, numpy_type = chosen
        array = np.array(values, dtype=numpy_type)
        if array.dtype != dtype:  # INT8/INT16/UINT8/UINT16 keep the low bytes of each 32-bit value
            array = array.astype(dtype)
    expected = count * dtype.itemsize
    if array.nbytes != expected:
        raise invalid_arg(
            f"{_prefix(request_id)}input byte size mismatch for input '{name}' for model '{model_name}'. "
            f"Expected {expected}, got {array.nbytes}"
        )
    return array.reshape(shape)


def _requested_output(output: Any, shm: ShmView | None) -> RequestedOutput:
    region = _shared_memory(output)
    class_count = 0
    parameters = output.parameters
    if "classification" in parameters:
        parameter = parameters["classification"]
        if parameter.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg("invalid value type for 'classification' parameter, expected int64_param")
        class_count = parameter.int64_param
        if class_count <= 0:
            raise invalid_arg("invalid value for 'classification' parameter, expected >= 0")
        if region is not None:
            raise invalid_arg("output can't set both 'shared_memory_region' and 'classification'")
    extra: dict[str, Any] = {}
    if region is not None:
        if shm is None:
            raise unavailable(SHM_DISABLED)
        shm(*region)  # the region and range must exist now, as Triton checks
        extra = {
            "shared_memory_region": region[0],
            "shared_memory_offset": region[1],
            "shared_memory_byte_size": region[2],
        }
    return RequestedOutput(output.name, class_count, extra)


# ------------------------------------------------------------------------------------------ responses
def tensor_raw_bytes(tensor: Tensor) -> bytes:
    """A tensor's bytes as `raw_output_contents` carries them (row-major, little-endian; BYTES
    elements length-prefixed)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    array = tensor.data
    dtype = _DTYPES.get(tensor.datatype)
    if dtype is None:
        raise internal(f"Invalid data type for output tensor '{tensor.name}'")
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.dtype != dtype:
        array = (
            array.view(dtype) if tensor.datatype == "BF16" and array.itemsize == 2 else array.astype(dtype)
        )
    return array.tobytes()


def encode_infer_response(
    response: InferenceResponse, requested: list[RequestedOutput] | None = None, shm: ShmView | None = None
) -> Any:
    """The ModelInferResponse of a core response: every output's bytes in `raw_output_contents`, index
    aligned with `outputs`; outputs requested into shared memory are written there and get an empty
    raw entry, as in Triton."""
    targets: dict[str, Mapping[str, Any]] | None = None
    if requested:
        for output in requested:
            if "shared_memory_region" in output.parameters:
                if targets is None:
                    targets = {}
                targets[output.name] = output.parameters
    outputs = []
    raw: list[bytes] = []
    for tensor in response.outputs:
        outputs.append(_OutputTensor(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape))
        if targets is not None and tensor.name in targets:
            _write_shm(tensor, targets[tensor.name], shm)
            raw.append(b"")
        else:
            raw.append(tensor_raw_bytes(tensor))
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=str(response.model_version),
        id=response.id,
        outputs=outputs,
        raw_output_contents=raw,
    )
    if response.parameters:
        for key, value in response.parameters.items():
            set_parameter(message.parameters[key], value)
    return message


def _write_shm(tensor: Tensor, target: Mapping[str, Any], shm: ShmView | None) -> None:
    if shm is None:
        raise unavailable(SHM_DISABLED)
    blob = tensor_raw_bytes(tensor)
    byte_size = int(target["shared_memory_byte_size"])
    if len(blob) > byte_size:
        raise internal(
            f"shared memory size specified with the request for output '{tensor.name}' ({byte_size} "
            f"bytes) should be at least {len(blob)} bytes to hold the results"
        )
    view = shm(str(target["shared_memory_region"]), int(target["shared_memory_offset"]), byte_size)
    view[: len(blob)] = blob


def stream_response(message: Any, final: bool = True) -> Any:
    """A ModelStreamInferResponse carrying a response, with `triton_final_response` as Triton sets it
    (true on a request's last response: always for a model that is not decoupled)."""
    message.parameters[FINAL_RESPONSE].bool_param = final
    return pb.ModelStreamInferResponse(infer_response=message)


def stream_error(
    message: str, request_id: str, model_name: str = "", model_version: str = "", final: bool | None = None
) -> Any:
    """A ModelStreamInferResponse reporting an error. A request that never reached the model gets the
    error and its id only; an error response of the model also names the model and the version the
    request asked for, and carries `triton_final_response`, as in Triton."""
    answer = pb.ModelInferResponse(id=request_id, model_name=model_name, model_version=model_version)
    if final is not None:
        answer.parameters[FINAL_RESPONSE].bool_param = final
    return pb.ModelStreamInferResponse(error_message=message, infer_response=answer)


def stream_empty_final(request_id: str, model_name: str, model_version: str) -> Any:
    """The flags-only end of a decoupled model's responses, sent only to requests that set
    `triton_enable_empty_final_response`: id, model name and the version the request asked for."""
    answer = pb.ModelInferResponse(id=request_id, model_name=model_name, model_version=model_version)
    answer.parameters[FINAL_RESPONSE].bool_param = True
    return pb.ModelStreamInferResponse(infer_response=answer)


# ------------------------------------------------------------------------------------------ metadata
def server_metadata_response(metadata: Mapping[str, Any]) -> Any:
    return pb.ServerMetadataResponse(
        name=metadata["name"], version=metadata["version"], extensions=list(metadata.get("extensions", ()))
    )


def model_metadata_response(metadata: Mapping[str, Any]) -> Any:
    Tensor_ = pb.ModelMetadataResponse.TensorMetadata

    def tensors(key: str) -> list[Any]:
        return [
            Tensor_(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]])
            for t in metadata.get(key, ())
        ]

    return pb.ModelMetadataResponse(
        name=metadata["name"],
        versions=[str(v) for v in metadata.get("versions", ())],
        platform=metadata.get("platform", ""),
        inputs=tensors("inputs"),
        outputs=tensors("outputs"),
    )


def model_config_response(config: Mapping[str, Any]) -> Any:
    """The ModelConfigResponse of a config in its JSON form (as the REST API gives it)."""
    message = model_config_pb2.ModelConfig()
    json_format.ParseDict(config, message, ignore_unknown_fields=True)
    return pb.ModelConfigResponse(config=message)


def statistics_response(statistics: Mapping[str, Any]) -> Any:
    """The ModelStatisticsResponse of statistics in their JSON form."""
    message = pb.ModelStatisticsResponse()
    json_format.ParseDict(statistics, message, ignore_unknown_fields=True)
    return message


def repository_index_response(rows: Iterable[Mapping[str, Any]]) -> Any:
    Index = pb.RepositoryIndexResponse.ModelIndex
    return pb.RepositoryIndexResponse(
        models=[
            Index(
                name=row["name"],
                version=str(row.get("version", "")),
                state=str(row.get("state", "")),
                reason=str(row.get("reason", "")),
            )
            for row in rows
        ]
    )


def load_parameters(message: Any) -> str | None:
    """The config override of a RepositoryModelLoadRequest (None when there is none)."""
    config: str | None = None
    for key, parameter in message.parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if key == "config":
            if which != "string_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected string_param.")
            config = parameter.string_param
        elif key.startswith("file:"):
            if which != "bytes_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected bytes_param.")
            raise unsupported(f"loading model files from the request ('{key}') is not supported")
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'.")
    return config


def unload_dependents(message: Any) -> bool:
    """The `unload_dependents` flag of a RepositoryModelUnloadRequest."""
    if "unload_dependents" not in message.parameters:
        return False
    parameter = message.parameters["unload_dependents"]
    if parameter.WhichOneof("parameter_choice") != "bool_param":
        raise invalid_arg("invalid value type for 'unload_dependents' parameter, expected bool_param.")
    return bool(parameter.bool_param)


def system_shm_status_response(regions: Iterable[Mapping[str, Any]]) -> Any:
    Status = pb.SystemSharedMemoryStatusResponse.RegionStatus
    message = pb.SystemSharedMemoryStatusResponse()
    for region in regions:
        message.regions[region["name"]].CopyFrom(
            Status(
                name=region["name"],
                key=region["key"],
                offset=int(region["offset"]),
                byte_size=int(region["byte_size"]),
            )
        )
    return message


def cuda_shm_status(name: str) -> Any:
    """CUDA shared memory status without a GPU: nothing is registered."""
    if name:
        raise not_found(f"Unable to find cuda shared memory region: '{name}'")
    return pb.CudaSharedMemoryStatusResponse()


def cuda_shm_register_error(name: str) -> TritonError:
    return unsupported(f"failed to register CUDA shared memory region: '{name}', GPUs not supported")


# ------------------------------------------------------------------------------------------ logging
_LOG_SETTINGS = (  # Triton's order, and the SettingValue field each setting takes
    ("log_file", "string_param", "string"),
    ("log_info", "bool_param", "boolean"),
    ("log_warning", "bool_param", "boolean"),
    ("log_error", "bool_param", "boolean"),
    ("log_verbose_level", "uint32_param", "int32"),
    ("log_format", "string_param", "string"),
)


def log_settings_changes(message: Any) -> dict[str, Any]:
    """The settings a LogSettingsRequest changes (unknown keys are ignored, as Triton does)."""
    changes: dict[str, Any] = {}
    settings = message.settings
    for key, field, kind in _LOG_SETTINGS:
        if key not in settings:
            continue
        value = settings[key]
        if value.WhichOneof("parameter_choice") != field:
            raise invalid_arg(f"expect {kind} for '{key}'")
        changes[key] = getattr(value, field)
    return changes


def log_settings_response(settings: Mapping[str, Any]) -> Any:
    message = pb.LogSettingsResponse()
    for key, field, _ in _LOG_SETTINGS:
        if key in settings:
            value = settings[key]
            setattr(message.settings[key], field, int(value) if field == "uint32_param" else value)
    return message


# ------------------------------------------------------------------------------------------ trace
_TRACE_SETTINGS = ("trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency")


def trace_settings_changes(message: Any) -> dict[str, Any]:
    """The settings a TraceSettingRequest changes, as the core takes them: trace_level a list of
    names, the others one string (the core reads and checks the values); an empty value list is None
    (back to the global value, or the default). Unknown keys are ignored, as Triton does."""
    changes: dict[str, Any] = {}
    settings = message.settings
    for key in _TRACE_SETTINGS:
        if key not in settings:
            continue
        values = list(settings[key].value)
        if not values:
            changes[key] = None
        elif key == "trace_level":
            changes[key] = values
        elif len(values) > 1:
            raise invalid_arg(f"expect only 1 value for '{key}'")
        else:
            changes[key] = values[0]
    return changes


def trace_settings_response(settings: Mapping[str, Any]) -> Any:
    message = pb.TraceSettingResponse()
    for key, value in settings.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        message.settings[key].value.extend(str(v) for v in values)
    return message
