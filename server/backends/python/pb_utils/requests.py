"""Requests, as execute receives them and as BLS builds them, and the BLS hook behind
InferenceRequest.exec()/async_exec() (installed by the server with set_bls_executor).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from server.backends.python.pb_utils.datatypes import (
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
)
from server.backends.python.pb_utils.errors import TritonModelException
from server.backends.python.pb_utils.memory import TRITONSERVER_MEMORY_CPU, InferenceTrace, PreferredMemory
from server.backends.python.pb_utils.parameters import _parameters_json
from server.backends.python.pb_utils.responses import (
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
)
from server.backends.python.pb_utils.scope import require_serving
from server.backends.python.pb_utils.tensor import Tensor


class BLSExecutor(Protocol):
    """The server's BLS hook: run `request` on model_name/model_version (-1 = latest) and return an
    InferenceResponse (errors go in response.error(), as Triton does for a model that is not ready),
    or for decoupled=True a ResponseIterator."""

    def __call__(
        self, request: InferenceRequest, model_name: str, model_version: int, decoupled: bool, /
    ) -> InferenceResponse | ResponseIterator: ...


_bls_executor: BLSExecutor | None = None
# optional: a coroutine variant for async_exec; without it async_exec runs the sync hook in a thread
_bls_async_executor: Callable[..., Awaitable[InferenceResponse | ResponseIterator]] | None = None


class InferenceRequest:
    """A request, either received by `execute` or built by a model for BLS:

    `InferenceRequest(request_id="", correlation_id=0, inputs, requested_output_names, model_name,
    model_version=-1, flags=0, timeout=0, preferred_memory=..., trace=..., parameters=None)`."""

    def __init__(
        self,
        request_id: str | bytes = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str | bytes] | None = None,
        model_name: str | bytes | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        missing = [
            n
            for n, v in (
                ("inputs", inputs),
                ("requested_output_names", requested_output_names),
                ("model_name", model_name),
            )
            if v is None
        ]
        if missing:
            raise TypeError(f"InferenceRequest(): missing required argument(s): {', '.join(missing)}")
        assert inputs is not None and requested_output_names is not None and model_name is not None
        # Triton's binding takes bytes wherever it takes a str (pybind11's string conversion): a model
        # often passes a TYPE_STRING input's element, which numpy hands it as bytes
        request_id, model_name = _text(request_id), _text(model_name)
        if not isinstance(requested_output_names, (str, bytes)):
            requested_output_names = [_text(name) for name in requested_output_names]
        if not isinstance(request_id, str) or not isinstance(model_name, str):
            raise TypeError("InferenceRequest(): request_id and model_name must be str")
        # as Triton's binding: a None in the lists passes its type check and fails its own check
        if not isinstance(inputs, (list, tuple)) or not all(
            t is None or isinstance(t, Tensor) for t in inputs
        ):
            raise TypeError("InferenceRequest(): inputs must be a list of Tensor")
        if isinstance(requested_output_names, str) or not all(
            isinstance(n, str) for n in requested_output_names
        ):
            raise TypeError("InferenceRequest(): requested_output_names must be a list of str")
        for label, number in (("model_version", model_version), ("flags", flags), ("timeout", timeout)):
            if isinstance(number, bool) or not isinstance(number, int):
                raise TypeError(f"InferenceRequest(): {label} must be an int")
        if correlation_id is None:
            raise TypeError("InferenceRequest(): correlation_id must be an int or a str")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        for what, empty in (
            ("Input tensor", any(t is None for t in inputs)),
            ("Requested output name", "" in requested_output_names),
        ):
            if empty:
                raise TritonModelException(
                    f"{what} for request with id '{request_id}' and model name '{model_name}' should not "
                    "be empty."
                )
        self._request_id = request_id
        self._correlation_id: int | str = correlation_id
        self._inputs = list(inputs)
        self._requested: list[str] = list(dict.fromkeys(requested_output_names))  # type: ignore[arg-type]
        self._model_name: str = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory(TRITONSERVER_MEMORY_CPU)
        self._trace = trace or InferenceTrace()
        self._parameters_json: str | None
        self._parameters, self._parameters_json = _parameters_json(parameters)
        self._sender: InferenceResponseSender | None = None
        self._cancelled: Callable[[], bool] | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    # what every request offers ---------------------------------------------------------------------
    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        """Timeout in microseconds (0 = none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string."""
        if self._parameters_json is None:  # a request the server made: encoded when first asked
            self._parameters_json = json.dumps(self._parameters, separators=(",", ":"))  # as Triton has it
        return self._parameters_json

    def requested_output_names(self) -> set[str]:
        """A set, as Triton returns it (so `names[0]` fails there too)."""
        return set(self._requested)

    def trace(self) -> InferenceTrace:
        return self._trace

    # execute-side --------------------------------------------------------------------------------
    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() is only available on the requests passed to execute(), "
                "not on requests built for BLS"
            )
        return self._sender

    def is_cancelled(self) -> bool:
        if self._cancelled is None:
            raise TritonModelException("Cannot determine request cancellation")
        return bool(self._cancelled())

    def set_release_flags(self, flags: int) -> None:
        """TRITONSERVER_REQUEST_RELEASE_ALL (default) or _RESCHEDULE (hand the request back to the
        sequence batcher to be executed again)."""
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(
                f"Invalid release flags {flags}: use TRITONSERVER_REQUEST_RELEASE_ALL or "
                "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE"
            )
        self._release_flags = flags

    # BLS -------------------------------------------------------------------------------------------
    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on `model_name` and wait: an InferenceResponse, or for decoupled=True an
        iterator of responses."""
        if not isinstance(decoupled, bool):
            raise TypeError("exec(): decoupled must be a bool")
        require_serving()
        executor = _bls_executor
        if executor is None:
            raise TritonModelException(
                f"Unable to run BLS request for model '{self._model_name}': BLS needs the model to run "
                "inside the tcli server (no BLS executor is installed)"
            )
        try:
            return executor(self, self._model_name, self._model_version, decoupled)
        except TritonModelException:
            raise
        except Exception as e:
            raise TritonModelException(f"An error occurred while performing BLS request: {e}") from e

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[InferenceResponse | ResponseIterator]:
        """`await request.async_exec()`: like exec() without blocking the model's event loop."""
        loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine, as in Triton
        require_serving()
        async_executor = _bls_async_executor
        if async_executor is not None:
            return asyncio.ensure_future(
                async_executor(self, self._model_name, self._model_version, decoupled)
            )
        return loop.run_in_executor(None, functools.partial(self.exec, decoupled))

    def __repr__(self) -> str:
        names = [t.name() for t in self._inputs]
        return f"InferenceRequest(request_id={self._request_id!r}, model_name={self._model_name!r}, inputs={names})"


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


# host side: the tcli server calls this -------------------------------------------------------------
def set_bls_executor(
    executor: BLSExecutor | None,
    async_executor: Callable[..., Awaitable[InferenceResponse | ResponseIterator]] | None = None,
) -> None:
    """Install (or with None remove) the hook behind InferenceRequest.exec()/async_exec()."""
    global _bls_executor, _bls_async_executor
    _bls_executor = executor
    _bls_async_executor = async_executor


def _text(value: Any) -> Any:
    """bytes as the str Triton's binding would make of them; anything else unchanged."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
