"""DLPack capsules: numpy does the work; ctypes only reads (and for BF16 retags) the capsule's dtype,
because numpy has no bfloat16 and refuses such capsules.
"""

from __future__ import annotations

import ctypes
from typing import Any

from server.backends.python.pb_utils.errors import TritonModelException

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
