"""Tensors in and out of the in-process API.

A response's outputs are `Tensor`s as `tritonserver` hands them: `numpy.from_dlpack(tensor)` (or any
DLPack consumer: torch, cupy) reads a numeric one without a copy, `to_bytes_array()` /
`to_string_array()` a BYTES one. tcli's tensors live in host memory as numpy arrays, so there is no
memory buffer to manage; `numpy.asarray(tensor)` works too.

Inputs are what `tritonserver` accepts: numpy arrays, lists (through `numpy.array`), `Tensor`s and
any object with `__dlpack__` (a torch tensor). `as_input` turns one into the server's tensor without
copying a contiguous numeric array (it becomes a read-only view, so a model cannot write into the
caller's array).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from server.protocol import datatypes
from server.protocol import types as core
from server.protocol.tensors import as_bytes, serialize_bytes
from tcli.inprocess._errors import InvalidArgumentError, UnsupportedError
from tcli.inprocess._types import DataType, DLDeviceType, MemoryType


class Tensor:
    """A tensor in host memory: its Triton data type, shape and numpy array."""

    __slots__ = ("_array", "data_type", "shape")

    def __init__(self, data_type: DataType, shape: Sequence[int], array: np.ndarray[Any, Any]) -> None:
        self.data_type = data_type
        self.shape = tuple(shape)
        self._array = array

    def __repr__(self) -> str:
        return f"Tensor(data_type={self.data_type!r}, shape={list(self.shape)})"

    # tritonserver's properties ---------------------------------------------------------------------
    @property
    def memory_type(self) -> MemoryType:
        return MemoryType.CPU

    @property
    def memory_type_id(self) -> int:
        return 0

    @property
    def data_ptr(self) -> int:
        return int(self._host().ctypes.data)

    @property
    def size(self) -> int:
        """Bytes of the tensor's data (a BYTES tensor: its serialized form, 4-byte lengths and all)."""
        if self.data_type == DataType.BYTES:
            return len(serialize_bytes(self._array))
        return int(self._array.nbytes)

    # DLPack and numpy ------------------------------------------------------------------------------
    def __dlpack__(self, **kwargs: Any) -> Any:
        if self.data_type == DataType.BYTES:
            raise UnsupportedError("DLPack cannot carry a BYTES tensor: read it with to_bytes_array()")
        return self._host().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return DLDeviceType.kDLCPU, 0

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        array = self._host()
        if dtype is not None and array.dtype != dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def _host(self) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(self._array)

    def to_bytes_array(self) -> np.ndarray[Any, Any]:
        """A BYTES tensor as a numpy object array of bytes, in the tensor's shape."""
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(
                f"Tensor has data type {self.data_type.name}, not BYTES: use numpy.from_dlpack()"
            )
        array = np.empty(self._array.size, dtype=object)
        array[:] = [as_bytes(item) for item in self._array.reshape(-1)]
        return array.reshape(self.shape)

    def to_string_array(self) -> np.ndarray[Any, Any]:
        """A BYTES tensor as a numpy array of str (each element decoded as UTF-8)."""
        raw = self.to_bytes_array()
        return np.array([item.decode() for item in raw.reshape(-1)], dtype=str).reshape(raw.shape)

    def to_host(self) -> Tensor:
        return self

    def to_device(self, device: Any) -> Tensor:
        """Only host memory ("cpu", MemoryType.CPU, kDLCPU): tcli serves no GPU memory."""
        kind = device[0] if isinstance(device, tuple) else device
        if kind in ("cpu", MemoryType.CPU, MemoryType.CPU_PINNED, DLDeviceType.kDLCPU) or str(
            kind
        ).startswith("cpu"):
            return self
        raise UnsupportedError(f"tcli keeps tensors in host memory: cannot move one to {device!r}")

    # building --------------------------------------------------------------------------------------
    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        array = np.from_dlpack(obj)
        return Tensor(_data_type(array.dtype, "tensor"), array.shape, array)

    @staticmethod
    def from_bytes_array(array: Sequence[str] | Sequence[bytes] | np.ndarray[Any, Any]) -> Tensor:
        host = _bytes_array(np.asarray(array, dtype=object))
        return Tensor(DataType.BYTES, host.shape, host)

    from_string_array = from_bytes_array

    @staticmethod
    def _from_server(tensor: core.Tensor) -> Tensor:
        return Tensor(DataType[tensor.datatype], tensor.shape, np.asarray(tensor.data))


def _data_type(dtype: np.dtype[Any], name: str) -> DataType:
    try:
        return DataType[datatypes.numpy_to_wire(dtype)]
    except KeyError:
        raise InvalidArgumentError(
            f"input '{name}': numpy dtype {dtype} has no Triton data type; give a bool, integer, float or "
            "bytes/str array"
        ) from None


def _bytes_array(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An object array of bytes in `array`'s shape (str elements encoded as UTF-8)."""
    flat = np.empty(array.size, dtype=object)
    flat[:] = [as_bytes(item) for item in array.reshape(-1)]
    return flat.reshape(array.shape)


def as_input(name: str, value: Any) -> core.Tensor:
    """The server's tensor for input `name` from what a caller passes (see the module docstring)."""
    if isinstance(value, Tensor):
        array = value._array
    elif isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, (list, tuple, int, float, bool, str, bytes, np.generic)):
        array = np.array(value)
    elif hasattr(value, "__dlpack__"):
        array = np.from_dlpack(value)
    else:
        raise InvalidArgumentError(
            f"input '{name}': {type(value).__name__} is not supported; give a numpy array, a list, a "
            "tcli.inprocess.Tensor or an object with __dlpack__"
        )
    wire = _data_type(array.dtype, name).name
    if wire == "BYTES":
        if array.dtype != object or not all(isinstance(item, bytes) for item in array.reshape(-1)):
            array = _bytes_array(array)
    else:
        array = np.ascontiguousarray(array, dtype=datatypes.raw_dtypes()[wire])
        if array.flags.writeable:
            array = array.view()
            array.flags.writeable = False  # the model sees the caller's memory; it must not change it
    return core.Tensor(name, wire, tuple(array.shape), array)
