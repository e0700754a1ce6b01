"""Tensor: a named tensor in CPU memory, to and from numpy and DLPack."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from server.backends.python.pb_utils.datatypes import TYPE_BF16, TYPE_BYTES, numpy_to_triton_type
from server.backends.python.pb_utils.dlpack import (
    _DL_BFLOAT,
    _DL_CPU,
    _DL_UINT,
    _CapsuleHolder,
    _check_device,
    _dl_tensor,
    _is_capsule,
)
from server.backends.python.pb_utils.errors import TritonModelException
from server.protocol import bytes_codec, datatypes


def _check_tensor_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")
    return name


class Tensor:
    """A named tensor in CPU memory: `Tensor(name, numpy_array)`.

    BYTES tensors are numpy object arrays of bytes, or numpy bytes_ arrays (str and other elements
    are sent as their UTF-8; as_numpy() gives back the array given, as Triton's does). Like Triton,
    the array must be an np.ndarray (not a list or numpy scalar), and numpy str_ arrays are refused."""

    __slots__ = ("_array", "_dtype", "_name", "_wire")

    def __init__(self, name: str, numpy_array: npt.NDArray[Any]) -> None:
        # the argument types first, then the name's value, in the order of Triton's binding
        if not isinstance(name, str):
            raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
        if not isinstance(numpy_array, np.ndarray):
            raise TypeError(
                f"Tensor(): expected (name: str, numpy_array: numpy.ndarray), "
                f"got a {type(numpy_array).__name__} for tensor '{name}'"
            )
        self._name = _check_tensor_name(name)
        if not numpy_array.dtype.isnative:  # the wire is little-endian; Triton refuses these outright
            numpy_array = numpy_array.astype(numpy_array.dtype.newbyteorder("="))
        dtype = numpy_to_triton_type(numpy_array.dtype)
        if dtype is None:
            raise TritonModelException("NumPy dtype is not supported.")
        self._dtype = dtype
        self._array = numpy_array if numpy_array.flags.c_contiguous else np.ascontiguousarray(numpy_array)
        # BYTES elements become what the server sends now, as Triton's stub serializes them here: an
        # element that cannot be sent fails this line of the model, on either side of the process hop
        self._wire = _wire_bytes(self._array) if dtype == TYPE_BYTES else None

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
        return f"Tensor(name={self._name!r}, dtype={datatypes.number_to_wire(self._dtype)}, shape={self.shape()})"


def _wire_bytes(array: npt.NDArray[Any]) -> npt.NDArray[np.object_] | None:
    """A BYTES array's elements as bytes objects, as Triton's serialize_byte_tensor sends them: str as
    UTF-8, any other object as its str() in UTF-8, numpy bytes_ without their trailing NULs. None when
    the array holds bytes objects already (the usual case, which costs one pass over their types)."""
    if array.dtype.kind == "S":
        return array.astype(object)
    items = array.reshape(-1).tolist()
    if not items or set(map(type, items)) == {bytes}:  # one pass in C
        return None
    wire = np.empty(len(items), dtype=object)
    wire[:] = [bytes_codec.as_bytes(item) for item in items]  # UnicodeEncodeError for a lone surrogate
    return wire.reshape(array.shape)


def _tensor_from_storage(name: str, array: npt.NDArray[Any], triton_dtype: int) -> Tensor:
    tensor = Tensor.__new__(Tensor)
    tensor._name = name
    tensor._dtype = triton_dtype
    tensor._wire = None  # the server's own arrays: BYTES ones hold bytes objects
    tensor._array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    return tensor
