"""Memory a tensor's data lives in, as `tritonserver.MemoryBuffer`: where it starts, its size, and the
object that owns it (kept alive while the buffer is). tcli's memory is host memory (MemoryType.CPU);
where a device is named (a string, a MemoryType, a DLPack device, or a pair with its id) it is read as
`tritonserver` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tcli.inprocess._errors import InvalidArgumentError
from tcli.inprocess._types import DLDeviceType, MemoryType

DeviceOrMemoryType = tuple[MemoryType, int] | MemoryType | tuple[DLDeviceType, int] | str

_BY_NAME = {"CPU": MemoryType.CPU, "CPU_PINNED": MemoryType.CPU_PINNED, "GPU": MemoryType.GPU}
_BY_DLPACK = {DLDeviceType.kDLCPU: MemoryType.CPU, DLDeviceType.kDLCUDA: MemoryType.GPU}


@dataclass
class MemoryBuffer:
    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int  # bytes
    owner: Any  # holds the memory: it must stay alive while the buffer is used

    @staticmethod
    def from_dlpack(owner: Any) -> MemoryBuffer:
        """The buffer of a contiguous DLPack object (a numpy array, a torch CPU tensor, ...)."""
        if not hasattr(owner, "__dlpack__"):
            raise InvalidArgumentError("Object does not support DLpack protocol")
        return MemoryBuffer.of_array(owner, host_view(owner))

    @staticmethod
    def of_array(owner: Any, array: np.ndarray[Any, Any]) -> MemoryBuffer:
        """The buffer of `array` (contiguous host memory), owned by `owner`."""
        if not array.flags.c_contiguous:
            raise InvalidArgumentError("Only contiguous memory is supported")
        return MemoryBuffer(int(array.ctypes.data), MemoryType.CPU, 0, int(array.nbytes), owner)


def host_view(obj: Any) -> np.ndarray[Any, Any]:
    """A numpy view of a DLPack object's memory (no copy); the view is dropped by the caller, so only the
    buffer's owner keeps the memory."""
    try:
        return np.from_dlpack(obj)
    except Exception as error:  # a device numpy cannot read (a GPU), or no DLPack at all
        raise InvalidArgumentError(f"Object does not support DLPack protocol: {error}") from None


def parse_device(device: DeviceOrMemoryType) -> tuple[MemoryType, int]:
    """A device or memory type as `tritonserver` accepts one: "cpu", "gpu:1", MemoryType.CPU,
    (MemoryType.GPU, 0) or (DLDeviceType.kDLCPU, 0)."""
    if isinstance(device, tuple):
        kind, number = device[0], device[1]
        if isinstance(kind, MemoryType):
            return kind, int(number)
        if isinstance(kind, DLDeviceType):
            if kind not in _BY_DLPACK:
                raise InvalidArgumentError(
                    f"Unsupported DLPack device type. Can't convert {kind} to Triton server memory type"
                )
            return _BY_DLPACK[kind], int(number)
        raise InvalidArgumentError(f"Invalid memory type {device}")
    if isinstance(device, MemoryType):
        return device, 0
    if isinstance(device, str):
        name, colon, digits = device.partition(":")
        if ":" in digits:
            raise InvalidArgumentError(f"Invalid memory type string {device}")
        if name.upper() not in _BY_NAME:
            raise InvalidArgumentError(
                f"Unsupported Memory Type String. Can't convert {name.upper()} to Triton server memory type"
            )
        if colon and not digits.isdigit():
            raise InvalidArgumentError(f"Invalid memory type string {device}")
        return _BY_NAME[name.upper()], int(digits) if colon else 0
    raise InvalidArgumentError(
        f"Invalid memory type {device!r}: give 'cpu', a MemoryType, or a (MemoryType, id) pair"
    )
