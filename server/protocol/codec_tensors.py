"""What the HTTP and gRPC inference codecs do alike to request tensors: the shared-memory view they are
handed, the error when client shared memory is off, the request-id prefix of Triton's core messages,
and the element-count check of a BYTES input.

The rest of turning wire bytes into arrays differs between the two front ends and stays in each
codec: gRPC checks for negative dimensions and lets an unknown datatype through for the core to
reject, HTTP has checked both while reading the JSON; a cut-short BYTES length indicator is worded
differently; an output too large for its shared-memory region is INVALID_ARG over HTTP and
INTERNAL over gRPC; HTTP writes binary outputs as views on the arrays, gRPC as bytes for protobuf.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from server.protocol.errors import invalid_arg

ShmView = Callable[[str, int, int], memoryview]
"""(region name, offset, byte size) -> a writable view of exactly those bytes of a registered region."""

SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


def request_prefix(request_id: str) -> str:
    return f"[request id: {request_id or '<id_unknown>'}] "


def bytes_array(
    elements: list[bytes],
    expected: int,
    name: str,
    shape: tuple[int, ...],
    request_id: str,
    model_name: str,
    *,
    from_json: bool = False,
) -> np.ndarray[Any, Any]:
    """The BYTES input `name` as an object array of `shape`, once it has exactly `expected` elements.
    Too many are 'unexpected number of string elements', except when they come from a JSON 'data'
    field (`from_json`): then, like too few, 'expected N string elements'."""
    if len(elements) != expected:
        prefix = request_prefix(request_id)
        if len(elements) < expected or from_json:
            raise invalid_arg(
                f"{prefix}expected {expected} string elements for inference input '{name}' for model "
                f"'{model_name}', got {len(elements)}"
            )
        raise invalid_arg(
            f"{prefix}unexpected number of string elements {len(elements)} for inference input '{name}' "
            f"for model '{model_name}', expecting {expected}"
        )
    array = np.empty(expected, dtype=object)
    array[:] = elements
    return array.reshape(shape)
