"""Ensemble scheduling (`platform: "ensemble"`): a DAG of steps over named tensors. A step runs as soon
as every tensor it reads exists; independent steps run concurrently. Each step is an ordinary request
to its composing model, so batching, instances and statistics apply there as usual. An exception of
tcli's own while running one is answered as a tcli bug and logged here, once, with its traceback.

A step whose model is decoupled (a decoupled model, or an ensemble with one) makes the ensemble
decoupled, as Triton marks it: it is streamed (`stream`), and each response of that step carries the
ensemble on by itself, through the steps after it, to a response of the ensemble (none when the step
sends none). One response's steps finish before the next response's start, so the ensemble's
responses come in the order of the step's."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from server.backends.base import tcli_bug
from server.protocol.errors import TritonError, internal
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.trace import Trace
    from server.scheduling.stats import ModelStats

Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


class StreamItem(Protocol):
    """One item of the service's infer_stream: a response, an error, or neither (the final flag)."""

    response: InferenceResponse | None
    error: TritonError | None


# a decoupled step's request -> its items as the model sends them
InferStream = Callable[[InferenceRequest], AsyncGenerator[StreamItem, None]]
Tensors = dict[str, "Tensor | None"]

_LOG = logging.getLogger("tcli.scheduling")

# sequence and priority settings travel with every step, as Triton passes them through
# request parameters a front end consumed itself: every other one reaches each step, as Triton gives
# every composing request the ensemble request's parameters
_FRONT_END_ONLY = ("binary_data_output",)


class EnsembleSchedule:
    def __init__(self, config: ModelConfig, stats: ModelStats) -> None:
        self.name = config.name
        self.stats = stats
        self.steps = [
            (
                step.model_name,
                str(step.model_version) if step.model_version > 0 else "",
                dict(step.input_map),
                dict(step.output_map),
            )
            for step in config.ensemble_scheduling.step
        ]
        self.outputs = [o.name for o in config.output]
        self.optional_inputs = frozenset(i.name for i in config.input if i.optional)
        self.batched = config.max_batch_size > 0
        # the composing models that are decoupled, as the repository manager finds them at load
        self.decoupled_models: frozenset[str] = frozenset()

    def composing_models(self) -> list[str]:
        return list(dict.fromkeys(model for model, _, _, _ in self.steps))

    async def infer(self, request: InferenceRequest, infer: Infer, version: str) -> InferenceResponse:
        start = time.monotonic_ns()
        try:
            response = await self._run(request, infer, version)
        except TritonError as error:
            self.stats.record_failure(time.monotonic_ns() - start, "BACKEND")
            raise error
        except Exception as exc:  # a bug of tcli's: this request fails, the ensemble goes on
            self.stats.record_failure(time.monotonic_ns() - start, "BACKEND")
            _LOG.error(
                "tcli bug running ensemble '%s' version %s (no instances: its steps run on the composing "
                "models), request %r",
                self.name,
                version,
                request.id,
                exc_info=exc,
            )
            raise tcli_bug(exc) from None
        rows = request.batch_size(self.batched)
        total = time.monotonic_ns() - start
        self.stats.record_success(rows, total, 0, 0, total, 0)
        # as Triton counts an ensemble: each request one execution of its own batch size
        self.stats.record_execution(rows, 0, total, 0)
        return response

    async def stream(
        self, request: InferenceRequest, infer: Infer, infer_stream: InferStream, version: str
    ) -> AsyncGenerator[InferenceResponse, None]:
        """The responses of a decoupled ensemble (see the module's docstring), as its steps send them."""
        start = time.monotonic_ns()
        tensors: Tensors = {name: None for name in self.optional_inputs}
        tensors.update((t.name, t) for t in request.inputs)
        passed = {k: v for k, v in request.parameters.items() if k not in _FRONT_END_ONLY}
        branches = self._branches(tensors, list(range(len(self.steps))), request, passed, infer, infer_stream)
        try:
            async for produced in branches:
                yield self._response(produced, request, version)
        except TritonError:
            self.stats.record_failure(time.monotonic_ns() - start, "BACKEND")
            raise
        finally:
            await branches.aclose()
        rows = request.batch_size(self.batched)
        total = time.monotonic_ns() - start
        self.stats.record_success(rows, total, 0, 0, total, 0)
        self.stats.record_execution(rows, 0, total, 0)

    async def _branches(
        self,
        tensors: Tensors,
        pending: list[int],
        request: InferenceRequest,
        passed: dict[str, object],
        infer: Infer,
        infer_stream: InferStream,
    ) -> AsyncGenerator[Tensors, None]:
        """The tensors once every step in `pending` ran, once per response of a decoupled step."""
        tensors = dict(tensors)  # this branch's own: a decoupled step's responses each start one
        while pending:
            ready = self._ready(tensors, pending)
            plain = [i for i in ready if self.steps[i][0] not in self.decoupled_models]
            if plain:
                results = await asyncio.gather(
                    *(self._step(i, tensors, request.id, passed, infer, request.trace) for i in plain)
                )
                for produced in results:
                    tensors.update(produced)
                pending = [i for i in pending if i not in plain]
                continue
            index, rest = ready[0], [i for i in pending if i != ready[0]]
            responses = self._stream_step(index, tensors, request.id, passed, infer_stream)
            try:
                async for produced in responses:
                    branch = self._branches(
                        {**tensors, **produced}, rest, request, passed, infer, infer_stream
                    )
                    try:
                        async for done in branch:
                            yield done
                    finally:
                        await branch.aclose()
            finally:
                await responses.aclose()
            return
        yield tensors

    def _ready(self, tensors: Tensors, pending: list[int]) -> list[int]:
        ready = [i for i in pending if all(t in tensors for t in self.steps[i][2].values())]
        if not ready:
            missing = sorted({t for i in pending for t in self.steps[i][2].values() if t not in tensors})
            raise internal(
                f"ensemble '{self.name}' cannot run: tensors {', '.join(missing)} are never produced"
            )
        return ready

    async def _stream_step(
        self,
        index: int,
        tensors: Tensors,
        request_id: str,
        parameters: dict[str, object],
        infer_stream: InferStream,
    ) -> AsyncGenerator[Tensors, None]:
        """A decoupled step's outputs, response by response."""
        model, _, _, output_map = self.steps[index]
        responses = infer_stream(self._step_request(index, tensors, request_id, parameters))
        try:
            async for item in responses:
                if item.error is not None:  # the step's request failed: so does the ensemble's
                    raise item.error
                if item.response is not None:
                    yield self._produced(output_map, item.response)
        except TritonError as error:
            raise TritonError(
                error.code, f"in ensemble '{self.name}', step {index} ({model}): {error.message}"
            ) from None
        finally:
            await responses.aclose()

    def _response(self, tensors: Tensors, request: InferenceRequest, version: str) -> InferenceResponse:
        wanted = [o.name for o in request.outputs] or self.outputs
        outputs = [
            tensor for name in self.outputs if name in wanted and (tensor := tensors.get(name)) is not None
        ]
        return InferenceResponse(self.name, version, request.id, outputs)

    async def _run(self, request: InferenceRequest, infer: Infer, version: str) -> InferenceResponse:
        # None stands for a tensor that will not come: an optional input the client left out, or an
        # output a step did not return; a step that reads one runs without it, as in Triton (the
        # composing model says whether it may)
        tensors: dict[str, Tensor | None] = {name: None for name in self.optional_inputs}
        tensors.update((t.name, t) for t in request.inputs)
        pending = list(range(len(self.steps)))
        passed = {k: v for k, v in request.parameters.items() if k not in _FRONT_END_ONLY}
        while pending:
            ready = self._ready(tensors, pending)
            results = await asyncio.gather(
                *(self._step(i, tensors, request.id, passed, infer, request.trace) for i in ready)
            )
            for produced in results:
                tensors.update(produced)
            pending = [i for i in pending if i not in ready]
        return self._response(tensors, request, version)

    def _step_request(
        self, index: int, tensors: Tensors, request_id: str, parameters: dict[str, object]
    ) -> InferenceRequest:
        model, model_version, input_map, output_map = self.steps[index]
        inputs = [
            Tensor(model_input, tensor.datatype, tensor.shape, tensor.data)
            for model_input, name in input_map.items()
            if (tensor := tensors[name]) is not None
        ]
        return InferenceRequest(
            model,
            model_version,
            request_id,
            inputs,
            [RequestedOutput(o) for o in output_map],
            dict(parameters),
        )

    @staticmethod
    def _produced(output_map: dict[str, str], response: InferenceResponse) -> Tensors:
        produced: Tensors = dict.fromkeys(output_map.values())  # None: not returned
        for tensor in response.outputs:
            name = output_map.get(tensor.name)
            if name is not None:
                produced[name] = Tensor(name, tensor.datatype, tensor.shape, tensor.data)
        return produced

    async def _step(
        self,
        index: int,
        tensors: dict[str, Tensor | None],
        request_id: str,
        parameters: dict[str, object],
        infer: Infer,
        trace: Trace | None,
    ) -> dict[str, Tensor | None]:
        model, _, _, output_map = self.steps[index]
        step_request = self._step_request(index, tensors, request_id, parameters)
        if trace is not None:  # each step's request is traced as the ensemble's child
            step_request.trace = trace.child()
        try:
            response = await infer(step_request)
        except TritonError as error:
            raise TritonError(
                error.code, f"in ensemble '{self.name}', step {index} ({model}): {error.message}"
            ) from None
        return self._produced(output_map, response)
