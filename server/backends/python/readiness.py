"""A python model's own readiness: the optional `is_model_ready(self)` of its TritonPythonModel, which
Triton's python backend (releases after 2.51, through TRITONBACKEND_ModelInstanceReady) calls when a
client asks whether the model is ready (`/v2/models/<m>/ready`, gRPC ModelReady). True means ready;
False, anything that is not a bool, an exception, or no answer within 5 s means not ready (the call
goes on in the background, as in Triton). It may be a coroutine. Inference is not affected, nor is
the server's own readiness. A model without the method is ready and pays nothing: it is looked up
once, at load.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

READY_TIMEOUT_S = 5.0  # Triton's python backend waits this long for is_model_ready()
_LOG = logging.getLogger("tcli.python_backend")

Probe = Callable[[], Any]


def probe_of(model: Any) -> Probe | None:
    """The model's is_model_ready, or None when it has none."""
    probe = getattr(model, "is_model_ready", None)
    return probe if callable(probe) else None


def check(probe: Probe, run_coroutine: Callable[[Any], Any], instance: str) -> bool:
    """Call `probe` on a thread of its own (a slow one is left running) and tell whether it said
    ready; `run_coroutine` runs a coroutine it returns to its end."""
    answer: list[bool] = []
    done = threading.Event()

    def call() -> None:
        try:
            value = probe()
            if inspect.iscoroutine(value):
                value = run_coroutine(value)
            if not isinstance(value, bool):
                _LOG.warning(
                    "model instance '%s': is_model_ready() returned %s, not a bool: not ready",
                    instance,
                    type(value).__name__,
                )
            answer.append(value is True)
        except Exception as exc:
            _LOG.warning(
                "model instance '%s': is_model_ready() raised %s: %s: not ready",
                instance,
                type(exc).__name__,
                exc,
            )
        finally:
            done.set()

    threading.Thread(target=call, name=f"{instance}-is_model_ready", daemon=True).start()
    if not done.wait(READY_TIMEOUT_S):
        _LOG.warning(
            "model instance '%s': is_model_ready() did not answer within %.0f s: not ready",
            instance,
            READY_TIMEOUT_S,
        )
        return False
    return bool(answer and answer[0])


def runs_loop(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether this thread runs `loop` now (an instance process's answer is then read here while
    waiting: that loop reads the process)."""
    try:
        return loop is not None and asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def wait(answer: Future[bool], read: Callable[[float], None] | None) -> bool:
    """An instance process's answer within READY_TIMEOUT_S (not ready without one); `read(timeout)`
    reads the process's next message, when this thread is the one that reads them."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while read is not None and not answer.done() and time.monotonic() < deadline:
            read(deadline - time.monotonic())
        return answer.result(max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        return False
