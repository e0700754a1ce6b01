"""KServe v2 JSON inference responses with Triton's binary tensor extension: the core
InferenceResponse to the response body, a pure function.

Each output goes as JSON 'data', as binary bytes after the JSON header (`binary_data`), or into the
shared memory region its request named; `server/protocol/tensors.py` gives each form.
"""

from __future__ import annotations

from typing import Any

import orjson

from server.protocol.json_binary import shm_parameters
from server.protocol.tensors import ShmView, binary_buffer, json_data, write_shm
from server.protocol.types import InferenceResponse, RequestedOutput


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
            write_shm(tensor, shm, *shm_parameters(params))
            outputs.append(entry)
            continue
        else:
            binary = params.get("binary_data") is True
        if binary:
            blob, size = binary_buffer(tensor)
            entry["parameters"] = {"binary_data_size": size}
            if size:
                blobs.append(blob)
        else:
            entry["data"] = json_data(tensor)
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
