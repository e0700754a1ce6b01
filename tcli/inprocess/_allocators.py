"""Where a response's outputs are written, as `tritonserver`'s allocators say: a `MemoryAllocator`
gives a `MemoryBuffer` for each output (`allocate(size, memory_type, memory_type_id)`) and the output's
bytes are written into it; the response's tensor is that buffer, its owner the allocator's object.

The allocator is the request's `output_memory_allocator`, else `default_memory_allocators` for the
memory type asked (`output_memory_type`, host memory when none is), as in `tritonserver`. The default
host allocator would give fresh host memory to copy into; the server's own output array is just that,
so it is kept without a copy. tcli writes host memory only: a buffer elsewhere (a GPU) is refused.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from tcli.inprocess._errors import InternalError, InvalidArgumentError, TritonError, UnsupportedError
from tcli.inprocess._memorybuffer import MemoryBuffer, parse_device
from tcli.inprocess._tensor import Tensor
from tcli.inprocess._types import MemoryType

_HOST = (MemoryType.CPU, MemoryType.CPU_PINNED)


class MemoryAllocator(ABC):
    """A way to allocate the memory of output tensors: subclass it and give `allocate`."""

    @abstractmethod
    def allocate(self, size: int, memory_type: MemoryType, memory_type_id: int) -> MemoryBuffer:
        """A buffer of at least `size` bytes (it need not be of the memory type asked)."""


class CPUAllocator(MemoryAllocator):
    """Host memory from numpy, the array the buffer's owner."""

    def allocate(self, size: int, memory_type: MemoryType, memory_type_id: int) -> MemoryBuffer:
        return MemoryBuffer.from_dlpack(np.empty(size, np.byte))


# one dict, shared with whoever imports it: tritonserver's users add and remove allocators here
default_memory_allocators: dict[MemoryType, MemoryAllocator] = {MemoryType.CPU: CPUAllocator()}


class OutputPlacement:
    """The allocator and memory type a request's outputs go to, chosen as each response arrives
    (a memory type nobody can serve is refused then, as `tritonserver` refuses it)."""

    def __init__(self, memory_type: Any, allocator: MemoryAllocator | None) -> None:
        self.asked = memory_type
        self.allocator = allocator

    def place(self, outputs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The outputs in memory of the chosen allocator. Raises InvalidArgumentError for a memory type
        without an allocator; an allocator's failure as InternalError (the response's error)."""
        if self.asked is None and self.allocator is None and _is_default_host():
            return outputs
        memory_type, memory_type_id = MemoryType.CPU, 0
        if self.asked is not None:
            try:
                memory_type, memory_type_id = parse_device(self.asked)
            except TritonError as error:
                raise InvalidArgumentError(f"Memory type {self.asked} not supported: {error}") from None
        allocator = self.allocator or default_memory_allocators.get(memory_type)
        if allocator is None and memory_type == MemoryType.CPU_PINNED:  # host memory all the same
            allocator = default_memory_allocators.get(MemoryType.CPU)
        if allocator is None:
            asked = memory_type if self.asked is None else self.asked
            raise InvalidArgumentError(
                f"Memory type {asked} not supported: default_memory_allocators has no allocator for "
                f"{memory_type}, and tcli keeps tensors in host memory"
            )
        if type(allocator) is CPUAllocator:  # fresh host memory: the server's array is that already
            return outputs
        return {
            name: _written(name, tensor, allocator, memory_type, memory_type_id)
            for name, tensor in outputs.items()
        }


def _is_default_host() -> bool:
    return type(default_memory_allocators.get(MemoryType.CPU)) is CPUAllocator


def _written(
    name: str, tensor: Tensor, allocator: MemoryAllocator, memory_type: MemoryType, memory_type_id: int
) -> Tensor:
    size = tensor.size
    try:
        buffer = allocator.allocate(size, memory_type, memory_type_id)
    except Exception as error:  # the user's code: its failure is the response's, as in tritonserver
        raise InternalError(f"output '{name}': failure in allocator: {error}") from None
    if not isinstance(buffer, MemoryBuffer):
        raise InternalError(
            f"output '{name}': the allocator returned {type(buffer).__name__}, not a MemoryBuffer"
        )
    if buffer.memory_type not in _HOST:
        raise UnsupportedError(
            f"output '{name}': the allocator gave {buffer.memory_type} memory; tcli writes outputs to host "
            "memory only"
        )
    if buffer.size < size:
        raise InternalError(
            f"output '{name}': the allocator gave {buffer.size} bytes, the output needs {size}"
        )
    if size:
        ctypes.memmove(buffer.data_ptr, tensor.data_ptr, size)
    placed = MemoryBuffer(buffer.data_ptr, buffer.memory_type, buffer.memory_type_id, size, buffer.owner)
    return Tensor(tensor.data_type, tensor.shape, placed)
