"""Inference through `inference.GRPCInferenceService`: ModelInferRequest to the core's
InferenceRequest, and InferenceResponse to ModelInferResponse and the stream messages; pure functions.

The messages are tritonclient's generated ones (`tritonclient.grpc.service_pb2`). Inference requests
become `InferenceRequest`s whose tensors `server/protocol/tensors.py` reads; responses carry every
output in `raw_output_contents`, as Triton's do. The other RPCs' messages are in
`server/protocol/grpc_messages.py`.

Checks and messages follow Triton's gRPC front end (server/src/grpc/infer_handler.cc, grpc_utils.h,
grpc_server.cc); every failure is a TritonError with Triton's code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from server.protocol import datatypes
from server.protocol.errors import invalid_arg, unavailable
from server.protocol.grpc_parameters import (
    model_version,
    request_parameters,
    set_parameter,
    shared_memory_parameters,
)
from server.protocol.tensors import (
    GRPC,
    INVALID,
    SHM_DISABLED,
    ShmView,
    from_buffer,
    from_contents,
    from_shm,
    raw_bytes,
    request_prefix,
    write_shm,
)
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

MAX_GRPC_MESSAGE_SIZE = 2**31 - 1  # INT32_MAX, Triton's MAX_GRPC_MESSAGE_SIZE
FINAL_RESPONSE = "triton_final_response"

_DTYPES = datatypes.raw_dtypes()

_OutputTensor = pb.ModelInferResponse.InferOutputTensor


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
        parameters, empty_final = request_parameters(message.parameters)
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
            raise invalid_arg(f"{request_prefix(request_id)}input '{name}' already exists in request")
        seen.add(name)
        datatype: str = tensor.datatype
        shape = tuple(tensor.shape)
        region = shared_memory_parameters(tensor) if tensor.parameters else None
        if region is not None:
            if tensor.HasField("contents"):
                raise invalid_arg(
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' "
                    f"for model '{model_name}'"
                )
            data = from_shm(shm, *region, name, datatype, shape, request_id, model_name, GRPC)
        elif tensor.HasField("contents"):
            if raw_count:
                raise invalid_arg(
                    f"contents field must not be specified when using raw_input_contents for '{name}' for "
                    f"model '{model_name}'"
                )
            data = from_contents(tensor, request_id, model_name)
        elif raw_index < raw_count:
            raw = raw_contents[raw_index]
            data = from_buffer(raw, 0, len(raw), name, datatype, shape, request_id, model_name, GRPC)
            raw_index += 1
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model_name}' in request."
            )
        if datatype not in _DTYPES and datatype != "BYTES":
            datatype = INVALID  # the core's type check names it so
        inputs.append(Tensor(name, datatype, shape, data))

    outputs: list[RequestedOutput] = []
    for output in message.outputs:
        outputs.append(_requested_output(output, shm) if output.parameters else RequestedOutput(output.name))
    request = InferenceRequest(model_name, version, request_id, inputs, outputs, parameters)
    return request, empty_final


def _requested_output(output: Any, shm: ShmView | None) -> RequestedOutput:
    region = shared_memory_parameters(output)
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
    contents: list[bytes] = []
    for tensor in response.outputs:
        outputs.append(_OutputTensor(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape))
        target = targets.get(tensor.name) if targets is not None else None
        if target is not None:
            region = (target["shared_memory_region"], target["shared_memory_offset"])
            write_shm(tensor, shm, *region, target["shared_memory_byte_size"], GRPC)
            contents.append(b"")
        else:
            contents.append(raw_bytes(tensor))
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=str(response.model_version),
        id=response.id,
        outputs=outputs,
        raw_output_contents=contents,
    )
    if response.parameters:
        for key, value in response.parameters.items():
            set_parameter(message.parameters[key], value)
    return message


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
