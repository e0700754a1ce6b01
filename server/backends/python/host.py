"""Host a `TritonPythonModel` (backend: "python") in this process: initialize with Triton's args,
execute lists of requests through our `triton_python_backend_utils`, finalize on unload.

Each instance runs on its own worker thread, so pure-Python models share the GIL; models that spend
their time in numpy or a framework release it.

Every request execute() gets has a response sender (`request.get_response_sender()`) when the runner
gives a response channel per request (`execute_channels`). A default model either returns its list
of responses or returns None and answers through the senders (one response each, possibly from its
own threads). A decoupled model (`model_transaction_policy { decoupled: true }`) must return None and
sends zero, one or many responses per request, the last with TRITONSERVER_RESPONSE_COMPLETE_FINAL;
its execute() may also be a coroutine, which runs on the instance's own event loop thread while the
instance takes its next requests, as Triton's python backend runs it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as concurrent_futures
import contextlib
import inspect
import json
import logging
import os
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.backends.base import (
    InstanceSpec,
    ModelContext,
    ModelError,
    RequestModel,
    Rescheduled,
    ResponseChannel,
)
from server.backends.python import model_import, readiness
from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.pb_utils import host_api as pb_host
from server.backends.python.pb_utils import scope as pb_scope
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceResponse, Tensor

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest

# request parameters Triton consumes itself; the rest reach the model through request.parameters()
_RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
)
_KIND_NAMES = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}
_LOG = logging.getLogger("tcli.python_backend")
_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
_PB_MODULE = "server.backends.python.pb_utils"  # Triton's binding names these c_python_backend_utils.*


class _Transport:
    """pb_utils.ResponseTransport over a ResponseChannel: converts the model's responses."""

    __slots__ = ("_channel", "_host", "_request")

    def __init__(self, host: PythonModel, request: InferenceRequest, channel: ResponseChannel) -> None:
        self._host = host
        self._request = request
        self._channel = channel

    def send(self, response: Any, flags: int, /) -> None:
        result = None if response is None else self._host._from_pb(self._request, response)
        self._channel.send(result, flags == _FINAL)

    def is_cancelled(self) -> bool:
        return self._channel.is_cancelled()

    def abandoned(self) -> None:
        request = f"request '{self._request.id}'" if self._request.id else "a request"
        error = TritonError(
            ErrorCode.INTERNAL,
            f"model '{self._host.name}' version {self._host.version} dropped the response sender of "
            f"{request} without its final flag (a thread of the model's that raised drops it): a "
            "decoupled model ends each request with "
            "sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)",
        )
        self._channel.send(error, True)


def _released(
    pb_requests: list[Any],
    results: list[InferenceResponse | TritonError | None],
    senders: list[Any] | None = None,
) -> list[InferenceResponse | TritonError | None]:
    """`results`, with Rescheduled for each request the model released with
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (its scheduler runs it again, with a sender of its own:
    this execution's is closed, so dropping it ends nothing)."""
    for index, pb_request in enumerate(pb_requests):
        if pb_host.release_flags(pb_request) == _RESCHEDULE:
            results[index] = Rescheduled()
            if senders is not None and senders[index] is not None:
                senders[index].close()
    return results


def answered(
    name: str, results: Sequence[InferenceResponse | TritonError | None]
) -> list[InferenceResponse | TritonError]:
    """execute_channels' results for requests without response senders: None there means execute()
    returned None, which fails the request."""
    missing = TritonError(
        ErrorCode.INTERNAL,
        f"model '{name}' execute() returned None: requests without a response sender need the list of "
        "responses",
    )
    return [missing if r is None else r for r in results]


def read_source(model_file: Path) -> str:
    """The model file's text ("" when unreadable: the import then reports the problem)."""
    try:
        return model_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


# frames of tcli's own (the server's, pb_utils' among them) and of the machinery between it and a
# model's code, which a model's error does not show
_OWN_FRAMES = tuple(
    str(folder) + os.sep
    for folder in (
        Path(__file__).parents[2],
        Path(asyncio.__file__).parent,
        Path(concurrent_futures.__file__).parent,
    )
)


def _users(frames: traceback.StackSummary) -> traceback.StackSummary:
    """The frames of the model's code (and of the libraries it calls), without tcli's: an error
    pb_utils raises points at the model's line that called it, as in Triton, where pb_utils is C++."""
    return traceback.StackSummary.from_list([f for f in frames if not f.filename.startswith(_OWN_FRAMES)])


def _raised(exc: BaseException) -> str:
    """An exception out of a model's execute(), as Triton's python backend words it: `Type: text`,
    then the model's frames, innermost first, after `At:`."""
    text = f"{type(exc).__name__}: {exc}"
    model_frames = _users(traceback.extract_tb(exc.__traceback__))
    if model_frames:
        text += "\n\nAt:\n" + "".join(
            f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(model_frames)
        )
    return text


def _trace(exc: BaseException) -> str:
    """The traceback for the server's log, chained exceptions included, in the model's frames."""
    report = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    pending = [report]
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = _users(part.stack)
        pending += [p for p in (part.__cause__, part.__context__) if p is not None]
        pending += part.exceptions or []  # an ExceptionGroup's
    return "".join(report.format()).rstrip()


@dataclass(frozen=True)
class HostSpec:
    """What hosting one instance takes, as plain data: it is pickled to an instance's own process
    (`process_host`), which then needs neither the protobuf config nor the server."""

    name: str
    version: str
    model_file: str
    version_dir: str
    config_json: dict[str, Any]
    initialize_args: dict[str, str]  # TritonPythonModel.initialize(args), as Triton builds them
    python_based: bool = False  # model_file is a Python-based backend's (locate.py), not the model's

    @classmethod
    def of(cls, context: ModelContext, instance: InstanceSpec) -> HostSpec:
        from server.protocol.config_json import to_json_dict

        config_json = to_json_dict(context.config)
        name, version = context.config.name, str(context.version)
        args = {
            "model_config": json.dumps(config_json),
            "model_instance_kind": _KIND_NAMES.get(instance.kind, "CPU"),
            "model_instance_name": instance.name,
            "model_instance_device_id": str(instance.device_id),
            "model_repository": str(context.model_dir),
            "model_version": version,
            "model_name": name,
        }
        python_based = context.runtime_file is not None
        return cls(
            name, version, str(context.model_file), str(context.version_dir), config_json, args, python_based
        )


class PythonModel(RequestModel):
    def __init__(self, context: ModelContext | HostSpec, instance: InstanceSpec | None = None) -> None:
        if isinstance(context, HostSpec):
            spec = context
        else:
            assert instance is not None
            spec = HostSpec.of(context, instance)
        self.name = spec.name
        self.version = spec.version
        # Triton names the instance, not the model, in an execution's errors
        self.instance = spec.initialize_args.get("model_instance_name", spec.name)
        self._scope = pb_scope.ModelScope(self.name, self.version, spec.version_dir)
        self._config_json = spec.config_json
        self._outputs = [o["name"] for o in spec.config_json.get("output", [])]
        self._output_names = frozenset(self._outputs)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self._config_json)
        self._loop: asyncio.AbstractEventLoop | None = None  # for coroutine execute(), started when needed
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._running: set[Any] = set()  # coroutine executions in flight on that loop
        self._model: Any = None
        self._readiness: readiness.Probe | None = None  # the model's is_model_ready, if it has one
        model_file = Path(spec.model_file)
        self._source = read_source(model_file)
        try:
            self._module = model_import.import_model_file(
                model_file,
                self.name,
                own_process=isinstance(context, HostSpec),
                python_based=spec.python_based,
            )
        except Exception as exc:  # the model file's own error, reported on its version
            raise TritonError(ErrorCode.INTERNAL, f"model.py for '{self.name}': {_first_line(exc)}") from None
        model_class = getattr(self._module, "TritonPythonModel", None)
        if model_class is None:
            model_import.forget_module(self._module)
            raise TritonError(
                ErrorCode.INTERNAL,
                f"model.py for '{self.name}': AttributeError: module has no attribute 'TritonPythonModel'",
            )
        try:
            self._scope.phase.serving = False  # no BLS until initialize() has returned
            with pb_scope.model_scope(self._scope):
                self._model = model_class()
                if hasattr(self._model, "initialize"):
                    self._model.initialize(dict(spec.initialize_args))
            self._scope.phase.serving = True
            self._readiness = readiness.probe_of(self._model)
        except Exception as exc:  # initialize() failing makes this version UNAVAILABLE, as in Triton
            model_import.forget_module(self._module)
            raise TritonError(
                ErrorCode.INTERNAL, f"model '{self.name}' initialize() failed: {_first_line(exc)}"
            ) from None

    def serves_scope(self, scope: object) -> bool:
        return scope is self._scope

    @property
    def has_readiness(self) -> bool:
        """Whether the model defines is_model_ready()."""
        return self._readiness is not None

    def ready(self) -> bool:
        probe = self._readiness
        if probe is None or self._model is None:
            return self._model is not None

        def scoped() -> Any:
            with pb_scope.model_scope(self._scope):
                return probe()

        return readiness.check(scoped, self._run_coroutine, self.instance)

    @property
    def inline_ok(self) -> bool:
        """Whether the runner may call execute() straight from its event loop: not for decoupled models
        (they answer from other threads over time), coroutine execute() (it needs its own loop) or
        models that make BLS requests (those would wait on the very loop that serves them)."""
        model = self._model
        return not (
            self.decoupled
            or model is None
            or inspect.iscoroutinefunction(getattr(model, "execute", None))
            or "InferenceRequest(" in self._source
        )

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse | TritonError]:
        """Run execute() without response senders: every request's one result."""
        return answered(self.name, self.execute_channels(requests, None))

    def execute_channels(
        self, requests: list[InferenceRequest], channels: Sequence[ResponseChannel] | None
    ) -> list[InferenceResponse | TritonError | None]:
        """Run execute() on `requests`, each with a response sender over its channel (none when
        `channels` is None). Per request: its one result, or None when it answers (or answered)
        through its sender, or will from a coroutine still running. A request whose sender is still
        open when execute() fails gets the error as its result and its sender is closed, as in
        Triton."""
        if channels is None:
            senders: list[Any] = [None] * len(requests)
        else:
            senders = [
                pb_utils.InferenceResponseSender(_Transport(self, request, channel), self.decoupled)
                for request, channel in zip(requests, channels, strict=True)
            ]
        pb_requests = [
            self._to_pb(r, sender, None if channels is None else channels[i].is_cancelled)
            for i, (r, sender) in enumerate(zip(requests, senders, strict=True))
        ]
        try:
            with pb_scope.model_scope(self._scope):
                results = self._model.execute(pb_requests)
                if inspect.iscoroutine(results):
                    if self.decoupled and channels is not None:
                        self._start_coroutine(results, senders, channels)
                        return [None] * len(requests)
                    results = self._run_coroutine(results)
        except Exception as exc:  # the model's error fails these requests only
            return self._fail_open(senders, self._failure(_raised(exc), exc))
        if self.decoupled:
            if results is not None:
                message = f"Python model '{self.instance}' is using the decoupled mode and the execute function must return None."
                return self._fail_open(senders, self._failure(message))
            return _released(pb_requests, [None] * len(requests), senders)
        if results is None and channels is not None:
            return _released(pb_requests, [None] * len(requests), senders)  # answered through the senders
        if not isinstance(results, list | tuple) or len(results) != len(requests):
            count = len(results) if isinstance(results, list | tuple) else type(results).__name__
            error = TritonError(
                ErrorCode.INTERNAL,
                f"model '{self.name}' execute() must return one InferenceResponse per request: got {count} "
                f"for {len(requests)} requests",
            )
            return [error] * len(requests)
        for pb_request, sender, result in zip(pb_requests, senders, results, strict=True):
            if result is not None and sender is not None and sender.response_count:
                # answered through its sender already: Triton refuses the returned one
                message = "Unable to send response. Non-decoupled model cannot send more than one response."
                return self._fail_open(senders, self._failure(message))
            if result is not None and pb_host.release_flags(pb_request) == _RESCHEDULE:
                kind = type(result)
                named = (
                    f"c_python_backend_utils.{kind.__name__}"
                    if kind.__module__.startswith(_PB_MODULE)
                    else kind.__qualname__
                )
                message = (
                    "Expected a None object in the execute function return list for reschduled request, "
                    f"found type '<class '{named}'>'."
                )
                return self._fail_open(senders, self._failure(message))
        # None in the list: that request answers through its response sender (or did), as Triton
        # lets a default model return None for it
        answers: list[InferenceResponse | TritonError | None] = [
            None if result is None and sender is not None else self._from_pb(request, result)
            for request, sender, result in zip(requests, senders, results, strict=True)
        ]
        return _released(pb_requests, answers, senders)

    def _failure(self, message: str, exc: BaseException | None = None) -> ModelError:
        """The model's own failure, as Triton's python backend words it; with its traceback for the
        server's log (the runner writes it)."""
        trace = "" if exc is None else _trace(exc)
        return ModelError(
            f"Failed to process the request(s) for model '{self.instance}', message: {message}", trace
        )

    def _fail_open(
        self, senders: list[Any], error: ModelError
    ) -> list[InferenceResponse | TritonError | None]:
        """`error` for every request whose sender is still open (closing it); None for the others.
        When no request is left to carry it, it is logged here, as Triton logs every failed execute()."""
        results: list[InferenceResponse | TritonError | None] = []
        unreported = False
        for sender in senders:
            if sender is not None and sender.closed:
                results.append(None)
            elif sender is not None and not self.decoupled and sender.response_count:
                # a default model's request that has its one response already keeps it, as
                # Triton's front ends pass on only the first: the final flag ends it, the log
                # has the error
                sender.send(None, _FINAL)
                results.append(None)
                unreported = True
            else:
                if sender is not None:
                    sender.close()
                results.append(error)
        if unreported or all(result is None for result in results):
            self._log_unreported(error)
        return results

    def _log_unreported(self, error: ModelError) -> None:
        """A failed execute() whose requests had all been answered: no response carries the error,
        so the log does, as Triton logs every failed execute()."""
        _LOG.error(
            "model '%s' version %s instance '%s': %s%s",
            self.name,
            self.version,
            self.instance,
            error.message,
            f"\n{error.trace}" if error.trace else "",
        )

    # coroutine execute() -----------------------------------------------------------------------------
    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"{self.name}_{self.version}_async", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def _run_coroutine(self, coroutine: Any) -> Any:
        """A default model's coroutine execute(), run to its end on the instance's loop."""
        return asyncio.run_coroutine_threadsafe(self._scoped(coroutine), self._event_loop()).result()

    async def _scoped(self, coroutine: Any) -> Any:
        with pb_scope.model_scope(self._scope):
            return await coroutine

    def _start_coroutine(
        self, coroutine: Any, senders: list[Any], channels: Sequence[ResponseChannel]
    ) -> None:
        """A decoupled model's coroutine execute(): runs on while the instance takes more requests;
        when it fails, the requests whose senders are still open get the error as their final
        response."""

        async def run() -> None:
            try:
                result = await self._scoped(coroutine)
                if result is not None:
                    raise TypeError("the execute function must return None in the decoupled mode")
            except Exception as exc:
                error = self._failure(_raised(exc), exc)
                reported = False
                for sender, channel in zip(senders, channels, strict=True):
                    if not sender.closed:
                        sender.close()
                        channel.send(error, True)
                        reported = True
                if not reported:
                    self._log_unreported(error)

        future = asyncio.run_coroutine_threadsafe(run(), self._event_loop())
        self._running.add(future)
        future.add_done_callback(self._running.discard)

    def unload(self) -> None:
        for future in list(getattr(self, "_running", ())):  # coroutine executions still answering
            with contextlib.suppress(Exception):
                future.result(timeout=10)
        loop, thread = getattr(self, "_loop", None), getattr(self, "_loop_thread", None)
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            if not thread.is_alive():
                loop.close()
        model = getattr(self, "_model", None)
        if model is not None and hasattr(model, "finalize"):
            self._scope.phase.serving = False
            try:
                with pb_scope.model_scope(self._scope):
                    model.finalize()
            except Exception:  # logged once; the unload goes on regardless
                _LOG.exception(
                    "model '%s' version %s instance '%s': finalize() failed",
                    self.name,
                    self.version,
                    self.instance,
                )
        self._model = None
        model_import.forget_module(self._module)

    # conversions -----------------------------------------------------------------------------------
    def _to_pb(self, request: InferenceRequest, sender: Any = None, is_cancelled: Any = None) -> Any:
        inputs = [pb_host.input_tensor(t.name, t.data, t.datatype) for t in request.inputs]
        flags, timeout, parameters = 0, 0, request.parameters
        correlation_id: int | str = 0
        if parameters:  # most requests have none: their properties would read an empty dict
            flags = (1 if request.sequence_start else 0) | (2 if request.sequence_end else 0)
            correlation_id, timeout = request.correlation_id, request.timeout_us
            parameters = {k: v for k, v in parameters.items() if k not in _RESERVED_PARAMETERS}
        return pb_host.new_execute_request(
            inputs=inputs,
            requested_output_names=[o.name for o in request.outputs] or self._outputs,
            request_id=request.id,
            correlation_id=correlation_id,
            flags=flags,
            timeout=timeout,
            parameters=parameters,
            model_name=self.name,
            model_version=int(self.version),
            response_sender=sender,
            is_cancelled=is_cancelled,
        )

    def _from_pb(self, request: InferenceRequest, result: Any) -> InferenceResponse | TritonError:
        if not isinstance(result, pb_utils.InferenceResponse):
            return TritonError(
                ErrorCode.INTERNAL,
                f"model '{self.name}' execute() returned {type(result).__name__}, expected InferenceResponse",
            )
        if result.has_error():
            error = result.error()
            assert error is not None
            return TritonError(ErrorCode[pb_host.error_code_name(error)], error.message())
        wanted = {o.name for o in request.outputs} if request.outputs else self._output_names
        outputs = []
        for tensor in result.output_tensors():
            name = tensor.name()
            if name not in wanted:
                continue
            data = pb_host.tensor_storage(tensor)
            datatype = pb_host.dtype_to_wire(tensor.triton_dtype())
            outputs.append(Tensor(name, datatype, data.shape, data))
        parameters = pb_host.response_parameters(result)  # a copy already
        return InferenceResponse(self.name, self.version, request.id, outputs, parameters)
