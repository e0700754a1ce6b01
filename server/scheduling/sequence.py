"""Sequence models: correlation IDs, START/END flags, and the control tensors Triton fills in.

This keeps every sequence's requests in order by running the model's requests one at a time, first
come first served. Slots, the `oldest` strategy and implicit state build on this (issue 4).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import invalid_arg
from server.protocol.types import Tensor
from server.scheduling.work import DefaultScheduler, WorkItem

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest


class SequenceScheduler(DefaultScheduler):
    """FIFO scheduler that checks sequence flags and fills control inputs before queueing."""

    serial = True  # one execution at a time keeps each sequence's requests in order

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self._model = config.name
        self._batched = config.max_batch_size > 0
        self._idle_ns = config.sequence_batching.max_sequence_idle_microseconds * 1000
        self._controls = [
            (control_input.name, enum_name(control, "kind"), control)
            for control_input in config.sequence_batching.control_input
            for control in control_input.control
        ]
        self._active: dict[int | str, int] = {}  # correlation id -> last request time
        self._lock = threading.Lock()

    def enqueue(self, item: WorkItem) -> None:
        self._admit(item.request)
        super().enqueue(item)

    def _admit(self, request: InferenceRequest) -> None:
        model = self._model
        correlation_id = request.correlation_id
        if correlation_id in (0, ""):
            raise invalid_arg(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            )
        if self._batched and request.batch_size(True) != 1:
            raise invalid_arg(
                f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
            )
        now = time.monotonic_ns()
        with self._lock:
            self._expire(now)
            if request.sequence_start:
                self._active[correlation_id] = now
            elif correlation_id not in self._active:
                raise invalid_arg(
                    f"inference request for sequence {correlation_id} to model '{model}' must specify the START "
                    "flag on the first request of the sequence"
                )
            if request.sequence_end:
                self._active.pop(correlation_id, None)
            else:
                self._active[correlation_id] = now
        request.inputs.extend(self._control_tensors(request))

    def _expire(self, now: int) -> None:
        stale = [cid for cid, seen in self._active.items() if now - seen > self._idle_ns]
        for cid in stale:
            del self._active[cid]

    def _control_tensors(self, request: InferenceRequest) -> list[Tensor]:
        shape = (1, 1) if self._batched else (1,)
        tensors = []
        for name, kind, control in self._controls:
            if kind == "CONTROL_SEQUENCE_CORRID":
                wire = datatypes.config_to_wire(enum_name(control, "data_type"))
                value: Any = request.correlation_id
                if wire == "BYTES":
                    data = np.array([str(value).encode()], dtype=object).reshape(shape)
                else:
                    data = np.array([value], dtype=datatypes.wire_to_numpy(wire)).reshape(shape)
                tensors.append(Tensor(name, wire, shape, data))
                continue
            flag = {
                "CONTROL_SEQUENCE_START": request.sequence_start,
                "CONTROL_SEQUENCE_END": request.sequence_end,
                "CONTROL_SEQUENCE_READY": True,
            }[kind]
            if len(control.int32_false_true):
                wire, value = "INT32", control.int32_false_true[int(flag)]
            elif len(control.fp32_false_true):
                wire, value = "FP32", control.fp32_false_true[int(flag)]
            else:
                wire, value = "BOOL", control.bool_false_true[int(flag)]
            tensors.append(
                Tensor(
                    name, wire, shape, np.array([value], dtype=datatypes.wire_to_numpy(wire)).reshape(shape)
                )
            )
        return tensors
