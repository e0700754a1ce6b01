"""Tensor data of the HTTP codec that is not JSON: the bytes of Triton's binary tensor extension (after
the JSON header), of a shared memory region an input names, or of a whole raw binary request. They
become numpy views on those bytes, never copies; BYTES elements are 4-byte little-endian lengths
followed by the bytes, BF16 tensors uint16 arrays holding the raw bits (numpy has no bfloat16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from server.protocol import datatypes
from server.protocol.bytes_tensor import split_bytes
from server.protocol.codec_tensors import bytes_array, request_prefix
from server.protocol.errors import invalid_arg
from server.protocol.json_values import NOT_STRING, NOT_UINT, is_uint
from server.protocol.types import InferenceRequest, Tensor

_DTYPES = datatypes.raw_dtypes()


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


def from_buffer(
    buffer: bytes | bytearray | memoryview,
    offset: int,
    byte_size: int,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    """A tensor over `byte_size` bytes of `buffer` at `offset`: a numpy view, not a copy."""
    if datatype == "BYTES":
        return _bytes_from_buffer(buffer, offset, byte_size, name, shape, request_id, model_name)
    dtype = _DTYPES[datatype]
    count = math.prod(shape)
    expected = count * dtype.itemsize
    if byte_size != expected:
        raise invalid_arg(
            f"{request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected}, got {byte_size}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    return np.frombuffer(buffer, dtype, count, offset).reshape(shape)


def _bytes_from_buffer(
    buffer: bytes | bytearray | memoryview,
    offset: int,
    byte_size: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
) -> np.ndarray[Any, Any]:
    elements = split_bytes(memoryview(buffer)[offset : offset + byte_size], name)
    return bytes_array(elements, math.prod(shape), name, shape, request_id, model_name)


def decode_raw_request(
    body: bytes | bytearray | memoryview,
    model_name: str,
    model_version: str,
    config: Mapping[str, Any],
) -> tuple[InferenceRequest, bool]:
    """A raw binary request (Inference-Header-Content-Length: 0): the whole body is the data of the
    model's only input, batch 1; its shape is deduced from the config (JSON form, as `/config` returns
    it). All outputs are returned binary."""
    prefix = request_prefix("")
    config_inputs = list(config.get("input", []))
    if len(config_inputs) != 1:
        raise invalid_arg(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config_inputs)} inputs in '{model_name}' model configuration"
        )
    config_input = config_inputs[0]
    name = str(config_input.get("name", ""))
    datatype = _wire_type(str(config_input.get("data_type", "")))
    shape: list[int] = [1] if int(config.get("max_batch_size", 0)) > 0 else []
    dynamic_axis = -1
    element_count = 1
    for dim in config_input.get("dims", []):
        if int(dim) == -1:
            if dynamic_axis != -1:
                raise invalid_arg(
                    f"{prefix}The shape of the raw input '{name}' can not be deduced because there are "
                    "more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
            shape.append(-1)
        else:
            shape.append(int(dim))
            element_count *= int(dim)
    if datatype == "BYTES":
        if dynamic_axis != -1 or element_count != 1:
            raise invalid_arg(
                f"{prefix}For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(body)
        tensor = Tensor(name, datatype, tuple(shape), data.reshape(shape))
    else:
        dtype = _DTYPES.get(datatype)
        if dtype is None:
            raise invalid_arg(f"invalid datatype for input {name}")
        if dynamic_axis != -1:
            unit = element_count * dtype.itemsize
            shape[dynamic_axis] = len(body) // unit if unit else 0
        shape_tuple = tuple(shape)
        data = from_buffer(body, 0, len(body), name, datatype, shape_tuple, "", model_name)
        tensor = Tensor(name, datatype, shape_tuple, data)
    return InferenceRequest(model_name, model_version, inputs=[tensor]), True


def _wire_type(config_type: str) -> str:
    if config_type == "TYPE_STRING":
        return "BYTES"
    return config_type.removeprefix("TYPE_")
