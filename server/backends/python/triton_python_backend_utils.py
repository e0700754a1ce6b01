"""tcli's `triton_python_backend_utils`: the module Triton python models import as `pb_utils`.

Models written for Triton 2.51 run unchanged: names, signatures, return types and error messages follow
the real python backend (its `triton_python_backend_utils.py` plus the classes its C++ stub adds).
Where Triton 2.51 is broken or stricter than useful, this module says so next to the code.

The second half of the file is the host API: what the tcli server installs or calls (BLS executor,
model manager, response transport, model scope, custom-metrics registry, request and tensor factories).
Models never need it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import enum
import functools
import itertools
import json
import logging
import math
import re
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

# ---------------------------------------------------------------------------------------------------
# Constants (values as the real module and its C++ stub define them)
# ---------------------------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# TRITONSERVER_DataType values, as Tensor.triton_dtype() returns them
TYPE_INVALID = 0
TYPE_BOOL = 1
TYPE_BF16 = 14
TYPE_BYTES = 13

_CONFIG_NAMES = (
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
)
_WIRE_NAMES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)

# 1..13 in enum order; BF16 (14) has no numpy type
_NUMPY_TYPES: tuple[type[Any], ...] = (
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.object_,
)
_NUMPY_NAME_TO_TRITON = {
    np.dtype(t).name: i for i, t in enumerate(_NUMPY_TYPES, start=1) if t is not np.object_
}

# The real module maps TYPE_BOOL to Python's bool (np.dtype(bool) is np.bool_ all the same).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

_LOG = logging.getLogger("tcli.python_model")


# ---------------------------------------------------------------------------------------------------
# Data types and BYTES tensors
# ---------------------------------------------------------------------------------------------------


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType (1..13) -> numpy type; None for BF16 (14) and unknown values, as Triton."""
    if isinstance(data_type, int) and 1 <= data_type <= len(_NUMPY_TYPES):
        return _NUMPY_TYPES[data_type - 1]
    return None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy type or dtype -> TRITONSERVER_DataType; None when Triton has no such type (e.g. str_).

    Object and bytes_ ('S') dtypes are BYTES (13). Triton 2.51 returns None for an np.dtype('S3')
    though its Tensor accepts such arrays; here both agree on 13."""
    if data_type is None:  # np.dtype(None) would be float64
        return None
    known = _DTYPE_TO_TRITON.get(data_type)  # every Tensor asks: dtype.name is slow in numpy
    if known is not None:
        return known
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in ("O", "S"):
        result: int | None = TYPE_BYTES
    else:
        result = _NUMPY_NAME_TO_TRITON.get(dtype.name)  # the name ignores byte order: '>f4' is float32 too
    if result is not None and isinstance(data_type, np.dtype):
        _DTYPE_TO_TRITON[data_type] = result
    return result


_DTYPE_TO_TRITON: dict[Any, int] = {}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """'TYPE_FP32' -> np.float32; a KeyError for names without a numpy type (TYPE_BF16), as Triton."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | None:
    """Flatten a BYTES tensor (C order) into elements each prefixed by its 4-byte little-endian length.

    bytes elements go as they are, str as UTF-8, anything else as str(x) in UTF-8. Returns None for a
    numeric tensor. An empty tensor gives b"" (Triton 2.51 returns an empty tuple)."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C"):
        raw = isinstance(item, (bytes, bytearray, memoryview))
        data = bytes(item) if raw else str(item).encode("utf-8")
        parts.append(len(data).to_bytes(4, "little"))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: Any) -> npt.NDArray[np.object_]:
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes (reshape it as needed).

    Accepts bytes-like objects and uint8 numpy arrays (what the real stub passes)."""
    data = encoded_tensor.tobytes() if isinstance(encoded_tensor, np.ndarray) else bytes(encoded_tensor)
    items: list[bytes] = []
    offset, end = 0, len(data)
    while offset < end:
        if offset + 4 > end:
            raise ValueError(
                f"truncated BYTES tensor: {end - offset} byte(s) left where a 4-byte length is due"
            )
        length = int.from_bytes(data[offset : offset + 4], "little")
        offset += 4
        if offset + length > end:
            raise ValueError(
                f"truncated BYTES tensor: element {len(items)} declares {length} bytes, {end - offset} remain"
            )
        items.append(data[offset : offset + length])
        offset += length
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


# ---------------------------------------------------------------------------------------------------
# Model config helpers (the config is the dict json.loads(args["model_config"]) gives)
# ---------------------------------------------------------------------------------------------------


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("input", []):
        if properties.get("name") == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("output", []):
        if properties.get("name") == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code; member names equal server.protocol.errors.ErrorCode's."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error a model attaches to an InferenceResponse. Not an exception, as in Triton."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    __slots__ = ("_code", "_message")

    def __init__(self, message: str, code: _ErrorCode = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): message must be a str, got {type(message).__name__}")
        if not isinstance(code, _ErrorCode):
            raise TypeError("TritonError(): code must be one of TritonError.UNKNOWN, INTERNAL, ... CANCELLED")
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code=TritonError.{self._code.name})"


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail (bad tensors, BLS, metrics, response senders)."""

    def message(self) -> str:
        return str(self)


# ---------------------------------------------------------------------------------------------------
# DLPack: numpy does the work; ctypes only reads (and for BF16 retags) the capsule's dtype, because
# numpy has no bfloat16 and refuses such capsules.
# ---------------------------------------------------------------------------------------------------

_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3
_DL_UINT, _DL_BFLOAT = 1, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32 * 2),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _is_capsule(obj: object) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _dl_tensor(capsule: object) -> _DLTensor:
    """The DLTensor inside a live (not yet consumed) DLPack capsule."""
    name = _capsule_name(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise TritonModelException(f"DLPack capsule has been used already (capsule name {name!r})")
    address = _capsule_pointer(capsule, name)
    if name == b"dltensor":  # DLManagedTensor starts with its DLTensor
        return _DLTensor.from_address(address)
    return _DLManagedTensorVersioned.from_address(address).dl_tensor


def _check_device(device_type: int) -> None:
    if device_type == _DL_CUDA:
        raise TritonModelException(
            "DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available"
        )
    if device_type not in (_DL_CPU, _DL_CUDA_HOST):
        raise TritonModelException(f"DLDevice type {device_type} is not support by Python backend.")


class _CapsuleHolder:
    """Gives np.from_dlpack (which wants the __dlpack__ protocol) a capsule already in hand."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __dlpack__(self, *, stream: None = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)


# ---------------------------------------------------------------------------------------------------
# Tensor
# ---------------------------------------------------------------------------------------------------


def _check_tensor_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")
    return name


class Tensor:
    """A named tensor in CPU memory: `Tensor(name, numpy_array)`.

    BYTES tensors are numpy object arrays of bytes (str elements are sent as UTF-8). Like Triton, the
    array must be an np.ndarray (not a list or numpy scalar), and numpy str_ arrays are refused."""

    __slots__ = ("_array", "_dtype", "_name")

    def __init__(self, name: str, numpy_array: npt.NDArray[Any]) -> None:
        self._name = _check_tensor_name(name)
        if not isinstance(numpy_array, np.ndarray):
            raise TypeError(
                f"Tensor(): expected (name: str, numpy_array: numpy.ndarray), "
                f"got a {type(numpy_array).__name__} for tensor '{name}'"
            )
        if not numpy_array.dtype.isnative:  # the wire is little-endian; Triton refuses these outright
            numpy_array = numpy_array.astype(numpy_array.dtype.newbyteorder("="))
        dtype = numpy_to_triton_type(numpy_array.dtype)
        if dtype is None:
            raise TritonModelException("NumPy dtype is not supported.")
        self._dtype = dtype
        self._array = numpy_array if numpy_array.flags.c_contiguous else np.ascontiguousarray(numpy_array)

    def name(self) -> str:
        return self._name

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType value (FP32 is 11, BYTES 13, BF16 14).

        Triton 2.51's binding cannot convert this value and raises TypeError; an int is what it means."""
        return self._dtype

    def as_numpy(self) -> npt.NDArray[Any]:
        if self._dtype == TYPE_BF16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
            )
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def is_cpu(self) -> bool:
        return True  # tcli keeps every tensor in CPU memory

    def to_dlpack(self) -> object:
        """A DLPack capsule sharing this tensor's memory (torch.from_dlpack and friends take it)."""
        return self._export()

    def __dlpack__(
        self, *, stream: Any = None, max_version: tuple[int, int] | None = None, **_: Any
    ) -> object:
        return self._export(max_version)

    def _export(self, max_version: tuple[int, int] | None = None) -> object:
        if self._dtype == TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if versioned:
            capsule = self._array.__dlpack__(max_version=(1, 0))
        elif self._array.flags.writeable:
            capsule = self._array.__dlpack__()
        else:
            # the unversioned format cannot mark memory read-only, so numpy refuses to share it: a copy
            capsule = np.array(self._array).__dlpack__()
        if self._dtype == TYPE_BF16:  # stored as uint16 bits: retag so consumers see bfloat16
            _dl_tensor(capsule).dtype.code = _DL_BFLOAT
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or of an object with `__dlpack__`
        (torch tensors, numpy arrays, ...). CPU memory only; C-contiguous only, as in Triton."""
        name = _check_tensor_name(name)
        if _is_capsule(tensor):
            capsule = tensor
            _check_device(int(_dl_tensor(capsule).device.device_type))
        elif hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__"):
            _check_device(int(tensor.__dlpack_device__()[0]))
            try:  # the versioned format keeps the memory writable in numpy
                capsule = tensor.__dlpack__(stream=None, max_version=(1, 0))
            except TypeError:
                capsule = tensor.__dlpack__(stream=None)
        else:
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        dl = _dl_tensor(capsule)
        bf16 = dl.dtype.code == _DL_BFLOAT and dl.dtype.bits == 16 and dl.dtype.lanes == 1
        if bf16:
            dl.dtype.code = _DL_UINT  # numpy reads the bits as uint16; the Tensor remembers BF16
        try:
            array = np.from_dlpack(_CapsuleHolder(capsule))
        except (BufferError, RuntimeError, TypeError) as e:
            raise TritonModelException(f"Unable to read DLPack tensor '{name}': {e}") from None
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
                "C-Order are supported."
            )
        if bf16:
            return _tensor_from_storage(name, array, TYPE_BF16)
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor(name={self._name!r}, dtype={_WIRE_NAMES[self._dtype - 1]}, shape={self.shape()})"


def _tensor_from_storage(name: str, array: npt.NDArray[Any], triton_dtype: int) -> Tensor:
    tensor = Tensor.__new__(Tensor)
    tensor._name = name
    tensor._dtype = triton_dtype
    tensor._array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    return tensor


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


# ---------------------------------------------------------------------------------------------------
# Memory preference and traces (accepted for compatibility; tcli has CPU memory only)
# ---------------------------------------------------------------------------------------------------


class MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    __slots__ = ("preferred_device_id", "preferred_memory_type")

    def __init__(self, preferred_memory_type: MemoryType, preferred_device_id: int = 0) -> None:
        if not isinstance(preferred_memory_type, MemoryType):
            raise TypeError(
                "PreferredMemory(): preferred_memory_type must be TRITONSERVER_MEMORY_CPU or _GPU"
            )
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = int(preferred_device_id)


class InferenceTrace:
    """A request's trace; tcli does not trace python models, so there is no context."""

    def get_context(self) -> str | None:
        return None


# ---------------------------------------------------------------------------------------------------
# Parameters (requests and responses carry {str: bool | int | str}, shown to models as a JSON string)
# ---------------------------------------------------------------------------------------------------


def _parameters_json(parameters: object) -> tuple[dict[str, bool | int | str], str]:
    if parameters is None:
        return {}, "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters), json.dumps(parameters)


# ---------------------------------------------------------------------------------------------------
# Responses and response senders
# ---------------------------------------------------------------------------------------------------


class InferenceResponse:
    """`InferenceResponse(output_tensors=[], error=None, parameters=None)`.

    `parameters` ({str: bool|int|str}) and `.parameters()` (a JSON string) come from Triton releases
    after 2.51; 2.51 itself rejects the argument."""

    __slots__ = ("_error", "_output_tensors", "_parameters", "_parameters_json")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        if output_tensors is None:
            output_tensors = []
        if not isinstance(output_tensors, (list, tuple)):
            raise TypeError(
                f"InferenceResponse(): output_tensors must be a list of Tensor, got {type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if tensor is None:
                raise TritonModelException("Output tensor for inference response should not be empty.")
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must hold Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse(): error must be a TritonError, got {type(error).__name__}")
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters, self._parameters_json = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters_json


class ResponseTransport(Protocol):
    """What the server supplies behind each InferenceResponseSender: deliver one response (or a
    flags-only final marker) to the client, and report whether the client cancelled."""

    def send(self, response: InferenceResponse | None, flags: int, /) -> None: ...

    def is_cancelled(self) -> bool: ...


class InferenceResponseSender:
    """`request.get_response_sender()`: `send(response=None, flags=0)`, `is_cancelled()`.

    This class enforces Triton's rules (flags, final response, one response for non-decoupled models);
    the server's ResponseTransport only moves the responses."""

    def __init__(self, transport: ResponseTransport, decoupled: bool) -> None:
        self._transport = transport
        self._decoupled = decoupled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"send(): response must be an InferenceResponse or None, got {type(response).__name__}"
            )
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final before "
                        "sending a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._sent += 1
        try:
            self._transport.send(response, flags)
        except TritonModelException:
            raise
        except Exception as e:
            raise TritonModelException(f"An error occurred while sending a response: {e}") from e

    def is_cancelled(self) -> bool:
        return bool(self._transport.is_cancelled())

    # host side ---------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the final flag was sent, or the server closed the sender."""
        return self._closed

    @property
    def response_count(self) -> int:
        """How many send() calls went through (responses and flags-only finals)."""
        return self._sent

    def close(self) -> None:
        """Server side: refuse further sends (Triton does this when execute raised)."""
        with self._lock:
            self._closed = True


class ResponseIterator:
    """What a decoupled BLS `exec(decoupled=True)` returns: iterate the responses, or `cancel()`."""

    def __init__(
        self, responses: Iterable[InferenceResponse], cancel: Callable[[], None] | None = None
    ) -> None:
        self._responses = iter(responses)
        self._cancel = cancel

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel()


# ---------------------------------------------------------------------------------------------------
# Requests (as execute receives them, and as BLS builds them)
# ---------------------------------------------------------------------------------------------------


class BLSExecutor(Protocol):
    """The server's BLS hook: run `request` on model_name/model_version (-1 = latest) and return an
    InferenceResponse (errors go in response.error(), as Triton does for a model that is not ready),
    or for decoupled=True a ResponseIterator."""

    def __call__(
        self, request: InferenceRequest, model_name: str, model_version: int, decoupled: bool, /
    ) -> InferenceResponse | ResponseIterator: ...


_bls_executor: BLSExecutor | None = None
# optional: a coroutine variant for async_exec; without it async_exec runs the sync hook in a thread
_bls_async_executor: Callable[..., Awaitable[InferenceResponse | ResponseIterator]] | None = None


class InferenceRequest:
    """A request, either received by `execute` or built by a model for BLS:

    `InferenceRequest(request_id="", correlation_id=0, inputs, requested_output_names, model_name,
    model_version=-1, flags=0, timeout=0, preferred_memory=..., trace=..., parameters=None)`."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str] | None = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        missing = [
            n
            for n, v in (
                ("inputs", inputs),
                ("requested_output_names", requested_output_names),
                ("model_name", model_name),
            )
            if v is None
        ]
        if missing:
            raise TypeError(f"InferenceRequest(): missing required argument(s): {', '.join(missing)}")
        assert inputs is not None and requested_output_names is not None and model_name is not None
        if not isinstance(request_id, str) or not isinstance(model_name, str):
            raise TypeError("InferenceRequest(): request_id and model_name must be str")
        if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, Tensor) for t in inputs):
            raise TypeError("InferenceRequest(): inputs must be a list of Tensor")
        if isinstance(requested_output_names, str) or not all(
            isinstance(n, str) for n in requested_output_names
        ):
            raise TypeError("InferenceRequest(): requested_output_names must be a list of str")
        for label, number in (("model_version", model_version), ("flags", flags), ("timeout", timeout)):
            if isinstance(number, bool) or not isinstance(number, int):
                raise TypeError(f"InferenceRequest(): {label} must be an int")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = request_id
        self._correlation_id: int | str = correlation_id
        self._inputs = list(inputs)
        self._requested = list(dict.fromkeys(requested_output_names))
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory(TRITONSERVER_MEMORY_CPU)
        self._trace = trace or InferenceTrace()
        self._parameters_json: str | None
        self._parameters, self._parameters_json = _parameters_json(parameters)
        self._sender: InferenceResponseSender | None = None
        self._cancelled: Callable[[], bool] | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    # what every request offers ---------------------------------------------------------------------
    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        """Timeout in microseconds (0 = none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string."""
        if self._parameters_json is None:  # a request the server made: encoded when first asked
            self._parameters_json = json.dumps(self._parameters, separators=(",", ":"))  # as Triton has it
        return self._parameters_json

    def requested_output_names(self) -> set[str]:
        """A set, as Triton returns it (so `names[0]` fails there too)."""
        return set(self._requested)

    def trace(self) -> InferenceTrace:
        return self._trace

    # execute-side --------------------------------------------------------------------------------
    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() is only available on the requests passed to execute(), "
                "not on requests built for BLS"
            )
        return self._sender

    def is_cancelled(self) -> bool:
        if self._cancelled is None:
            raise TritonModelException("Cannot determine request cancellation")
        return bool(self._cancelled())

    def set_release_flags(self, flags: int) -> None:
        """TRITONSERVER_REQUEST_RELEASE_ALL (default) or _RESCHEDULE (hand the request back to the
        sequence batcher to be executed again)."""
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(
                f"Invalid release flags {flags}: use TRITONSERVER_REQUEST_RELEASE_ALL or "
                "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE"
            )
        self._release_flags = flags

    # BLS -------------------------------------------------------------------------------------------
    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on `model_name` and wait: an InferenceResponse, or for decoupled=True an
        iterator of responses."""
        if not isinstance(decoupled, bool):
            raise TypeError("exec(): decoupled must be a bool")
        executor = _bls_executor
        if executor is None:
            raise TritonModelException(
                f"Unable to run BLS request for model '{self._model_name}': BLS needs the model to run "
                "inside the tcli server (no BLS executor is installed)"
            )
        try:
            return executor(self, self._model_name, self._model_version, decoupled)
        except TritonModelException:
            raise
        except Exception as e:
            raise TritonModelException(f"An error occurred while performing BLS request: {e}") from e

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[InferenceResponse | ResponseIterator]:
        """`await request.async_exec()`: like exec() without blocking the model's event loop."""
        loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine, as in Triton
        async_executor = _bls_async_executor
        if async_executor is not None:
            return asyncio.ensure_future(
                async_executor(self, self._model_name, self._model_version, decoupled)
            )
        return loop.run_in_executor(None, functools.partial(self.exec, decoupled))

    def __repr__(self) -> str:
        names = [t.name() for t in self._inputs]
        return f"InferenceRequest(request_id={self._request_id!r}, model_name={self._model_name!r}, inputs={names})"


# ---------------------------------------------------------------------------------------------------
# Model management from python (explicit model control)
# ---------------------------------------------------------------------------------------------------


class ModelManager(Protocol):
    """The server's model-management hook. Failures raise (any exception; the message is kept)."""

    def load_model(self, model_name: str, config: str, files: dict[str, bytes], /) -> None: ...

    def unload_model(self, model_name: str, unload_dependents: bool, /) -> None: ...

    def is_model_ready(self, model_name: str, model_version: int, /) -> bool: ...


_model_manager: ModelManager | None = None


def _manager(action: str) -> ModelManager:
    manager = _model_manager
    if manager is None:
        raise TritonModelException(
            f"{action}: no model repository is available (the model is not running in tcli)"
        )
    return manager


def _manager_call(action: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except TritonModelException as e:
        raise TritonModelException(f"{action}: {e}") from None
    except Exception as e:
        message = getattr(e, "message", None)  # server.protocol.errors.TritonError carries the bare text
        raise TritonModelException(f"{action}: {message if isinstance(message, str) else e}") from None


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model; `config` is a JSON model config, `files` maps "file:<path>" to bytes."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError("load_model(): model_name and config must be str")
    file_map: dict[str, bytes] = {}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file paths and file contents"
            )
        for key, value in files.items():
            if not isinstance(key, str) or not isinstance(value, bytes):
                raise TypeError("load_model(): files must map str paths to bytes contents")
            file_map[key] = value
    action = "Failed to load model"
    manager = _manager(action)
    _manager_call(action, lambda: manager.load_model(model_name, config, file_map))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    if not isinstance(model_name, str) or not isinstance(unload_dependents, bool):
        raise TypeError("unload_model(): expected (model_name: str, unload_dependents: bool = False)")
    action = "Failed to unload model"
    manager = _manager(action)
    _manager_call(action, lambda: manager.unload_model(model_name, unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """`model_version` is a string; "" means the latest version."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError("is_model_ready(): expected (model_name: str, model_version: str = '')")
    action = "Failed to check model readiness"
    version = -1
    if model_version:
        try:
            version = int(model_version)
        except ValueError:
            raise TritonModelException(
                f"{action}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            ) from None
        if version < 0:
            raise TritonModelException(
                f"{action}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            )
    manager = _manager(action)
    return bool(_manager_call(action, lambda: manager.is_model_ready(model_name, version)))


# ---------------------------------------------------------------------------------------------------
# Model scope: which model is running in this context (for get_model_dir, logs and the BLS hook)
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelScope:
    model_name: str
    model_version: str
    model_dir: str  # the version folder holding model.py, as Triton's get_model_dir() returns it


_MODEL_SCOPE: contextvars.ContextVar[ModelScope | None] = contextvars.ContextVar(
    "tcli_model_scope", default=None
)
_default_scope: ModelScope | None = None


def get_model_dir() -> str:
    """The folder of the running model file (`<repository>/<model>/<version>`)."""
    scope = current_model_scope()
    if scope is None:
        raise TritonModelException(
            "get_model_dir() is only available while the server runs the model "
            "(auto_complete_config, initialize, execute, finalize)"
        )
    return scope.model_dir


# ---------------------------------------------------------------------------------------------------
# Logger: Triton's python Logger, on Python logging (logger "tcli.python_model")
# ---------------------------------------------------------------------------------------------------


class LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_Level = LogLevel  # for annotations inside Logger, where the name LogLevel is the class attribute

_PY_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


def _emit(message: str, level: _Level) -> None:
    if not isinstance(message, str):
        raise TypeError(f"Logger: message must be a str, got {type(message).__name__}")
    scope = current_model_scope()
    extra = {"model_name": scope.model_name, "model_version": scope.model_version} if scope else None
    # stacklevel 3: the record names the model's file and line, as Triton's log lines do
    _LOG.log(_PY_LEVELS[LogLevel(level)], message, stacklevel=3, extra=extra)


class Logger:
    """`pb_utils.Logger.log_info(msg)`, `.log_warn`, `.log_error`, `.log_verbose` (DEBUG in Python
    logging), and `Logger.log(msg, level=Logger.INFO)`."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _Level = LogLevel.INFO) -> None:
        if not isinstance(level, LogLevel):
            raise TypeError("Logger.log(): level must be Logger.INFO, WARNING, ERROR or VERBOSE")
        _emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE)


# ---------------------------------------------------------------------------------------------------
# Custom metrics: MetricFamily / Metric kept in an in-process registry the server exports
# ---------------------------------------------------------------------------------------------------


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_KIND_NAMES = {MetricKind.COUNTER: "COUNTER", MetricKind.GAUGE: "GAUGE", MetricKind.HISTOGRAM: "HISTOGRAM"}


class _MetricState:
    """One time series (family + label values); shared by every Metric object with those labels."""

    def __init__(self, labels: tuple[tuple[str, str], ...], bounds: tuple[float, ...] | None) -> None:
        self.labels = labels
        self.value = 0.0
        self.bounds = bounds
        self.bucket_counts = [0] * len(bounds) if bounds is not None else None
        self.sum = 0.0
        self.count = 0
        self.refs = 0


class _FamilyState:
    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: dict[tuple[tuple[str, str], ...], _MetricState] = {}
        self.refs = 0


@dataclass(frozen=True)
class MetricSample:
    """One time series. Counters and gauges have `value`; histograms have `bucket_bounds` with
    cumulative `bucket_counts` (the +Inf bucket is `count`), `sum` and `count`."""

    labels: dict[str, str]
    value: float | None
    bucket_bounds: tuple[float, ...] | None = None
    bucket_counts: tuple[int, ...] | None = None
    sum: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class MetricFamilySnapshot:
    name: str
    description: str
    kind: str  # "counter" | "gauge" | "histogram", as the Prometheus TYPE line spells it
    samples: tuple[MetricSample, ...]


class MetricRegistry:
    """Every custom metric family python models created and still hold. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _FamilyState] = {}

    # used by MetricFamily / Metric ----------------------------------------------------------------
    def _acquire_family(self, name: str, description: str, kind: MetricKind) -> _FamilyState:
        if not _METRIC_NAME.fullmatch(name):
            raise TritonModelException("Error when creating MetricFamily: Invalid metric name")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _FamilyState(name, description, kind)
            elif family.kind != kind:
                raise TritonModelException(
                    "Error when creating MetricFamily: Family name already exists with different type"
                )
            family.refs += 1  # same name and kind: the same family (the first description stays)
            return family

    def _release_family(self, family: _FamilyState) -> None:
        with self._lock:
            family.refs -= 1
            if family.refs <= 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    def _acquire_metric(
        self, family: _FamilyState, labels: dict[str, str], bounds: tuple[float, ...] | None
    ) -> _MetricState:
        for key, value in labels.items():
            if not isinstance(key, str) or not _LABEL_NAME.fullmatch(key) or key.startswith("__"):
                raise TritonModelException("Error when creating Metric: Invalid label name")
            if not isinstance(value, str):
                raise TritonModelException(
                    "Error when creating Metric: attempt to access JSON non-string as string"
                )
        if bounds is not None and any(b >= c for b, c in itertools.pairwise(bounds)):
            raise TritonModelException(
                "Error when creating Metric: Bucket Boundaries must be strictly sorted"
            )
        series = tuple(sorted(labels.items()))
        with self._lock:
            metric = family.metrics.get(series)
            if metric is None:
                metric = family.metrics[series] = _MetricState(series, bounds)
            metric.refs += 1
            return metric

    def _release_metric(self, family: _FamilyState, metric: _MetricState) -> None:
        with self._lock:
            metric.refs -= 1
            if metric.refs <= 0 and family.metrics.get(metric.labels) is metric:
                del family.metrics[metric.labels]

    def _update(self, metric: _MetricState, kind: MetricKind, op: str, value: float) -> float:
        kind_name = f"TRITONSERVER_METRIC_KIND_{_KIND_NAMES[kind]}"
        allowed = {
            MetricKind.COUNTER: ("increment", "value"),
            MetricKind.GAUGE: ("increment", "set", "value"),
            MetricKind.HISTOGRAM: ("observe",),
        }[kind]
        if op not in allowed:
            raise ValueError(f"{kind_name} does not support {op.capitalize()}")
        with self._lock:
            if op == "increment":
                if kind == MetricKind.COUNTER and value < 0.0:
                    raise ValueError(
                        f"{kind_name} can only be incremented monotonically by non-negative values."
                    )
                metric.value += value
            elif op == "set":
                metric.value = value
            elif op == "observe":
                assert metric.bounds is not None and metric.bucket_counts is not None
                for i, bound in enumerate(metric.bounds):
                    if value <= bound:
                        metric.bucket_counts[i] += 1
                metric.sum += value
                metric.count += 1
            return metric.value

    # read by the server -----------------------------------------------------------------------------
    def collect(self) -> list[MetricFamilySnapshot]:
        """A consistent copy of every family and its series, sorted by name."""
        with self._lock:
            out = []
            for family in sorted(self._families.values(), key=lambda f: f.name):
                samples = []
                for metric in family.metrics.values():
                    histogram = family.kind == MetricKind.HISTOGRAM
                    samples.append(
                        MetricSample(
                            labels=dict(metric.labels),
                            value=None if histogram else metric.value,
                            bucket_bounds=metric.bounds if histogram else None,
                            bucket_counts=tuple(metric.bucket_counts)
                            if histogram and metric.bucket_counts is not None
                            else None,
                            sum=metric.sum,
                            count=metric.count,
                        )
                    )
                out.append(
                    MetricFamilySnapshot(
                        family.name, family.description, family.kind.name.lower(), tuple(samples)
                    )
                )
            return out

    def render_prometheus(self) -> str:
        """The families in Prometheus text exposition format (HELP, TYPE, one line per series)."""
        lines: list[str] = []
        for family in self.collect():
            lines.append(f"# HELP {family.name} {_escape_help(family.description)}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            for sample in family.samples:
                if sample.bucket_bounds is None:
                    lines.append(f"{family.name}{_labels_text(sample.labels)} {_number(sample.value or 0.0)}")
                    continue
                assert sample.bucket_counts is not None
                for bound, count in zip(sample.bucket_bounds, sample.bucket_counts, strict=True):
                    labels = _labels_text({**sample.labels, "le": _number(bound)})
                    lines.append(f"{family.name}_bucket{labels} {count}")
                lines.append(
                    f"{family.name}_bucket{_labels_text({**sample.labels, 'le': '+Inf'})} {sample.count}"
                )
                lines.append(f"{family.name}_sum{_labels_text(sample.labels)} {_number(sample.sum)}")
                lines.append(f"{family.name}_count{_labels_text(sample.labels)} {sample.count}")
        return "\n".join(lines) + "\n" if lines else ""

    def clear(self) -> None:
        with self._lock:
            self._families.clear()


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items()) + "}"


METRICS = MetricRegistry()


def _metric_value(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"metric value must be a number, got {type(value).__name__}")
    return float(value)


class Metric:
    """One labelled series of a MetricFamily (create it with `family.Metric(labels=..., buckets=...)`)."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str], bounds: tuple[float, ...] | None
    ) -> None:
        assert family._state is not None
        self._family_state: _FamilyState = family._state
        self._kind = family._kind
        self._registry = family._registry
        self._state: _MetricState | None = self._registry._acquire_metric(self._family_state, labels, bounds)

    def _apply(self, op: str, prefix: str, value: float = 0.0) -> float:
        state = self._state
        if state is None:
            raise TritonModelException(
                f"{prefix}: Invalid metric operation as the corresponding 'MetricFamily' has been deleted. "
                "The 'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
                "been deleted."
            )
        try:
            return self._registry._update(state, self._kind, op, value)
        except ValueError as e:
            raise TritonModelException(f"{prefix}: {e}") from None

    def increment(self, value: float) -> None:
        self._apply("increment", "Failed to increment metric value", _metric_value(value))

    def set(self, value: float) -> None:
        self._apply("set", "Failed to set metric value", _metric_value(value))

    def observe(self, value: float) -> None:
        self._apply("observe", "Failed to observe metric value", _metric_value(value))

    def value(self) -> float:
        return self._apply("value", "Failed to get metric value")

    def _clear(self) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._registry._release_metric(self._family_state, state)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown there is nothing left to update
            self._clear()


class MetricFamily:
    """`MetricFamily(name, description, kind)` with kind MetricFamily.COUNTER, GAUGE or HISTOGRAM.

    Families live as long as the Python object (as in Triton): drop it and its series disappear."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not isinstance(name, str) or not isinstance(description, str) or not isinstance(kind, MetricKind):
            raise TypeError(
                "MetricFamily(): expected (name: str, description: str, kind: MetricFamily.COUNTER|GAUGE|HISTOGRAM)"
            )
        self._registry = METRICS
        self._kind = kind
        self._state: _FamilyState | None = None
        self._state = self._registry._acquire_family(name, description, kind)
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        bounds: tuple[float, ...] | None = None
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bounds = tuple(_metric_value(b) for b in buckets)
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        metric = Metric(self, labels or {}, bounds)
        self._metrics.add(metric)
        return metric

    def __del__(self) -> None:
        try:
            for metric in list(self._metrics):
                metric._clear()  # later operations on them fail, as Triton's do
            if self._state is not None:
                self._registry._release_family(self._state)
                self._state = None
        except Exception:  # interpreter shutdown
            pass


# ---------------------------------------------------------------------------------------------------
# ModelConfig: what auto_complete_config receives and returns
# ---------------------------------------------------------------------------------------------------


def _int_list(values: Iterable[Any]) -> list[Any]:
    """dims as numbers (protobuf's JSON printer writes int64 as strings; Triton's JSON has numbers)."""
    out: list[Any] = []
    for v in values:
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            out.append(v)
    return out


class ModelConfig:
    """The model configuration handed to `TritonPythonModel.auto_complete_config`.

    Built from Triton's JSON form of ModelConfig (a JSON string, as Triton passes it, or a dict).
    Errors are ValueErrors with Triton's wording."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        if isinstance(model_config, str):
            config = json.loads(model_config)
        else:
            config = json.loads(json.dumps(model_config))  # a private deep copy of plain JSON types
        if not isinstance(config, dict):
            raise TypeError("ModelConfig(): expected a JSON object")
        # Triton's JSON always carries these; a sparse dict (MessageToDict without defaults) may not
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        for section in ("input", "output"):
            entries = config.setdefault(section, [])
            for entry in entries:
                if "dims" in entry:
                    entry["dims"] = _int_list(entry["dims"])
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function "
                f"for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config "
                    f"function for model '{self._name}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, section: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name
        for prop in tensor:
            if prop not in valid:
                allowed = ", ".join(f"'{p}'" for p in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{section} '{tensor.get('name', '')}' in auto-complete-config function for model '{model}' "
                    f"contains property other than {allowed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{section} in auto-complete-config function for model '{model}' is missing 'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    f"{section} '{tensor['name']}' in auto-complete-config function for model '{model}' "
                    f"is missing '{prop}' property."
                )
        new = dict(tensor)
        new["dims"] = _int_list(new["dims"])
        for current in self._model_config[section]:
            if current.get("name") != new["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            current_dims = current.get("dims") or []
            if current_type != "TYPE_INVALID" and current_type != new["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype {current_type} for "
                    f"{section} '{new['name']}', model provides {new['data_type']}"
                )
            if current_dims and current_dims != new["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{new['name']}': the model expects dims {new['dims']} but the "
                    f"model configuration specifies dims {current_dims}"
                )
            if "optional" in current and "optional" in new and current["optional"] != new["optional"]:
                raise ValueError(
                    f"model '{model}', tensor '{new['name']}': the model expects optional {new['optional']} "
                    f"but the model configuration specifies optional {current['optional']}"
                )
            current["data_type"] = new["data_type"]
            current["dims"] = new["dims"]
            if "optional" in new:
                current["optional"] = new["optional"]
            return
        self._model_config[section].append(new)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{self._name}' "
                    "contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{self._name}', "
                    f"which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


# ===================================================================================================
# Host API: what the tcli server calls. Models written for Triton never use these.
# ===================================================================================================


def set_bls_executor(
    executor: BLSExecutor | None,
    async_executor: Callable[..., Awaitable[InferenceResponse | ResponseIterator]] | None = None,
) -> None:
    """Install (or with None remove) the hook behind InferenceRequest.exec()/async_exec()."""
    global _bls_executor, _bls_async_executor
    _bls_executor = executor
    _bls_async_executor = async_executor


def set_model_manager(manager: ModelManager | None) -> None:
    """Install (or remove) the hook behind load_model / unload_model / is_model_ready."""
    global _model_manager
    _model_manager = manager


def current_model_scope() -> ModelScope | None:
    return _MODEL_SCOPE.get() or _default_scope


@contextmanager
def model_scope(scope: ModelScope) -> Iterator[None]:
    """Run model code (auto_complete_config, initialize, execute, finalize) as `scope`, in this context."""
    token = _MODEL_SCOPE.set(scope)
    try:
        yield
    finally:
        _MODEL_SCOPE.reset(token)


def set_default_model_scope(scope: ModelScope | None) -> None:
    """The scope seen outside any model_scope() (e.g. threads the model starts itself). Meant for a
    process that hosts a single model; with several models in one process leave it None."""
    global _default_scope
    _default_scope = scope


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


def tensor_storage(tensor: Tensor) -> npt.NDArray[Any]:
    """The array behind a Tensor, BF16 included (as uint16 bits)."""
    return tensor._array


def dtype_to_wire(triton_dtype: int) -> str:
    """11 -> 'FP32', 13 -> 'BYTES', 14 -> 'BF16'; 'INVALID' for anything else."""
    return _WIRE_NAMES[triton_dtype - 1] if 1 <= triton_dtype <= len(_WIRE_NAMES) else "INVALID"


def wire_to_dtype(wire_type: str) -> int:
    """'FP32' -> 11; 0 (TYPE_INVALID) for an unknown name."""
    return _WIRE_NAMES.index(wire_type) + 1 if wire_type in _WIRE_NAMES else TYPE_INVALID


def config_to_dtype(config_type: str) -> int:
    """'TYPE_FP32' -> 11; 0 for an unknown name."""
    return _CONFIG_NAMES.index(config_type) + 1 if config_type in _CONFIG_NAMES else TYPE_INVALID


def error_code_name(error: TritonError) -> str:
    """The server.protocol.errors.ErrorCode member name for a model's TritonError ('INTERNAL', ...)."""
    return error.code().name


def _register_aliases() -> None:
    """One module object whichever name imported it first, so hooks installed through one name are
    seen by models importing the other."""
    this = sys.modules[__name__]
    for alias in ("triton_python_backend_utils", "server.backends.python.triton_python_backend_utils"):
        sys.modules.setdefault(alias, this)


_register_aliases()
