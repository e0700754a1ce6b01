"""The host API: request and tensor factories and accessors the tcli server calls. Models written for
Triton never use these. (The hooks the server installs live with the state they set:
requests.set_bls_executor, model_control.set_model_manager, scope.model_scope and
scope.set_default_model_scope.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from server.backends.python.pb_utils.datatypes import TRITONSERVER_REQUEST_RELEASE_ALL, TYPE_BF16
from server.backends.python.pb_utils.errors import TritonError
from server.backends.python.pb_utils.memory import TRITONSERVER_MEMORY_CPU, InferenceTrace, PreferredMemory
from server.backends.python.pb_utils.requests import InferenceRequest
from server.backends.python.pb_utils.responses import InferenceResponse, InferenceResponseSender
from server.backends.python.pb_utils.tensor import Tensor, _check_tensor_name, _tensor_from_storage
from server.protocol import datatypes


def new_execute_request(
    *,
    inputs: Sequence[Tensor],
    requested_output_names: Iterable[str],
    request_id: str = "",
    correlation_id: int | str = 0,
    flags: int = 0,
    timeout: int = 0,
    parameters: dict[str, Any] | None = None,
    model_name: str = "",
    model_version: int = -1,
    response_sender: InferenceResponseSender | None = None,
    is_cancelled: Callable[[], bool] | None = None,
) -> InferenceRequest:
    """A request as execute() receives it. `parameters` are the client's request parameters (any JSON
    values); `timeout` is in microseconds."""
    request = InferenceRequest.__new__(InferenceRequest)
    request._request_id = request_id
    request._correlation_id = correlation_id
    request._inputs = list(inputs)
    request._requested = list(dict.fromkeys(requested_output_names))
    request._model_name = model_name
    request._model_version = model_version
    request._flags = flags
    request._timeout = timeout
    request._preferred_memory = PreferredMemory(TRITONSERVER_MEMORY_CPU)
    request._trace = InferenceTrace()
    request._parameters = dict(parameters or {})
    request._parameters_json = None  # parameters() encodes them: most models never ask
    request._sender = response_sender
    request._cancelled = is_cancelled or (lambda: False)
    request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
    return request


def release_flags(request: InferenceRequest) -> int:
    """What the model asked for with set_release_flags (TRITONSERVER_REQUEST_RELEASE_ALL by default)."""
    return request._release_flags


def request_parameters(request: InferenceRequest) -> dict[str, Any]:
    return dict(request._parameters)


def response_parameters(response: InferenceResponse) -> dict[str, bool | int | str]:
    return dict(response._parameters)


def tensor_from_storage(name: str, array: npt.NDArray[Any], triton_dtype: int) -> Tensor:
    """A Tensor over `array` without checks beyond the name; for BF16 pass the raw 16-bit values
    (any 2-byte dtype; kept as a uint16 view)."""
    if triton_dtype == TYPE_BF16:
        if array.dtype.itemsize != 2:
            raise ValueError(f"BF16 tensor '{name}' needs 2-byte elements, got {array.dtype}")
        array = array.view(np.uint16)
    return _tensor_from_storage(_check_tensor_name(name), array, triton_dtype)


def input_tensor(name: str, array: npt.NDArray[Any], wire_type: str) -> Tensor:
    """An input tensor the server decoded and checked against the config: not checked again (a
    request's inputs cost the most of what execute() gets). BF16 arrays hold the raw 16-bit values."""
    triton_dtype = datatypes.BY_WIRE[wire_type].number
    if not array.flags.writeable:
        # a view of the request's own bytes (gRPC) or of a BLS caller's array: the model gets a copy
        # it may write to, as Triton's gets one in shared memory and the process hop makes one
        array = array.copy()
    if triton_dtype == TYPE_BF16 and array.dtype != np.uint16:
        array = array.view(np.uint16)
    return _tensor_from_storage(name, array, triton_dtype)


def tensor_storage(tensor: Tensor) -> npt.NDArray[Any]:
    """The array behind a Tensor as the server carries it, on either side of the process hop: BF16 as
    its uint16 bits, BYTES as an object array of bytes (converted when the Tensor was made: numpy
    bytes_ and str elements never reach the server)."""
    wire = tensor._wire
    return tensor._array if wire is None else wire


def dtype_to_wire(triton_dtype: int) -> str:
    """11 -> 'FP32', 13 -> 'BYTES', 14 -> 'BF16'; 'INVALID' for anything else."""
    return datatypes.number_to_wire(triton_dtype)


def wire_to_dtype(wire_type: str) -> int:
    """'FP32' -> 11; 0 (TYPE_INVALID) for an unknown name."""
    return datatypes.wire_to_number(wire_type)


def config_to_dtype(config_type: str) -> int:
    """'TYPE_FP32' -> 11; 0 for an unknown name."""
    return datatypes.config_to_number(config_type)


def error_code_name(error: TritonError) -> str:
    """The server.protocol.errors.ErrorCode member name for a model's TritonError ('INTERNAL', ...)."""
    return error.code().name
