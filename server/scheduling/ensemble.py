"""Ensemble scheduling (`platform: "ensemble"`): a DAG of steps over named tensors. A step runs as soon
as every tensor it reads exists; independent steps run concurrently. Each step is an ordinary request
to its composing model, so batching, instances and statistics apply there as usual. An exception of
tcli's own while running one is answered as a tcli bug and logged here, once, with its traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from server.backends.base import tcli_bug
from server.protocol.errors import TritonError, internal
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.trace import Trace
    from server.scheduling.stats import ModelStats

Infer = Callable[[InferenceRequest], Awaitable[InferenceResponse]]

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

    async def _run(self, request: InferenceRequest, infer: Infer, version: str) -> InferenceResponse:
        # None stands for a tensor that will not come: an optional input the client left out, or an
        # output a step did not return; a step that reads one runs without it, as in Triton (the
        # composing model says whether it may)
        tensors: dict[str, Tensor | None] = {name: None for name in self.optional_inputs}
        tensors.update((t.name, t) for t in request.inputs)
        pending = list(range(len(self.steps)))
        passed = {k: v for k, v in request.parameters.items() if k not in _FRONT_END_ONLY}
        while pending:
            ready = [i for i in pending if all(t in tensors for t in self.steps[i][2].values())]
            if not ready:
                missing = sorted({t for i in pending for t in self.steps[i][2].values() if t not in tensors})
                raise internal(
                    f"ensemble '{self.name}' cannot run: tensors {', '.join(missing)} are never produced"
                )
            results = await asyncio.gather(
                *(self._step(i, tensors, request.id, passed, infer, request.trace) for i in ready)
            )
            for produced in results:
                tensors.update(produced)
            pending = [i for i in pending if i not in ready]
        wanted = [o.name for o in request.outputs] or self.outputs
        outputs = [
            tensor for name in self.outputs if name in wanted and (tensor := tensors.get(name)) is not None
        ]
        return InferenceResponse(self.name, version, request.id, outputs)

    async def _step(
        self,
        index: int,
        tensors: dict[str, Tensor | None],
        request_id: str,
        parameters: dict[str, object],
        infer: Infer,
        trace: Trace | None,
    ) -> dict[str, Tensor | None]:
        model, model_version, input_map, output_map = self.steps[index]
        inputs = [
            Tensor(model_input, tensor.datatype, tensor.shape, tensor.data)
            for model_input, name in input_map.items()
            if (tensor := tensors[name]) is not None
        ]
        step_request = InferenceRequest(
            model,
            model_version,
            request_id,
            inputs,
            [RequestedOutput(o) for o in output_map],
            dict(parameters),
        )
        if trace is not None:  # each step's request is traced as the ensemble's child
            step_request.trace = trace.child()
        try:
            response = await infer(step_request)
        except TritonError as error:
            raise TritonError(
                error.code, f"in ensemble '{self.name}', step {index} ({model}): {error.message}"
            ) from None
        produced: dict[str, Tensor | None] = dict.fromkeys(output_map.values())  # None: not returned
        for tensor in response.outputs:
            name = output_map.get(tensor.name)
            if name is not None:
                produced[name] = Tensor(name, tensor.datatype, tensor.shape, tensor.data)
        return produced
