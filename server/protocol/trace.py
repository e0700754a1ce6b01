"""One sampled inference request's trace, as the request carries it (`InferenceRequest.trace`): the
timestamps each layer takes on the request's own path, with Triton's names, and the tensors it saw.

A request that is not traced carries None, so every layer pays one `is not None` check and nothing
else. What becomes of a finished trace (Triton's JSON file, OpenTelemetry spans) is its sink's
business (server/tracing/); this module only records. Timestamps are `time.monotonic_ns()`, the
steady clock Triton's timestamps come from."""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

# a server.protocol.types.Tensor (not imported: types.py names this module for InferenceRequest.trace)
Tensor = Any

# Triton's activity names (TRITONSERVER_InferenceTraceActivityString and the front ends' own)
HTTP_RECV_START = "HTTP_RECV_START"
HTTP_RECV_END = "HTTP_RECV_END"
HTTP_SEND_START = "HTTP_SEND_START"
HTTP_SEND_END = "HTTP_SEND_END"
GRPC_WAITREAD_START = "GRPC_WAITREAD_START"
GRPC_WAITREAD_END = "GRPC_WAITREAD_END"
GRPC_SEND_START = "GRPC_SEND_START"
GRPC_SEND_END = "GRPC_SEND_END"
REQUEST_START = "REQUEST_START"
QUEUE_START = "QUEUE_START"
COMPUTE_START = "COMPUTE_START"
COMPUTE_INPUT_END = "COMPUTE_INPUT_END"
COMPUTE_OUTPUT_START = "COMPUTE_OUTPUT_START"
COMPUTE_END = "COMPUTE_END"
REQUEST_END = "REQUEST_END"
INFER_RESPONSE_COMPLETE = "INFER_RESPONSE_COMPLETE"
TENSOR_QUEUE_INPUT = "TENSOR_QUEUE_INPUT"
TENSOR_BACKEND_OUTPUT = "TENSOR_BACKEND_OUTPUT"


class TraceSink(Protocol):
    """Where traces come from and go: ids for child traces, and finished traces."""

    def next_id(self) -> int: ...

    def collect(self, trace: Trace) -> None: ...


class Trace:
    """The record of one traced request (and, as `children`, of the composing models' requests an
    ensemble made for it). Any thread may add to it: the event loop, a model's worker thread.

    It goes to its sink once both sides are done with it, as Triton releases a trace: the front end
    (`finish`, after the last response was written) and every execution of it and of its children
    (`computed`). A decoupled model may send its final response before its `execute()` returns, so
    either may come last; REQUEST_END, too, waits for a running execution to end."""

    __slots__ = (
        "_collected",
        "_computing",
        "_end_pending",
        "_finished",
        "children",
        "context",
        "id",
        "model_name",
        "model_version",
        "parent_id",
        "request_id",
        "root",
        "sink",
        "stamps",
        "tensors",
        "tensors_on",
        "tree_lock",
    )

    def __init__(
        self,
        sink: TraceSink,
        trace_id: int,
        *,
        parent: Trace | None = None,
        tensors_on: bool = False,
    ) -> None:
        self.sink = sink
        self.id = trace_id
        self.root: Trace = self if parent is None else parent.root
        self.parent_id = 0 if parent is None else parent.id
        self.model_name = ""
        self.model_version = -1
        self.request_id = ""
        self.stamps: list[tuple[str, int]] = []
        self.tensors: list[tuple[str, Tensor]] = []  # (activity, tensor), formatted when written
        self.tensors_on = tensors_on  # the TENSORS level
        self.children: list[Trace] = []
        self.context: object = None if parent is None else parent.context  # the sink's own
        # one lock for a trace and its children: who is still busy with them
        self.tree_lock: threading.Lock = threading.Lock() if parent is None else parent.tree_lock
        self._computing = False
        self._end_pending = False
        self._finished = False
        self._collected = False

    def stamp(self, name: str, ns: int = 0) -> None:
        """Record activity `name` now, or at `ns` when it was taken earlier on the request's path."""
        self.stamps.append((name, ns or time.monotonic_ns()))

    def started(self, model_name: str, model_version: str, request_id: str, inputs: list[Tensor]) -> None:
        """REQUEST_START: the core took the request for this model version."""
        self.model_name = model_name
        self.model_version = int(model_version) if model_version.lstrip("-").isdigit() else -1
        self.request_id = request_id
        self.stamp(REQUEST_START)
        if self.tensors_on:
            self.tensors.extend((TENSOR_QUEUE_INPUT, tensor) for tensor in inputs)

    def responded(self, outputs: list[Tensor]) -> None:
        """One response reached the core's caller: its outputs (TENSOR_BACKEND_OUTPUT; a decoupled
        model sends many responses) and, at the first, INFER_RESPONSE_COMPLETE (not for an ensemble's
        steps, whose responses go back to the ensemble, as in Triton)."""
        if self.tensors_on:
            self.tensors.extend((TENSOR_BACKEND_OUTPUT, tensor) for tensor in outputs)
        if not self.parent_id and not any(name == INFER_RESPONSE_COMPLETE for name, _ in self.stamps):
            self.stamp(INFER_RESPONSE_COMPLETE)

    def ended(self) -> None:
        """REQUEST_END: the core is done with the request; if its execution still runs (a decoupled
        model's final response came first), when that execution ends."""
        with self.tree_lock:
            if self._computing:
                self._end_pending = True
                return
        self.stamp(REQUEST_END)

    def computing(self, queued_ns: int, start_ns: int) -> None:
        """An instance took the request: it was queued at `queued_ns` and its execution started at
        `start_ns` (both taken on the request's path; the queue is the scheduler's business)."""
        with self.tree_lock:
            self._computing = True
        self.stamps += ((QUEUE_START, queued_ns), (COMPUTE_START, start_ns))

    def computed(self, input_end_ns: int, output_start_ns: int) -> None:
        """The execution ended now; its inputs were ready at `input_end_ns`, its outputs being made from
        `output_start_ns`."""
        self.stamps += ((COMPUTE_INPUT_END, input_end_ns), (COMPUTE_OUTPUT_START, output_start_ns))
        self.execution_failed()

    def execution_failed(self) -> None:
        """The execution ended now, failing (no input or output split to report); `computed` ends
        a successful one through here too."""
        self.stamp(COMPUTE_END)
        with self.tree_lock:
            self._computing = False
            end, self._end_pending = self._end_pending, False
        if end:
            self.stamp(REQUEST_END)
        self.root._collect_when_done()

    def child(self) -> Trace:
        """A trace for a request an ensemble makes for one of its steps: written with this one."""
        trace = Trace(self.sink, self.sink.next_id(), parent=self, tensors_on=self.tensors_on)
        with self.tree_lock:
            self.children.append(trace)
        return trace

    def sent(self, start_name: str, end_name: str, start_ns: int) -> None:
        """A response written: its send started at `start_ns` and ends now."""
        self.stamps.append((start_name, start_ns))
        self.stamp(end_name)

    def finish(self) -> None:
        """The front end is done with the request: to the sink, once no execution of it runs."""
        with self.tree_lock:
            self._finished = True
        self._collect_when_done()

    def _collect_when_done(self) -> None:
        with self.tree_lock:
            if not self._finished or self._collected or self._busy():
                return
            self._collected = True
        self.sink.collect(self)

    def _busy(self) -> bool:
        return self._computing or any(child._busy() for child in self.children)
