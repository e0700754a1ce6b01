"""KServe v2 JSON inference responses with Triton's binary tensor extension: the core
InferenceResponse to the response body, a pure function.

Each output goes as JSON 'data', as binary bytes after the JSON header (`binary_data`), or into the
shared memory region its request named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from server.protocol import datatypes
from server.protocol.bytes_tensor import as_bytes, serialize_bytes
from server.protocol.codec_tensors import SHM_DISABLED, ShmView
from server.protocol.errors import ErrorCode, TritonError, invalid_arg, unavailable
from server.protocol.json_binary import shm_parameters
from server.protocol.json_values import NO_JSON
from server.protocol.types import InferenceResponse, RequestedOutput, Tensor

_DTYPES = datatypes.raw_dtypes()


def encode_response(
    response: InferenceResponse,
    requested: list[RequestedOutput],
    binary_default: bool = False,
    *,
    shm: ShmView | None = None,
) -> tuple[bytes, int | None]:
    """The response body and, when it carries binary tensors, the length of its JSON header (the
    Inference-Header-Content-Length value; None for an all-JSON body).

    Outputs named in `requested` are binary if their parameters say `binary_data: true`, written to
    shared memory if they name a region, JSON otherwise; outputs not named use `binary_default`."""
    wanted = {output.name: output.parameters for output in requested} if requested else None
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes | memoryview] = []
    for tensor in response.outputs:
        params = wanted.get(tensor.name) if wanted is not None else None
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if params is None:
            binary = binary_default
        elif "shared_memory_region" in params:
            _write_shm(tensor, params, shm)
            outputs.append(entry)
            continue
        else:
            binary = params.get("binary_data") is True
        if binary:
            blob, size = tensor_bytes(tensor)
            entry["parameters"] = {"binary_data_size": size}
            if size:
                blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)

    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    encoded = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return encoded, None
    return b"".join([encoded, *blobs]), len(encoded)


def tensor_bytes(tensor: Tensor) -> tuple[bytes | memoryview, int]:
    """The binary-extension bytes of a tensor (a buffer over the array when it is contiguous) and their
    number."""
    if tensor.datatype == "BYTES":
        data = serialize_bytes(tensor.data)
        return data, len(data)
    array = _typed(tensor)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.reshape(-1).data.cast("B"), array.nbytes


def _typed(tensor: Tensor) -> np.ndarray[Any, Any]:
    array = np.asarray(tensor.data)
    dtype = _DTYPES.get(tensor.datatype)
    if dtype is None:
        raise TritonError(ErrorCode.INTERNAL, f"Invalid data type for output tensor '{tensor.name}'")
    if array.dtype != dtype:
        if tensor.datatype == "BF16" and array.dtype.itemsize == 2:
            return array.view(dtype)
        array = array.astype(dtype)
    return array


def _json_data(tensor: Tensor) -> Any:
    if tensor.datatype == "BYTES":
        return [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else as_bytes(item).decode()
            for item in np.asarray(tensor.data, dtype=object).reshape(-1)
        ]
    if tensor.datatype in NO_JSON:
        raise invalid_arg(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    array = _typed(tensor).reshape(-1)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array  # orjson writes contiguous numpy arrays natively


def _write_shm(tensor: Tensor, params: Mapping[str, Any], shm: ShmView | None) -> None:
    region, offset, byte_size = shm_parameters(dict(params))
    if shm is None:
        raise unavailable(SHM_DISABLED)
    blob, size = tensor_bytes(tensor)
    if size > byte_size:
        raise invalid_arg(
            f"shared memory size specified with the request for output '{tensor.name}' ({byte_size} "
            f"bytes) should be at least {size} bytes to hold the results"
        )
    view = shm(region, offset, byte_size)
    view[:size] = blob
