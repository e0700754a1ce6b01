"""Tensors in and out of the in-process API, as `tritonserver.Tensor`: a data type, a shape and the
`MemoryBuffer` holding the data (a BYTES tensor's buffer holds Triton's serialized form: each element
as a 4-byte length and its bytes).

DLPack both ways, without copying: `Tensor.from_dlpack(array)` keeps the array as its buffer's owner,
and `numpy.from_dlpack(tensor)` (torch.from_dlpack, ...) reads the buffer in the tensor's shape at that
moment, the array it gives keeping the tensor alive, as `tritonserver`'s tensors do (one reference
each way; tests/integration/test_inprocess_tensors.py counts them). A response's outputs own the
server's output arrays.

Inputs are what `tritonserver` accepts, and a little more: numpy arrays, lists (through
`numpy.array`), `Tensor`s, any object with `__dlpack__` (a torch tensor), and Python scalars. `as_input`
turns one into the server's tensor without copying a contiguous numeric array (it becomes a read-only
view, so a model cannot write into the caller's array).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.protocol import bytes_codec, datatypes
from server.protocol import types as core
from tcli.inprocess._errors import InvalidArgumentError, UnsupportedError
from tcli.inprocess._memorybuffer import DeviceOrMemoryType, MemoryBuffer, host_view, parse_device
from tcli.inprocess._types import DataType, DLDeviceType, MemoryType

_RAW = datatypes.raw_dtypes()  # wire name -> numpy dtype of its bytes (BYTES has none)


class _Export:
    """What a numpy view of a tensor's buffer is made from: the array interface of the buffer in the
    tensor's current shape, and the tensor itself, kept alive by the view (its `base`)."""

    __slots__ = ("__array_interface__", "tensor")

    def __init__(self, tensor: Tensor, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
        self.tensor = tensor
        buffer = tensor.memory_buffer
        if int(np.prod(shape)) * dtype.itemsize > buffer.size:
            raise InvalidArgumentError(
                f"Tensor shape {list(shape)} needs {int(np.prod(shape)) * dtype.itemsize} bytes, its buffer "
                f"holds {buffer.size}"
            )
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (buffer.data_ptr, False),
            "version": 3,
        }


@dataclass
class Tensor:
    data_type: DataType
    shape: Sequence[int]
    memory_buffer: MemoryBuffer

    # tritonserver's properties ---------------------------------------------------------------------
    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return self.memory_buffer.memory_type

    @property
    def memory_type_id(self) -> int:
        return self.memory_buffer.memory_type_id

    @property
    def size(self) -> int:
        """Bytes of the buffer (a BYTES tensor: its serialized form)."""
        return self.memory_buffer.size

    # DLPack ----------------------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        if stream not in (None, 0) or (stream is not None and not isinstance(stream, int)):
            raise UnsupportedError(
                f"DLPack stream synchronization on memory type {self.memory_type} and stream {stream} not "
                "supported"
            )
        return self._view().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return DLDeviceType.kDLCPU, self.memory_type_id

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        array = self._view() if self.data_type != DataType.BYTES else self.to_bytes_array()
        if dtype is not None and array.dtype != dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def _view(self) -> np.ndarray[Any, Any]:
        """The buffer as a numpy array in the tensor's shape, holding the tensor."""
        if self.data_type == DataType.BYTES:
            raise InvalidArgumentError(
                "Unsupported Triton server data type. Can't convert BYTES to DLPack data type: read a BYTES "
                "tensor with to_bytes_array() or to_string_array()"
            )
        shape = tuple([int(d) for d in self.shape])  # a list, not a generator: see runner.py's outputs
        return np.asarray(_Export(self, _RAW[self.data_type.name], shape))

    # BYTES -----------------------------------------------------------------------------------------
    def to_bytes_array(self) -> np.ndarray[Any, Any]:
        """A BYTES tensor as a numpy object array of bytes, in the tensor's shape."""
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Tensor has data type {self.data_type.name} not BYTES")
        raw = np.asarray(_Export(self, np.dtype(np.uint8), (self.size,)))
        items = bytes_codec.deserialize(raw.data)
        return bytes_codec.object_array(items, tuple(self.shape))

    def to_string_array(self) -> np.ndarray[Any, Any]:
        """A BYTES tensor as a numpy array of str (each element decoded as UTF-8)."""
        raw = self.to_bytes_array()
        return np.array([item.decode() for item in raw.reshape(-1)], dtype=str).reshape(raw.shape)

    # devices ---------------------------------------------------------------------------------------
    def to_host(self) -> Tensor:
        return self.to_device("cpu")

    def to_device(self, device: DeviceOrMemoryType) -> Tensor:
        """Host memory only ("cpu", MemoryType.CPU, (DLDeviceType.kDLCPU, 0)): tcli has no GPU memory;
        a GPU is refused with UnsupportedError, as `tritonserver` refuses it without a GPU library."""
        memory_type, memory_type_id = parse_device(device)
        if memory_type in (MemoryType.CPU, MemoryType.CPU_PINNED):
            return self
        raise UnsupportedError(
            f"Conversion from {(self.memory_type, self.memory_type_id)} to {(memory_type, memory_type_id)} "
            "not supported: tcli keeps tensors in host memory"
        )

    # building --------------------------------------------------------------------------------------
    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        """A tensor over a DLPack object's memory, the object its owner (no copy)."""
        view = host_view(obj)
        return Tensor(_data_type(view.dtype, "tensor"), list(view.shape), MemoryBuffer.of_array(obj, view))

    @staticmethod
    def from_bytes_array(array: Sequence[str] | Sequence[bytes] | np.ndarray[Any, Any]) -> Tensor:
        """A BYTES tensor of str or bytes elements (str as UTF-8), serialized into new host memory."""
        given = np.asarray(array) if not isinstance(array, np.ndarray) else array
        if given.dtype.kind not in ("O", "S", "U"):
            raise InvalidArgumentError(
                f"Unsupported conversion from {array} to Triton BYTES Tensor. Got {_data_type(given.dtype, 'tensor').name}"
            )
        return _serialized(given)

    from_string_array = from_bytes_array

    @staticmethod
    def _from_server(tensor: core.Tensor) -> Tensor:
        """An output of a response: the server's array is the buffer's owner."""
        datatype = DataType[tensor.datatype]
        if datatype == DataType.BYTES:
            return _serialized(np.asarray(tensor.data, dtype=object).reshape(tensor.shape))
        array = np.ascontiguousarray(tensor.data)
        return Tensor(datatype, list(tensor.shape), MemoryBuffer.of_array(array, array))


def _serialized(array: np.ndarray[Any, Any]) -> Tensor:
    serialized = bytes_codec.serialize(array)
    raw = np.frombuffer(serialized, dtype=np.uint8) if serialized else np.zeros(0, np.uint8)
    return Tensor(DataType.BYTES, list(array.shape), MemoryBuffer.of_array(raw, raw))


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
    return bytes_codec.object_array([bytes_codec.as_bytes(item) for item in array.reshape(-1)], array.shape)


def as_input(name: str, value: Any) -> core.Tensor:
    """The server's tensor for input `name` from what a caller passes (see the module docstring)."""
    if isinstance(value, Tensor):
        array = value.to_bytes_array() if value.data_type == DataType.BYTES else value._view()
    elif isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, (list, tuple, int, float, bool, str, bytes, np.generic)):
        array = np.array(value)
    elif hasattr(value, "__dlpack__"):
        array = host_view(value)
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
        array = np.ascontiguousarray(array, dtype=_RAW[wire])
        if array.flags.writeable:
            array = array.view()
            array.flags.writeable = False  # the model sees the caller's memory; it must not change it
    return core.Tensor(name, wire, tuple(array.shape), array)
