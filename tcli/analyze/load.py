"""The in-process load generator: `tcli perf`'s closed loop (n requests in flight, each sent again as
soon as it is answered), sent through tcli.inprocess with no socket, measured by perf's own
profiler (tcli/perf/profiler.py: the same windows and stability rule).

It speaks the worker interface the profiler drives (`send(("concurrency", n))`, `send(("collect",))`
then `receive()`), so the profiler cannot tell it from a load generator process. Its requests run as
coroutines on an event loop thread of its own; the server answers on its own loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from collections.abc import Mapping
from typing import Any

from tcli.errors import CliError
from tcli.perf.load_spec import now_ns
from tcli.perf.profiler import Profiler, Settings

STOP_WAIT_S = 30.0


def step_inputs(step: Mapping[str, Any], batched: bool) -> dict[str, Any]:
    """One perf data step (tcli/perf/data.py: raw bytes per input) as numpy arrays of batch size 1."""
    import numpy as np

    from server.protocol import bytes_codec, datatypes

    inputs: dict[str, Any] = {}
    for name, data in step.items():
        shape = ((1,) if batched else ()) + tuple(data.shape)
        if data.datatype == "BYTES":
            values = bytes_codec.deserialize(data.raw, f"input '{name}'")
            inputs[name] = bytes_codec.object_array(values, shape)
        else:  # BF16: its raw 16-bit patterns
            inputs[name] = np.frombuffer(data.raw, dtype=datatypes.raw_dtypes()[data.datatype]).reshape(shape)
    return inputs


class InProcessWorker:
    """A closed-loop load of n requests in flight against one model of an in-process server."""

    def __init__(self, model: Any, requests: list[dict[str, Any]]) -> None:
        self.model = model
        self.requests = requests
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tcli-analyze-load", daemon=True)
        self.thread.start()
        self.target = 0
        self.slots: list[asyncio.Task[None]] = []
        self.next_request = 0
        self.answers: list[Any] = []
        self._reset()
        self.last_cpu_ns = 0
        self.last_at_ns = 0

    def _reset(self) -> None:
        self.starts = array("q")
        self.ends = array("q")
        self.completed = self.sent = self.request_ns = 0
        self.errors = 0
        self.first_error = ""

    # the profiler's interface ---------------------------------------------------------------------
    def wait_ready(self, timeout: float = 60.0) -> None:
        pass

    def send(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "concurrency":
            self._on_loop(self._set_concurrency, int(message[1]))
        elif kind == "collect":
            self.answers.append(self._on_loop(self._take_records))
        elif kind == "stop":
            self.stop()
        else:
            raise CliError(f"the in-process load generator has no {kind} mode")

    def receive(self) -> Any:
        return self.answers.pop(0)

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._stop(), self.loop)
        future.result(STOP_WAIT_S + 5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    # on the load generator's loop -----------------------------------------------------------------
    def _on_loop(self, call: Any, *args: Any) -> Any:
        async def run() -> Any:
            return call(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(60)

    def _take_records(self) -> dict[str, Any]:
        records = {
            "starts": self.starts.tobytes(),
            "ends": self.ends.tobytes(),
            "sequence_ends": bytes(len(self.starts)),
            "send_ns": 0,
            "receive_ns": 0,
            "request_ns": self.request_ns,
            "completed": self.completed,
            "sent": self.sent,
            "delayed": 0,
            "errors": self.errors,
            "first_error": self.first_error,
            "cpu_ns": time.thread_time_ns(),  # this loop's thread: the load generator's own CPU
            "at_ns": now_ns(),
        }
        self._reset()
        return records

    def _set_concurrency(self, count: int) -> None:
        self.target = count
        self.slots = [task for task in self.slots if not task.done()]
        for index in range(len(self.slots), count):
            self.slots.append(self.loop.create_task(self._slot(index)))

    async def _slot(self, index: int) -> None:
        try:
            while index < self.target:
                inputs = self.requests[self.next_request % len(self.requests)]
                self.next_request += 1
                self.sent += 1
                start = now_ns()
                async for response in self.model.async_infer(inputs=inputs, raise_on_error=True):
                    del response
                end = now_ns()
                self.starts.append(start)
                self.ends.append(end)
                self.request_ns += end - start
                self.completed += 1
        except Exception as exc:
            self.errors += 1
            if not self.first_error:
                self.first_error = str(exc) or type(exc).__name__

    async def _stop(self) -> None:
        self.target = 0
        pending = [task for task in self.slots if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=STOP_WAIT_S)


class InProcessProfiler(Profiler):
    """perf's profiler over one in-process load generator instead of worker processes."""

    def __init__(self, model: Any, requests: list[dict[str, Any]], settings: Settings) -> None:
        super().__init__(None, settings, None, (model.name, ""), {})  # type: ignore[arg-type]
        self.served = model
        self.requests = requests

    def start(self) -> None:
        self.workers.append(InProcessWorker(self.served, self.requests))  # type: ignore[arg-type]

    def close(self) -> None:
        for worker in self.workers:
            worker.send(("stop",))
        self.workers.clear()
