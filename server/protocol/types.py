"""Transport-neutral inference types. Front ends decode wire bytes into these; the core never sees HTTP
or gRPC. Tensors hold numpy arrays (BYTES tensors: object arrays of `bytes`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from server.protocol.trace import Trace


@dataclass(slots=True)
class Tensor:
    name: str
    datatype: str  # wire name: FP32, INT32, BYTES, ...
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    class_count: int = 0  # classification extension: top-N "score:index[:label]" strings
    parameters: dict[str, Any] = field(default_factory=dict)  # transport hints (binary_data, shm) ride along


@dataclass(slots=True)
class InferenceRequest:
    model_name: str
    model_version: str = ""  # "" or "-1": the highest ready version
    id: str = ""
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)  # empty: every output
    parameters: dict[str, Any] = field(default_factory=dict)
    # its client went away (closed its connection, cancelled its call): if still queued, it never runs;
    # a python model running it sees is_cancelled(). Set through cancel().
    cancelled: bool = False
    _on_cancel: list[Callable[[], None]] | None = field(default=None, repr=False, compare=False)
    # its trace when the request was sampled for tracing (server/protocol/trace.py), else None
    trace: Trace | None = field(default=None, repr=False, compare=False)

    def cancel(self) -> None:
        """The client went away: mark the request and tell whoever asked (an instance process)."""
        self.cancelled = True
        callbacks, self._on_cancel = self._on_cancel, None
        for callback in callbacks or ():
            callback()

    def when_cancelled(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the request is cancelled (at once if it already is)."""
        if self.cancelled:
            callback()
            return
        if self._on_cancel is None:
            self._on_cancel = []
        self._on_cancel.append(callback)

    @property
    def priority(self) -> int:
        return int(self.parameters.get("priority", 0) or 0)

    @property
    def timeout_us(self) -> int:
        return int(self.parameters.get("timeout", 0) or 0)

    @property
    def correlation_id(self) -> int | str:
        value = self.parameters.get("sequence_id", 0)
        return value if isinstance(value, str) else int(value or 0)

    @property
    def sequence_start(self) -> bool:
        return bool(self.parameters.get("sequence_start", False))

    @property
    def sequence_end(self) -> bool:
        return bool(self.parameters.get("sequence_end", False))

    def batch_size(self, batched: bool) -> int:
        """Rows this request contributes to a batch: the first dim of its inputs when the model batches."""
        if not batched or not self.inputs:
            return 1
        shape = self.inputs[0].shape
        return int(shape[0]) if shape else 1


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
