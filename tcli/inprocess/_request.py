"""An inference request of the in-process API, named as `tritonserver.InferenceRequest` names its
fields, and its translation into the server's request (`server/protocol/types.py`): the same
parameters the HTTP and gRPC codecs read off the wire (sequence_id, sequence_start, sequence_end,
priority, timeout) and the same input tensors.

Sequences: Triton's way is `correlation_id` and `flags` (RequestFlag.SEQUENCE_START | SEQUENCE_END);
tritonclient's names `sequence_id`, `sequence_start`, `sequence_end` are accepted as well.
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import Any

from server.protocol import types as core
from tcli.inprocess._allocators import MemoryAllocator, OutputPlacement
from tcli.inprocess._errors import InvalidArgumentError
from tcli.inprocess._handles import ModelHandle
from tcli.inprocess._tensor import as_input
from tcli.inprocess._types import RequestFlag


@dataclass
class InferenceRequest:
    model: ModelHandle
    request_id: str | None = None
    flags: int = 0  # RequestFlag: 1 starts a sequence, 2 ends it
    correlation_id: int | str | None = None  # the sequence's id
    priority: int = 0  # 0: the model's default priority level
    timeout: int = 0  # microseconds in the queue; 0: the model's default
    inputs: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, str | int | bool | float] = field(default_factory=dict)
    # where outputs go: host memory only ("cpu", MemoryType.CPU); another is refused as each response
    # arrives, as `tritonserver` refuses it (InvalidArgumentError, raised by the iterator)
    output_memory_type: Any = None
    # gives the memory outputs are written into (tritonserver.MemoryAllocator); default: the
    # allocator of default_memory_allocators for output_memory_type
    output_memory_allocator: MemoryAllocator | None = None
    response_queue: queue.SimpleQueue[Any] | asyncio.Queue[Any] | None = None  # also gets each response
    # tritonclient's names for the sequence controls
    sequence_id: int | str | None = None
    sequence_start: bool = False
    sequence_end: bool = False

    def output_placement(self) -> OutputPlacement:
        allocator = self.output_memory_allocator
        if allocator is not None and not callable(getattr(allocator, "allocate", None)):
            raise InvalidArgumentError(
                f"output_memory_allocator must have allocate(size, memory_type, memory_type_id) (a "
                f"tritonserver.MemoryAllocator), not {type(allocator).__name__}"
            )
        return OutputPlacement(self.output_memory_type, self.output_memory_allocator)

    def to_server(self) -> core.InferenceRequest:
        """The server's request: inputs converted (without copying contiguous numeric arrays),
        controls as the codecs put them in `parameters`."""
        parameters: dict[str, Any] = {}
        for key, value in self.parameters.items():
            if key.startswith("triton_"):
                raise InvalidArgumentError(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                    "specified."
                )
            if not isinstance(value, (str, int, float)):
                raise InvalidArgumentError(
                    f"parameter '{key}' has invalid type {type(value).__name__}: give a str, int, bool or float"
                )
            parameters[key] = value
        sequence = self.correlation_id if self.correlation_id is not None else self.sequence_id
        flags = RequestFlag(self.flags)
        start = self.sequence_start or RequestFlag.SEQUENCE_START in flags
        end = self.sequence_end or RequestFlag.SEQUENCE_END in flags
        if sequence is not None:  # both flags spelled out, as tritonclient sends them
            parameters.update(sequence_id=sequence, sequence_start=start, sequence_end=end)
        else:  # the model decides: a sequence model refuses a request without an id, others ignore them
            parameters.update({k: True for k, on in (("sequence_start", start), ("sequence_end", end)) if on})
        if self.priority:
            parameters["priority"] = int(self.priority)
        if self.timeout:
            parameters["timeout"] = int(self.timeout)
        version = "" if self.model.version < 0 else str(self.model.version)
        inputs = [as_input(name, value) for name, value in self.inputs.items()]
        return core.InferenceRequest(self.model.name, version, self.request_id or "", inputs, [], parameters)
