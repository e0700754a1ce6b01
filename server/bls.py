"""BLS: `pb_utils.InferenceRequest(...).exec()` / `async_exec()` run on another model of this server.

A BLS request goes through `InferenceService.infer_stream`, the path a gRPC stream takes, so versions,
schedulers (sequences, batching, queue policy and timeouts), statistics, ensembles and decoupled
models behave as over the wire. infer_stream also tells the errors apart the way Triton's python
backend reports them: one raised before the request reaches the model (unknown model, bad input,
sequence errors) reads "Model <name> - Error when running inference: ...", while a model's own
error comes back unchanged.

Threads: the request runs on the server's event loop. exec() blocks its caller (a model instance's
worker thread, a process instance's forwarding thread, a model's own thread) until the answer comes
back; async_exec() awaits it on the model's own event loop. Neither may run on the server's loop
itself, which is why a model that builds BLS requests never runs inline (host.py `inline_ok`).

Deadlocks: Triton lets a BLS request wait forever for a model whose every instance is itself
waiting on BLS requests that need that model (its documented limitation: "model A calls itself and
no instance is free"). `WaitGraph` detects that case and answers the request with an error instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.pb_utils import host_api as pb_host
from server.backends.python.pb_utils import requests as pb_requests
from server.backends.python.pb_utils import scope as pb_scope
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, RequestedOutput, Tensor

if TYPE_CHECKING:
    from server.protocol.types import InferenceResponse
    from server.service import InferenceService, StreamResponse

_Key = tuple[str, str]  # (model name, version)
_END = object()  # the end of a decoupled stream, in the queue its iterator reads
# A detected deadlock is confirmed this many times, this far apart, before the request fails: a wait
# that just ended is forgotten a moment after its answer arrives, and must not pass for a deadlock.
_CONFIRMATIONS = 3
_CONFIRM_DELAY_S = 0.02


# conversions ---------------------------------------------------------------------------------------
def to_server_request(
    request: pb_utils.InferenceRequest, model_name: str, model_version: int
) -> InferenceRequest:
    """The wire-level request a BLS request amounts to. Tensors are shared, read-only (a model must not
    change its caller's arrays); BYTES elements are bytes already (pb_utils.Tensor made them so)."""
    inputs = []
    for tensor in request.inputs():
        array = pb_host.tensor_storage(tensor)
        view = array.view()
        view.flags.writeable = False
        wire = pb_host.dtype_to_wire(tensor.triton_dtype())
        inputs.append(Tensor(tensor.name(), wire, tuple(int(d) for d in array.shape), view))
    parameters: dict[str, Any] = dict(pb_host.request_parameters(request))
    correlation_id, flags = request.correlation_id(), request.flags()
    if correlation_id not in (0, ""):
        parameters["sequence_id"] = correlation_id
    if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
        parameters["sequence_start"] = True
    if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
        parameters["sequence_end"] = True
    if request.timeout():
        parameters["timeout"] = request.timeout()
    return InferenceRequest(
        model_name=model_name,
        model_version="" if model_version < 0 else str(model_version),
        id=request.request_id(),
        inputs=inputs,
        outputs=[RequestedOutput(name) for name in sorted(request.requested_output_names())],
        parameters=parameters,
    )


def to_pb_response(response: InferenceResponse | None) -> pb_utils.InferenceResponse:
    """The model's view of a response (None: the empty response that ends a decoupled stream)."""
    if response is None:
        return pb_utils.InferenceResponse([])
    tensors = [
        pb_host.tensor_from_storage(t.name, t.data, pb_host.wire_to_dtype(t.datatype))
        for t in response.outputs
    ]
    parameters = {k: v for k, v in response.parameters.items() if isinstance(v, bool | int | str)}
    return pb_utils.InferenceResponse(tensors, parameters=parameters or None)


def error_response(error: TritonError) -> pb_utils.InferenceResponse:
    code = getattr(pb_utils.TritonError, error.code.name, pb_utils.TritonError.INTERNAL)
    return pb_utils.InferenceResponse([], error=pb_utils.TritonError(error.message, code))


def _stopping() -> TritonError:
    return TritonError(ErrorCode.UNAVAILABLE, "BLS request cancelled: the server is stopping")


def _refused(model_name: str, message: str) -> TritonError:
    """An error from before the request reached the model, worded as Triton's python backend words it."""
    return TritonError(ErrorCode.INTERNAL, f"Model {model_name} - Error when running inference: {message}")


# deadlock detection --------------------------------------------------------------------------------
@dataclass
class _Waits:
    """One model version's instances that wait on BLS requests: instance (its scope's id) -> the
    models its pending requests target, and how many instances the model has."""

    instances: int
    pending: dict[int, list[_Key]] = field(default_factory=dict)


class WaitGraph:
    """Which model instances wait on BLS requests to which models. A model is stuck when every one of
    its instances waits on a request to a stuck model (the largest such set): nothing there can ever
    finish, so a request to a stuck model would wait forever."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[_Key, _Waits] = {}

    def enter(self, caller: _Key, instance: int, instances: int, target: _Key) -> None:
        with self._lock:
            waits = self._models.setdefault(caller, _Waits(instances))
            waits.pending.setdefault(instance, []).append(target)

    def leave(self, caller: _Key, instance: int, target: _Key) -> None:
        with self._lock:
            waits = self._models.get(caller)
            targets = waits.pending.get(instance) if waits is not None else None
            if waits is None or targets is None:
                return
            targets.remove(target)
            if not targets:
                del waits.pending[instance]
            if not waits.pending:
                del self._models[caller]

    def stuck(self, model: _Key) -> bool:
        with self._lock:
            stuck = {key for key, waits in self._models.items() if len(waits.pending) >= waits.instances}
            changed = True
            while changed and model in stuck:
                changed = False
                for key in list(stuck):
                    pending = self._models[key].pending.values()
                    if not all(any(target in stuck for target in targets) for targets in pending):
                        stuck.discard(key)
                        changed = True
            return model in stuck


# the executor ----------------------------------------------------------------------------------------
_Caller = tuple[_Key, int, int]  # the calling instance: its model version, its id, the model's instance count


class BLSExecutor:
    """pb_utils' BLS hook for one server: its service, and the event loop that serves it."""

    def __init__(self, service: InferenceService, loop: asyncio.AbstractEventLoop) -> None:
        self.service = service
        self.loop = loop
        self.waits = WaitGraph()
        # requests in flight, so that close() can answer their callers when the server stops
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._streams: set[queue.SimpleQueue[Any]] = set()
        self._closed = False

    def close(self) -> None:
        """The server stops: every caller still waiting gets an error, and later requests too."""
        self._closed = True
        for future in list(self._inflight):
            future.cancel()
        for answers in list(self._streams):
            answers.put(error_response(_stopping()))
            answers.put(_END)

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        if self._closed:
            future.cancel()
        return future

    def serves(self, model_name: str) -> bool:
        return model_name in self.service.manager.models()

    # pb_utils hooks (on the calling model's thread) -----------------------------------------------
    def __call__(
        self, request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool, /
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        """exec(): hand the request to the server's loop and wait for its answer."""
        if _running_loop() is self.loop:  # waiting here would stop the loop that must answer
            return error_response(
                TritonError(
                    ErrorCode.INTERNAL,
                    f"BLS request to model '{model_name}' made on the server's event loop: use async_exec(), "
                    "or let the model run on its instance threads",
                )
            )
        caller = _calling_instance(self.service)
        if decoupled:
            return self._stream(request, model_name, model_version, caller)
        future = self._submit(self.infer(request, model_name, model_version, caller))
        try:
            response: pb_utils.InferenceResponse = future.result()
        except concurrent.futures.CancelledError:
            return error_response(_stopping())
        return response

    async def run_async(
        self, request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        """async_exec(): the same, awaited on the model's own event loop."""
        caller = _calling_instance(self.service)
        if decoupled:
            # the iterator is made once the first response is in (as Triton's exec returns): a
            # thread waits for it, so the model's loop runs its other coroutines meanwhile
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._stream, request, model_name, model_version, caller)
        coroutine = self.infer(request, model_name, model_version, caller)
        if _running_loop() is self.loop:
            return await coroutine
        future = self._submit(coroutine)
        try:
            response: pb_utils.InferenceResponse = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancelled():  # the model's own coroutine was cancelled: so is its request
                future.cancel()
                raise
            return error_response(_stopping())
        return response

    # on the server's loop ----------------------------------------------------------------------------
    async def infer(
        self, request: pb_utils.InferenceRequest, model_name: str, model_version: int, caller: _Caller | None
    ) -> pb_utils.InferenceResponse:
        """A non-decoupled BLS request's one response (errors inside it, as Triton gives them)."""
        if self.service.is_decoupled(model_name, _version(model_version)):
            return error_response(
                _refused(
                    model_name,
                    f"Model {model_name} is using the decoupled. The current BLS request call doesn't support "
                    "models using the decoupled transaction policy. Please use 'decoupled=True' argument to "
                    "the 'exec' or 'async_exec' calls for decoupled models.'",
                )
            )
        async with contextlib.aclosing(self.responses(request, model_name, model_version, caller)) as items:
            async for item in items:
                if item.final or item.error is not None:
                    return self._answer(item)
        return error_response(TritonError(ErrorCode.INTERNAL, f"model '{model_name}' sent no final response"))

    async def responses(
        self,
        pb_request: pb_utils.InferenceRequest,
        model_name: str,
        model_version: int,
        caller: _Caller | None,
    ) -> AsyncGenerator[StreamResponse, None]:
        """The request's responses as the model sends them; a refused request gives one error item.
        While they come, the calling instance counts as waiting on the model."""
        from server.service import StreamResponse

        version = _version(model_version)
        try:
            request = to_server_request(pb_request, model_name, model_version)
            _, entry = self.service.manager.resolve(model_name, version)
        except TritonError:
            message = f"Failed for execute the inference request. Model '{model_name}' is not ready."
            yield StreamResponse(None, _refused(model_name, message), True)
            return
        except Exception as exc:  # e.g. a tensor numpy cannot share
            yield StreamResponse(None, _refused(model_name, str(exc)), True)
            return
        target = (model_name, str(entry.version))
        waiting = caller is not None and entry.runner is not None
        if caller is not None and waiting:
            self.waits.enter(caller[0], caller[1], caller[2], target)
        try:
            refused = await self._deadlock(target) if waiting else None
            if refused is not None:
                yield StreamResponse(None, refused, True)
                return
            try:
                stream = self.service.infer_stream(request)
                first = await anext(stream)
            except TritonError as error:
                yield StreamResponse(None, _refused(model_name, error.message), True)
                return
            except StopAsyncIteration:
                return
            try:
                yield first
                if first.final:
                    return
                async for item in stream:
                    yield item
                    if item.final:
                        return
            finally:
                await stream.aclose()  # before the final item: the model sees the request cancelled
        finally:
            if caller is not None and waiting:
                self.waits.leave(caller[0], caller[1], target)

    async def _deadlock(self, target: _Key) -> TritonError | None:
        """The error for a request to `target` when waiting for it would never end, else None."""
        for attempt in range(_CONFIRMATIONS):
            if not self.waits.stuck(target):
                return None
            if attempt + 1 < _CONFIRMATIONS:
                await asyncio.sleep(_CONFIRM_DELAY_S)
        name, version = target
        return TritonError(
            ErrorCode.UNAVAILABLE,
            f"BLS request to model '{name}' (version {version}) would wait forever: every instance of it "
            "is waiting on a BLS request that needs this one to finish. Raise the instance_group count "
            f"of '{name}', or make fewer nested BLS calls",
        )

    @staticmethod
    def _answer(item: StreamResponse) -> pb_utils.InferenceResponse:
        return error_response(item.error) if item.error is not None else to_pb_response(item.response)

    # decoupled streams --------------------------------------------------------------------------------
    def _stream(
        self,
        request: pb_utils.InferenceRequest,
        model_name: str,
        model_version: int,
        caller: _Caller | None,
    ) -> pb_utils.ResponseIterator:
        """exec(decoupled=True): the responses arrive in a queue the returned iterator reads (from any
        thread but the server loop's); cancel() closes the stream, which the model sees as a cancel."""
        answers: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def pump() -> None:
            try:
                async with contextlib.aclosing(
                    self.responses(request, model_name, model_version, caller)
                ) as items:
                    async for item in items:
                        answers.put(self._answer(item))
            finally:
                answers.put(_END)

        self._streams.add(answers)
        task = self._submit(pump())

        def read() -> Iterator[pb_utils.InferenceResponse]:
            try:
                while (item := answers.get()) is not _END:
                    yield item
            finally:
                self._streams.discard(answers)
                # left before the end (the model dropped the iterator): nobody reads the rest, and
                # its instance no longer waits on it
                task.cancel()

        def cancel() -> None:
            task.cancel()

        return pb_utils.ResponseIterator(read(), cancel)


# who is calling, and whom --------------------------------------------------------------------------
def _calling_instance(service: InferenceService) -> _Caller | None:
    """The model instance whose execution makes this BLS request, when it holds that instance while it
    waits: (its model version, the instance's id, how many instances the model has). Each instance has
    a scope of its own (host.py, process_host.py), which tells them apart. None when the instance may
    take other requests meanwhile, or may: a model's own threads (no scope there), a decoupled model
    (its coroutines and threads answer while the instance runs on; only an in-thread instance's
    execute() is known to hold it)."""
    scope = pb_scope.current_model_scope()
    if scope is None:
        return None
    try:
        model, entry = service.manager.resolve(scope.model_name, scope.model_version)
    except TritonError:
        return None
    runner = entry.runner
    caller = None if runner is None else runner.instance_in_scope(scope)
    if runner is None or caller is None:
        return None
    config = model.config
    if config is not None and config.model_transaction_policy.decoupled:
        from server.backends.python.host import PythonModel

        if not isinstance(caller, PythonModel) or _running_loop() is not None:
            return None
    return (scope.model_name, scope.model_version), id(scope), runner.instance_count


def _version(model_version: int) -> str:
    return "" if model_version < 0 else str(model_version)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# installation ------------------------------------------------------------------------------------------
_active: list[BLSExecutor] = []  # one per running server in this process, the newest last
_active_lock = threading.Lock()


def _route(model_name: str) -> BLSExecutor | None:
    """The executor of the server running the calling model (several servers may share a process)."""
    scope = pb_scope.current_model_scope()
    with _active_lock:
        executors = list(_active)
    if scope is not None:
        for executor in reversed(executors):
            if executor.serves(scope.model_name):
                return executor
    return executors[-1] if executors else None


def _exec(
    request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool, /
) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
    executor = _route(model_name)
    if executor is None:
        raise pb_utils.TritonModelException("BLS is unavailable: the server is stopping")
    return executor(request, model_name, model_version, decoupled)


async def _async_exec(
    request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool
) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
    executor = _route(model_name)
    if executor is None:
        raise pb_utils.TritonModelException("BLS is unavailable: the server is stopping")
    return await executor.run_async(request, model_name, model_version, decoupled)


def install(service: InferenceService, loop: asyncio.AbstractEventLoop) -> BLSExecutor:
    """Let the models of `service` make BLS requests, run on `loop` (the server's)."""
    executor = BLSExecutor(service, loop)
    with _active_lock:
        _active.append(executor)
        pb_requests.set_bls_executor(_exec, _async_exec)
    return executor


def uninstall(executor: BLSExecutor) -> None:
    executor.close()
    with _active_lock:
        with contextlib.suppress(ValueError):
            _active.remove(executor)
        if not _active:
            pb_requests.set_bls_executor(None)
