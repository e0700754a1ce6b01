"""One loaded model version: its instances, each a worker thread pulling batches from the model's
scheduler, and the execution of a batch (merge, reshape, execute, split, time, respond).

Python models get a response channel per request (`_Channel`): what the model sends through the
request's response sender goes to the request's `stream` (decoupled models) or becomes its one
result, and the request completes at its final response. Statistics follow Triton 2.51's python
backend: a request counts as a success (or failure) when execute() returns, whenever its responses
are sent.

Cheap python models skip the hand-off: `run_inline` executes a request on the caller's thread (the
event loop) when the model's executions have recently been short, the queue is empty and an instance
is free. Handing a request to a worker thread and back costs more than add_sub's whole execute(),
because each side waits for the GIL the other holds (benchmarks/NOTES.md). A model that turns slow
goes back to its worker threads, so it cannot stall the loop for long. Python instances in processes
of their own take the event loop's requests without a thread at all (`dispatch.LoopDispatcher`).

What the runner calls on an instance is the contract in server/backends/base.py, on a scheduler the
one in work.py. A batch that fails answers its requests with the error and the instance goes on: a
failure of the model's own code (`ModelError`) with the model's message, anything else unexpected
as a bug of tcli's. Either is logged here once, with its traceback, the model, version, instance and
request ids.

Long: the parts left here (workers, the inline path, executing a batch, closing) share the runner's
instance table, its busy locks and its closed state; loading the instances (instance_loading.py),
batch assembly (batch.py, batch_io.py) and the event loop's hand-off (dispatch.py) are apart."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from server.backends.base import (
    LoopRequestModel,
    ModelContext,
    ModelError,
    RequestModel,
    Rescheduled,
    ResponseChannel,
    TensorModel,
    instance_specs,
    tcli_bug,
)
from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import TritonError
from server.protocol.types import InferenceResponse, Tensor
from server.scheduling import verbose
from server.scheduling.batch import batch_key, merge_inputs, requested_outputs, split_outputs
from server.scheduling.batch_io import BatchIO
from server.scheduling.dispatch import LoopDispatcher
from server.scheduling.instance_loading import load_instances
from server.scheduling.instance_update import matching_instances
from server.scheduling.sequence import NullItem
from server.scheduling.warmup import warm_up, warmup_samples
from server.scheduling.work import (
    Completion,
    DefaultScheduler,
    ResponseStream,
    Scheduler,
    WorkItem,
    drop_cancelled,
)

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import InstanceSpec
    from server.protocol.types import InferenceRequest
    from server.scheduling.rate_limiter import InstanceSlot, RateLimiter
    from server.scheduling.stats import ModelStats


# A model runs inline while its executions average (exponentially weighted) under this: a longer
# stall of the event loop delays every other connection's requests.
INLINE_BUDGET_NS = 500_000
_EMA_WEIGHT = 0.125  # weight of the newest execution in the average
# how long an instance update waits for a removed instance to be free before leaving its unload to
# the old runner's drain
STEP_DOWN_WAIT_S = 30.0
_LOG = logging.getLogger("tcli.scheduling")


def make_scheduler(config: ModelConfig, model_dir: Path | None = None) -> Scheduler:
    """The scheduler the config asks for; `model_dir` holds a sequence model's initial_state files."""
    choice = config.WhichOneof("scheduling_choice")
    if choice == "sequence_batching":
        from server.scheduling.sequence import SequenceScheduler

        return SequenceScheduler(config, model_dir)
    if choice == "dynamic_batching" and config.max_batch_size > 0:
        from server.scheduling.dynamic_batcher import DynamicBatcher

        ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        if not ragged:
            return DynamicBatcher(config.dynamic_batching, config.max_batch_size)
        # requests that differ only in the shapes of ragged inputs share batches
        return DynamicBatcher(
            config.dynamic_batching,
            config.max_batch_size,
            lambda request: batch_key(request, True, ragged),
        )
    return DefaultScheduler()


class ModelRunner:
    """Executes requests for one model version on its instances."""

    def __init__(
        self,
        context: ModelContext,
        stats: ModelStats,
        scheduler: Scheduler | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.context = context
        # --rate-limit=execution_count: each execution holds its instance's resources (rate_limiter.py)
        self._rate_limiter = rate_limiter
        self._slots: list[InstanceSlot] = []
        self.config = context.config
        self.name = context.config.name
        self.version = str(context.version)
        self.batched = context.config.max_batch_size > 0
        self.stats = stats
        self.scheduler = scheduler or make_scheduler(context.config, context.model_dir)
        self.scheduler.stats = stats
        # a sequence batcher pads direct batches with null requests: results dropped, stats skip them
        self._pads = self.scheduler.pads_batches
        self._instances: list[TensorModel | RequestModel] = []
        self._instance_names: list[str] = []
        self._specs: list[InstanceSpec] = []
        # instances this runner must not unload: taken over by the runner that replaced it (an
        # instance update), already finalized, or (while it loads) still its predecessor's
        self._not_mine: set[int] = set()
        self._busy: list[threading.Lock] = []  # held while an instance executes (worker or inline)
        self._threads: list[threading.Thread] = []  # started with the first queued request
        self._threads_lock = threading.Lock()
        self._threads_started = False
        self._queued = False  # a request went to the scheduler: workers must drain it
        self._stopped = False
        self._closed = False
        # instances that may run on the caller's thread, and the average execution time that decides it;
        # it starts above the budget so a model's first executions (often its slowest) go to threads
        self._inline: list[tuple[int, RequestModel]] = []  # (index, instance)
        self._dispatcher: LoopDispatcher | None = None  # instances the event loop hands requests to
        self._execute_ema_ns = 2 * INLINE_BUDGET_NS
        self._output_types = {
            o.name: datatypes.config_to_wire(enum_name(o, "data_type")) for o in context.config.output
        }
        self._output_names = [o.name for o in context.config.output]
        self._input_reshape = {
            i.name: tuple(i.reshape.shape) for i in context.config.input if i.HasField("reshape")
        }
        self._output_reshape = {o.name: tuple(o.dims) for o in context.config.output if o.HasField("reshape")}
        # ragged inputs, batch_input, batch_output: what a tensor model's batch needs besides merging
        self._batch_io = BatchIO.of(context.config)

    # lifecycle -------------------------------------------------------------------------------------
    def load(self, previous: ModelRunner | None = None) -> None:
        """Create every instance, register it with the rate limiter and run the config's warmup samples
        on it (raising the first failure, after unloading what did load), then start one worker thread
        per instance (when the first request is queued). `previous`: the runner of this version whose
        config differed only in its instance_group (an instance update, see instance_update.py): its
        instances that match take their place here as they are, and only the others are created;
        they become this runner's when the load succeeds (`previous.step_down()` then finalizes the
        rest)."""
        specs = instance_specs(self.config)
        kept: dict[int, int] = {}
        if previous is not None:
            kept = matching_instances(previous.config, previous._specs, self.config, specs)
        self._not_mine = set(kept)
        try:
            added = iter(load_instances(self.context, [s for i, s in enumerate(specs) if i not in kept]))
            assert previous is not None or not kept
            self._instances.extend(
                previous._instances[kept[i]] if previous is not None and i in kept else next(added)
                for i in range(len(specs))
            )
            self._specs = specs
            for spec in specs:
                self._instance_names.append(spec.name)
                if self._rate_limiter is not None:
                    group = self.config.instance_group[spec.group]
                    self._slots.append(
                        self._rate_limiter.register(spec.name, spec.device_id, group.rate_limiter)
                    )
            if not any(slot.needs for slot in self._slots):  # nothing to wait for: the fast paths stay
                self._unregister()
            self.scheduler.prepare(len(self._instances))
            for index, name in enumerate(self._instance_names):
                if index in kept:  # already warm
                    continue
                samples = warmup_samples(self.config, self.context.model_dir, self.version)
                warm_up(self.name, name, samples, partial(self._execute, self._instances[index], index))
        except BaseException:
            self._unload_instances()
            raise
        verbose.loaded(self.name, self.version, self.config, self._instances)
        # a kept instance keeps its busy lock: what its old runner still runs on it, this one waits for
        self._busy = [
            previous._busy[kept[i]] if previous is not None and i in kept else threading.Lock()
            for i in range(len(self._instances))
        ]
        if previous is not None:
            previous._not_mine.update(kept.values())
        self._not_mine = set()
        scheduler = self.scheduler
        # batching and sequence schedulers need their queue; rate-limited executions wait on the workers
        if isinstance(scheduler, DefaultScheduler) and not self._slots:
            self._inline = [
                (index, instance)
                for index, instance in enumerate(self._instances)
                if isinstance(instance, RequestModel) and instance.inline_ok
            ]
            on_loop = [i for i in self._instances if isinstance(i, LoopRequestModel)]
            if on_loop and len(on_loop) == len(self._instances):
                dispatcher = LoopDispatcher(self, on_loop, self._busy)
                self._dispatcher = dispatcher
                scheduler.elsewhere = lambda: len(dispatcher.waiting) + dispatcher.queued_behind()

    def _start_workers(self, *, draining: bool = False) -> None:
        """One worker thread per instance, started when the first request is queued: a model served
        inline (or never asked) needs none, and starting 10,000 threads at load, each waiting for the
        GIL, was a sixth of a large repository's load time. Once the runner is closed, only `close`
        starts them, to drain what was queued before."""
        if self._threads_started:
            return
        with self._threads_lock:
            if self._threads_started or (self._stopped and not draining):
                return
            for index, instance in enumerate(self._instances):
                thread = threading.Thread(
                    target=self._work,
                    args=(instance, index),
                    name=f"{self.name}_{self.version}_{index}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)
            self._threads_started = True

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking requests, finish what is queued and in flight, then unload the instances."""
        self.close()
        self.finish(timeout)

    def close(self) -> None:
        """Stop taking requests (the first half of `stop`): many runners stopping together close all
        first, so their worker threads wind down side by side."""
        self._closed = True
        self.scheduler.close()
        with self._threads_lock:
            self._stopped = True
        if self._queued:  # a request queued before the close still runs
            self._start_workers(draining=True)

    def step_down(self) -> None:
        """This runner was replaced by one that took over some of its instances (`load(previous)`):
        stop taking requests, finalize each instance not taken over once what it runs is done, and
        leave the rest of the drain (requests still running on the kept instances) to a thread."""
        self.close()
        for index, instance in enumerate(self._instances):
            if index in self._not_mine:
                continue
            if index < len(self._threads):
                self._threads[index].join()
            # held for good once taken: nothing runs on it again. An instance whose process is being
            # started again holds it meanwhile, maybe for long: `finish` unloads that one, later
            if index < len(self._busy) and not self._busy[index].acquire(timeout=STEP_DOWN_WAIT_S):
                continue
            with contextlib.suppress(Exception):  # a model's own cleanup failing must not stop the others
                instance.unload()
            self._not_mine.add(index)
        threading.Thread(target=self.finish, name=f"retire-{self.name}_{self.version}", daemon=True).start()

    def finish(self, timeout: float | None = None) -> None:
        """Wait for queued and in-flight requests after `close`, then unload the instances."""
        for thread in self._threads:
            thread.join(timeout)
        out = [] if self._dispatcher is None else self._dispatcher.settle_before_unload(timeout)
        self._unload_instances(out)

    def _unregister(self) -> None:
        for slot in self._slots:
            slot.limiter.unregister(slot)
        self._slots = []

    def _unload_instances(self, out: list[int] | None = None) -> None:
        """`out`: instances whose batch a stopped event loop will never complete (not waited for)."""
        self._inline = []
        self._unregister()
        for index, instance in enumerate(self._instances):
            if index in self._not_mine:
                continue
            # an inline execution on the event loop may still hold the instance: let it finish
            held = index < len(self._busy) and index not in (out or ())
            busy = self._busy[index] if held else contextlib.nullcontext()
            # a model's own cleanup failing must not stop the others unloading
            with busy, contextlib.suppress(Exception):
                instance.unload()
        self._instances.clear()
        self._instance_names.clear()
        self._specs = []

    # what the layers above may ask -----------------------------------------------------------------
    @property
    def instance_count(self) -> int:
        return len(self._instances)

    @property
    def closed(self) -> bool:
        """Closed (the server stops): its scheduler refuses what it no longer takes."""
        return self._closed

    def in_flight(self) -> int:
        """Requests queued or executing now (the server's stop waits for them)."""
        return self.scheduler.pending() + sum(lock.locked() for lock in self._busy)

    def ready(self) -> bool:
        """Whether every instance says it is ready (a python model's is_model_ready())."""
        return all(i.ready() for i in list(self._instances) if isinstance(i, RequestModel))

    def instance_in_scope(self, scope: object) -> RequestModel | None:
        """The instance whose model code runs in `scope` (a python model's call scope; see
        RequestModel.serves_scope), when it is one of this version's."""
        for instance in list(self._instances):
            if isinstance(instance, RequestModel) and instance.serves_scope(scope):
                return instance
        return None

    # requests --------------------------------------------------------------------------------------
    def submit(
        self, request: InferenceRequest, complete: Completion, stream: ResponseStream | None = None
    ) -> None:
        """Queue `request`; `complete` gets its result (or follows its final response, which goes to
        `stream` with every other response of a decoupled model). Raises TritonError when the
        scheduler refuses it."""
        item = WorkItem(request, request.batch_size(self.batched), complete)
        if stream is not None:
            item.stream = stream
        self._queued = True
        self.scheduler.enqueue(item)
        self._start_workers()

    def run_inline(self, request: InferenceRequest, complete: Completion) -> bool:
        """Execute `request` on this thread when that is cheaper than queueing it (see the module
        docstring); False, having done nothing, when it must be submitted instead. `complete` is
        called as with `submit`, usually before this returns."""
        if self._dispatcher is not None:
            return not self._closed and self._dispatcher.offer(request, complete)
        if self._execute_ema_ns > INLINE_BUDGET_NS or self._closed or self.scheduler.pending():
            return False
        for index, instance in self._inline:
            busy = self._busy[index]
            if busy.acquire(blocking=False):
                try:
                    item = WorkItem(request, request.batch_size(self.batched), complete)
                    self._run_request_batch(instance, index, [item])
                finally:
                    busy.release()
                return True
        return False

    def _work(self, instance: TensorModel | RequestModel, index: int) -> None:
        busy = self._busy[index]
        dispatcher = self._dispatcher
        while True:
            batch = self.scheduler.next_batch(index)
            if batch is None:
                return
            if not self._pads:  # a sequence's batch keeps its slots: its requests run whatever happens
                batch = drop_cancelled(batch, self.stats)
                if not batch:
                    continue
            if dispatcher is not None and dispatcher.forward(batch):
                continue  # the event loop runs it
            with busy:
                self._execute(instance, index, batch)
            if dispatcher is not None:
                dispatcher.wake()

    def _execute(self, instance: TensorModel | RequestModel, index: int, batch: list[WorkItem]) -> None:
        """Run `batch` on instance `index` (the caller holds its busy lock), holding its rate limiter
        resources while it executes."""
        held = self._slots[index].held() if self._slots else contextlib.nullcontext()
        with held:
            if isinstance(instance, TensorModel):
                self._run_tensor_batch(instance, index, batch)
            else:
                self._run_request_batch(instance, index, batch)

    def _run_tensor_batch(self, model: TensorModel, index: int, batch: list[WorkItem]) -> None:
        start = time.monotonic_ns()
        for item in batch:
            item.started_ns, item.instance = start, index
            if item.request.trace is not None:
                item.request.trace.computing(item.enqueued_ns, start)
        verbose.executing(self.name, self.version, self._instance_names, index, batch)
        try:
            requests = [item.request for item in batch]
            io = self._batch_io
            if len(batch) == 1 and io is None:
                inputs = {t.name: t.data for t in requests[0].inputs}
                names = [o.name for o in requests[0].outputs] or self._output_names
            else:
                inputs = merge_inputs(requests, io.ragged if io is not None else frozenset())
                if io is not None:
                    inputs.update(io.batch_inputs(requests))
                # requests asking for different outputs share the batch: it computes them all
                names = requested_outputs(requests, self._output_names)
            rows = sum(item.rows for item in batch)
            inputs = self._reshape_inputs(inputs, rows)
            infer_start = time.monotonic_ns()
            outputs = model.execute(inputs, names)
            infer_end = time.monotonic_ns()
            scattered = io.scatter(outputs, requests) if io is not None and io.outputs else None
            outputs = self._reshape_outputs(outputs, rows)
            if len(batch) == 1:
                per_request = [outputs]
            else:
                per_request = split_outputs(outputs, [item.rows for item in batch])
            if scattered is not None:
                for part, extra in zip(per_request, scattered, strict=True):
                    part.update(extra)
            responses = [
                self._response(item.request, out) for item, out in zip(batch, per_request, strict=True)
            ]
        except TritonError as error:  # the model's own failure (logged) or a refusal of tcli's
            self.fail(batch, error)
            return
        except Exception as exc:  # tcli's bug fails this batch, never the worker
            self.fail(batch, self.bug(batch, exc))
            return
        end = time.monotonic_ns()
        self._succeed(batch, responses, start, infer_start, infer_end, end)

    def _run_request_batch(self, model: RequestModel, index: int, batch: list[WorkItem]) -> None:
        start, channels = self.begin(batch, index)
        try:
            results = model.execute_channels([item.request for item in batch], channels)
        except TritonError as error:  # the model's own failure (logged) or a refusal of tcli's
            self.fail(batch, error)
            return
        except Exception as exc:  # tcli's bug fails this batch, never the worker
            self.fail(batch, self.bug(batch, exc))
            return
        self.settle(batch, results, start)

    # a request model's batch in two halves, for who starts it and who gets its results (dispatch.py)
    def begin(self, batch: list[WorkItem], index: int) -> tuple[int, list[ResponseChannel]]:
        """Mark the batch started on instance `index`: its start time, and a response channel per
        request."""
        start = time.monotonic_ns()
        for item in batch:
            item.started_ns, item.instance = start, index
            if item.request.trace is not None:
                item.request.trace.computing(item.enqueued_ns, start)
        verbose.executing(self.name, self.version, self._instance_names, index, batch)
        return start, [_Channel(item, self) for item in batch]

    def settle(
        self, batch: list[WorkItem], results: Sequence[InferenceResponse | TritonError | None], start: int
    ) -> None:
        """Record the execution and complete each request its result answers (None: it answers, or
        answered, through its response sender)."""
        end = time.monotonic_ns()
        if self._inline:
            self._execute_ema_ns += int(_EMA_WEIGHT * (end - start - self._execute_ema_ns))
        self.stats.record_execution(sum(item.rows for item in batch), 0, end - start, 0)
        self._log_model_errors(batch, results)
        for item, result in zip(batch, results, strict=True):
            if self._pads and isinstance(item, NullItem):
                continue
            if isinstance(result, Rescheduled):  # to be executed again (an iterative sequence)
                result = self._reschedule(item, result)
                if result is None:
                    continue
            if item.request.trace is not None:  # a python model's inputs and outputs are its own
                item.request.trace.computed(start, end)
            if isinstance(result, TritonError):
                self.stats.record_failure(end - item.enqueued_ns, "BACKEND")
                item.complete(result)
            else:
                self.stats.record_success(
                    item.rows, end - item.enqueued_ns, start - item.enqueued_ns, 0, end - start, 0
                )
                if result is not None:
                    item.complete(result)

    def _reschedule(self, item: WorkItem, rescheduled: Rescheduled) -> TritonError | None:
        """Queue a request its model rescheduled again; the request's error when that fails."""
        try:
            self._queued = True
            if self.scheduler.reschedule(item):
                self._start_workers()
                return None
            error: TritonError = rescheduled
        except TritonError as refused:
            error = refused
        _LOG.error("%s", error.message)  # Triton logs it (and never answers the request)
        return error

    def _succeed(
        self,
        batch: list[WorkItem],
        responses: list[InferenceResponse],
        start: int,
        infer_start: int,
        infer_end: int,
        end: int,
    ) -> None:
        input_ns, infer_ns, output_ns = infer_start - start, infer_end - infer_start, end - infer_end
        self.stats.record_execution(sum(item.rows for item in batch), input_ns, infer_ns, output_ns)
        for item, response in zip(batch, responses, strict=True):
            if self._pads and isinstance(item, NullItem):
                continue
            self.stats.record_success(
                item.rows, end - item.enqueued_ns, start - item.enqueued_ns, input_ns, infer_ns, output_ns
            )
            if item.request.trace is not None:
                item.request.trace.computed(infer_start, infer_end)
            item.complete(response)

    def fail(self, batch: list[WorkItem], error: TritonError) -> None:
        """Answer every request of the batch with `error` (a model's own error is logged here)."""
        if isinstance(error, ModelError):
            self._log_model_errors(batch, [error] * len(batch))
        end = time.monotonic_ns()
        # Triton counts an execution that failed in the backend as an execution too
        started = batch[0].started_ns
        self.stats.record_execution(sum(item.rows for item in batch), 0, end - started if started else 0, 0)
        for item in batch:
            if self._pads and isinstance(item, NullItem):
                continue
            self.stats.record_failure(end - item.enqueued_ns, "BACKEND")
            if item.request.trace is not None and item.started_ns:
                item.request.trace.execution_failed()
            item.complete(error)

    # the log -----------------------------------------------------------------------------------------
    def _where(self, batch: Sequence[WorkItem]) -> tuple[str, str, str, str]:
        """Model, version, instance and the request ids of `batch`, as the log names them."""
        index = batch[0].instance if batch else -1
        names = self._instance_names
        instance = names[index] if 0 <= index < len(names) else "?"
        real = [item for item in batch if not (self._pads and isinstance(item, NullItem))]
        ids = ", ".join(repr(item.request.id) for item in real) or "(no ids)"
        return self.name, self.version, instance, ids

    def bug(self, batch: list[WorkItem], exc: BaseException) -> TritonError:
        """Log tcli's own exception, which failed `batch`, once with its traceback; the requests'
        answer."""
        _LOG.error(
            "tcli bug running a batch of model '%s' version %s instance '%s', request(s) %s",
            *self._where(batch),
            exc_info=exc,
        )
        return tcli_bug(exc)

    def model_error(self, item: WorkItem, error: ModelError) -> None:
        """Log a model's own failure that reached one request through its response sender."""
        self._log_model_errors([item], [error])

    def _log_model_errors(
        self, batch: Sequence[WorkItem], results: Sequence[InferenceResponse | TritonError | None]
    ) -> None:
        """Each failure of the model's own code among `results`, once, with the requests it failed."""
        # one exception failing several requests: one error object, or equal copies from a process
        failed: dict[tuple[str, str], tuple[ModelError, list[WorkItem]]] = {}
        for item, result in zip(batch, results, strict=True):
            if isinstance(result, ModelError) and not result.logged:
                failed.setdefault((result.message, result.trace), (result, []))[1].append(item)
        for error, items in failed.values():
            error.logged = True
            model, version, instance, ids = self._where(items)
            _LOG.error(
                "model '%s' version %s instance '%s' failed request(s) %s: %s%s",
                model,
                version,
                instance,
                ids,
                error.message.partition("\n")[0],  # the traceback that follows has the rest
                f"\n{error.trace}" if error.trace else "",
            )

    # tensors ---------------------------------------------------------------------------------------
    def _reshape_inputs(
        self, inputs: dict[str, np.ndarray[Any, Any]], rows: int
    ) -> dict[str, np.ndarray[Any, Any]]:
        if not self._input_reshape:
            return inputs
        out = dict(inputs)
        ragged = self._batch_io.ragged if self._batch_io is not None else frozenset()
        for name, shape in self._input_reshape.items():
            if name in out and name not in ragged:  # a ragged input stays the 1-D concatenation
                out[name] = out[name].reshape(((rows,) if self.batched else ()) + shape)
        return out

    def _reshape_outputs(
        self, outputs: dict[str, np.ndarray[Any, Any]], rows: int
    ) -> dict[str, np.ndarray[Any, Any]]:
        for name, dims in self._output_reshape.items():
            if name in outputs and dims.count(-1) <= 1:
                outputs[name] = outputs[name].reshape(((rows,) if self.batched else ()) + dims)
        return outputs

    def _response(
        self, request: InferenceRequest, outputs: dict[str, np.ndarray[Any, Any]]
    ) -> InferenceResponse:
        tensors = []
        asked = request.outputs
        if asked and (
            len(asked) != len(outputs) or any(o.name != n for o, n in zip(asked, outputs, strict=True))
        ):
            # the batch computed what any of its requests asked for: this one gets its own, in its order
            outputs = {o.name: outputs[o.name] for o in asked if o.name in outputs}
        for name, array in outputs.items():
            datatype = self._output_types.get(name) or datatypes.numpy_to_wire(array.dtype)
            if datatype != "BYTES" and datatype != "BF16":
                expected = datatypes.wire_to_numpy(datatype)
                if array.dtype != expected:
                    array = array.astype(expected)
            # from a list, not a generator: a tuple built from a generator is resized, so its memory comes
            # from the allocator rather than the tuple free list, to which it then goes: every response
            # would grow the free list (memory that tracemalloc counts) until it is full
            tensors.append(Tensor(name, datatype, tuple([int(d) for d in array.shape]), array))
        return InferenceResponse(self.name, self.version, request.id, tensors)


class _Channel:
    """One request's end of its python model's response sender (any thread may send)."""

    __slots__ = ("_item", "_response", "_runner")

    def __init__(self, item: WorkItem, runner: ModelRunner) -> None:
        self._item = item
        self._runner = runner
        self._response: InferenceResponse | TritonError | None = None

    def send(self, result: InferenceResponse | TritonError | None, final: bool) -> None:
        item = self._item
        if isinstance(result, ModelError):  # e.g. a decoupled model's coroutine failed
            self._runner.model_error(item, result)
        stream = item.stream
        if stream is not None:
            stream.deliver(result, final)
        elif result is not None:
            self._response = result  # a default model's one response (its final flag may follow alone)
        if not final:
            return
        if stream is None:
            result = self._response
        if result is None:  # nothing but the final flag: the schedulers still see a (empty) response
            request = item.request
            result = InferenceResponse(request.model_name, request.model_version, request.id, [])
        item.complete(result)

    def is_cancelled(self) -> bool:
        stream = self._item.stream
        return self._item.request.cancelled or (stream is not None and stream.cancelled)
