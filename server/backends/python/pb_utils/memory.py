"""Memory preference and traces, accepted for compatibility: tcli has CPU memory only and does not
trace python models.
"""

from __future__ import annotations

import enum


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
