"""What the HTTP codec reads besides JSON values: the shared memory region a tensor's parameters name,
and a whole raw binary request (Inference-Header-Content-Length: 0). The tensor bytes themselves
(binary data extension, shared memory, raw request) become arrays in `server/protocol/tensors.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from server.protocol import datatypes
from server.protocol.errors import invalid_arg
from server.protocol.json_values import NOT_STRING, NOT_UINT, is_uint
from server.protocol.tensors import from_buffer, request_prefix
from server.protocol.types import InferenceRequest, Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def shm_parameters(params: dict[str, Any]) -> tuple[str, int, int]:
    """(region, offset, byte size) of a tensor whose parameters name a shared memory region."""
    region = params.get("shared_memory_region")
    if type(region) is not str:
        raise invalid_arg(f"Unable to parse 'shared_memory_region': {NOT_STRING}")
    offset = params.get("shared_memory_offset", 0)
    if not is_uint(offset):
        raise invalid_arg(f"Unable to parse 'shared_memory_offset': {NOT_UINT}")
    byte_size = params.get("shared_memory_byte_size", 0)
    if not is_uint(byte_size):
        raise invalid_arg(f"Unable to parse 'shared_memory_byte_size': {NOT_UINT}")
    return region, offset, byte_size


def decode_raw_request(
    body: bytes | bytearray | memoryview,
    model_name: str,
    model_version: str,
    config: ModelConfig,
) -> tuple[InferenceRequest, bool]:
    """A raw binary request (Inference-Header-Content-Length: 0): the whole body is the data of the
    model's only input, batch 1; its shape is deduced from the model's config. All outputs are
    returned binary."""
    prefix = request_prefix("")
    config_inputs = config.input
    if len(config_inputs) != 1:
        raise invalid_arg(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config_inputs)} inputs in '{model_name}' model configuration"
        )
    config_input = config_inputs[0]
    name = config_input.name
    datatype = datatypes.config_to_wire(_enum_name(config_input, "data_type"))
    shape: list[int] = [1] if config.max_batch_size > 0 else []
    dynamic_axis = -1
    element_count = 1
    for dim in config_input.dims:
        if dim == -1:
            if dynamic_axis != -1:
                raise invalid_arg(
                    f"{prefix}The shape of the raw input '{name}' can not be deduced because there are "
                    "more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
            shape.append(-1)
        else:
            shape.append(dim)
            element_count *= dim
    if datatype == "BYTES":
        if dynamic_axis != -1 or element_count != 1:
            raise invalid_arg(
                f"{prefix}For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(body)
        return InferenceRequest(
            model_name, model_version, inputs=[Tensor(name, datatype, tuple(shape), data.reshape(shape))]
        ), True
    dtype = datatypes.raw_dtypes().get(datatype)
    if dtype is None:
        raise invalid_arg(f"invalid datatype for input {name}")
    if dynamic_axis != -1:
        unit = element_count * dtype.itemsize
        shape[dynamic_axis] = len(body) // unit if unit else 0
    shape_tuple = tuple(shape)
    data = from_buffer(body, 0, len(body), name, datatype, shape_tuple, "", model_name)
    return InferenceRequest(
        model_name, model_version, inputs=[Tensor(name, datatype, shape_tuple, data)]
    ), True


def _enum_name(message: Any, field: str) -> str:
    """The name of an enum field's value (TYPE_FP32), as the config's JSON form prints it."""
    number = getattr(message, field)
    value = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(number)
    return value.name if value is not None else str(number)
