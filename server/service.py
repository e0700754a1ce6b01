"""The one core facade both front ends call: health, metadata, config, infer, repository, statistics,
logging and trace settings. Nothing here knows HTTP or gRPC: every answer is a typed message of the
protocol (`server/protocol/messages.py`, `InferenceResponse`), which each front end only encodes.

Two ways to infer: `infer(request)` gives a model's one response (every model but decoupled ones);
`infer_stream(request)` yields the responses as the model sends them (any model: decoupled ones send
zero, one or many, the others exactly one). Both raise TritonError for a request that never reaches
the model (unknown model, bad inputs, sequence errors, a full queue); `infer_stream` yields the
errors the model answers with, as StreamResponse items, since a decoupled model may go on sending
after one. A front end hands either the request's `admission` (its model, resolved once), and both
go through one admission step (`_admit`); BLS and the in-process API leave it to them.

Long: the facade is one module because every front end call is a method of it; what each call does
lives elsewhere (the repository manager, the runners, the ensemble schedule). The inference path
(admission, unary, streamed, an ensemble's and a decoupled ensemble's) reads here from start to end:
split, its steps' order and error handling would be in several places."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from server.classification import classify
from server.config import backends
from server.config.validate import enum_name
from server.logs import LogSettings, apply_verbosity
from server.metrics_snapshot import MetricsSnapshot, metrics_snapshot
from server.protocol import datatypes
from server.protocol.errors import (
    TritonError,
    invalid_arg,
    no_available_versions,
    trace_model_unknown,
    unavailable,
    unsupported,
)
from server.protocol.messages import (
    LogSettingsResponse,
    ModelConfigResponse,
    ModelIndex,
    ModelMetadataResponse,
    ModelReadyResponse,
    ModelStatisticsResponse,
    RepositoryIndexResponse,
    ServerMetadataResponse,
    TensorMetadata,
    TraceSettingResponse,
)
from server.protocol.trace import QUEUE_START
from server.protocol.types import InferenceRequest, InferenceResponse
from server.repository.manager import ControlMode, ModelManager
from server.scheduling import verbose
from server.scheduling.work import ResponseStream, stopping
from server.tracing.changes import TRACE_DEFAULTS, parse_changes
from server.tracing.manager import TraceManager

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.trace import Trace
    from server.repository.models import ServedModel, VersionEntry
    from server.scheduling.runner import ModelRunner

SERVER_NAME = "triton"  # what Triton clients expect to find; tcli's own version is in `tcli --version`
SERVER_VERSION = "2.51.0"  # the Triton release whose protocol tcli follows
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",  # listed only when client shared memory is allowed (--allow-client-shm)
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
_UINT32 = 2**32
_INT32_MAX = 2**31 - 1

log = logging.getLogger("tcli.server")


@dataclass
class TraceSettings:
    values: dict[str, Any] = field(default_factory=lambda: dict(TRACE_DEFAULTS))


def _deliver(future: asyncio.Future[Any], result: object) -> None:
    if not future.done():
        future.set_result(result)


@dataclass(slots=True)
class StreamResponse:
    """One item of `infer_stream`: a response, or an error the model answered with, or (neither) the
    flags-only end of a decoupled model's responses. `final` marks the request's last item."""

    response: InferenceResponse | None = None
    error: TritonError | None = None
    final: bool = False


@dataclass(slots=True)
class Admission:
    """A request's model and version, resolved once for the whole request: what a front end needs
    before it decodes the request (the config a raw binary request is read with, whether the model is
    decoupled) and what `infer` and `infer_stream` then run, without resolving it again. A model that
    cannot serve the request leaves `error` (Triton's unknown-model words), raised by `require`
    where the request goes on, so that the front end keeps Triton's order of errors."""

    model: ServedModel | None
    entry: VersionEntry | None
    decoupled: bool  # model_transaction_policy.decoupled: read from the name even when the version is not
    error: TritonError | None = None

    def require(self) -> tuple[ServedModel, VersionEntry]:
        if self.error is not None:
            raise self.error
        assert self.model is not None and self.entry is not None
        return self.model, self.entry

    @property
    def config(self) -> ModelConfig:
        model, _ = self.require()
        assert model.config is not None  # a resolved model always has one
        return model.config


class InferenceService:
    def __init__(
        self,
        manager: ModelManager,
        *,
        strict_readiness: bool = True,
        allow_client_shm: bool = False,
        server_id: str = SERVER_NAME,
        log_settings: LogSettings | None = None,
        trace_values: dict[str, Any] | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.manager = manager
        self.strict_readiness = strict_readiness
        self.allow_client_shm = allow_client_shm
        self.server_id = server_id  # tritonserver --id: the name server metadata answers
        self.live_flag = True
        self.accepting = True  # False once shutdown starts: readiness drops, new requests get 503
        # True from SIGTERM on: readiness answers false while requests are still served, so that a load
        # balancer routes around the server before it stops accepting (app.py Server.unready)
        self.unready = False
        self.requests_started = 0  # inference requests so far: shows when a balancer stopped sending
        self.log_settings = log_settings or LogSettings()
        # the settings the server started with: what resetting a global setting (null) goes back to
        self.trace_startup = dict(trace_values or TRACE_DEFAULTS)
        self.trace = TraceSettings(dict(self.trace_startup))
        self.model_trace: dict[str, dict[str, Any]] = {}
        # which requests get a trace (front ends ask it); acts on the settings below
        self.tracer = tracer or TraceManager(self.trace.values)

    # health ----------------------------------------------------------------------------------------
    def live(self) -> bool:
        return self.live_flag and not self.manager.initialize_failed

    def ready(self) -> bool:
        """Accepting requests and not stopping, every repository read at least once (a bucket that
        never answered keeps the server unready), and with strict readiness every loaded model ready."""
        if self.unready or not self.accepting or not self.manager.repositories_listed():
            return False
        return self.manager.all_ready() if self.strict_readiness else True

    def server_metadata(self) -> ServerMetadataResponse:
        extensions = [e for e in EXTENSIONS if self.allow_client_shm or e != "system_shared_memory"]
        return ServerMetadataResponse(self.server_id, SERVER_VERSION, extensions)

    # models ----------------------------------------------------------------------------------------
    def model_ready(self, name: str, version: str = "") -> ModelReadyResponse:
        try:
            _, entry = self.manager.resolve(name, version)
        except TritonError:
            return ModelReadyResponse(False)
        # the model's own word too (a python model's is_model_ready()), as Triton asks its backends
        return ModelReadyResponse(entry.runner is None or entry.runner.ready())

    def is_decoupled(self, name: str, version: str = "") -> bool:
        """Whether the model's config says `model_transaction_policy { decoupled: true }` (HTTP answers
        such models 501). Cheap, never raises: False for a model that is not known."""
        model = self.manager.models().get(name)
        config = model.config if model is not None else None
        return config is not None and config.model_transaction_policy.decoupled

    def _ready_model(self, name: str, version: str) -> ServedModel:
        model, _ = self.manager.resolve(name, version)  # a resolved model always has a config
        return model

    def model_metadata(self, name: str, version: str = "") -> ModelMetadataResponse:
        model = self._ready_model(name, version)
        config = model.config
        assert config is not None
        batch = [-1] if config.max_batch_size > 0 else []
        versions = [version] if version not in ("", "-1") else [str(v) for v in model.ready_versions()]

        def describe(tensor: Any) -> TensorMetadata:
            wire = datatypes.config_to_wire(enum_name(tensor, "data_type"))
            return TensorMetadata(tensor.name, wire, batch + list(tensor.dims))

        return ModelMetadataResponse(
            name,
            versions,
            config.platform or config.backend,
            [describe(t) for t in config.input],
            [describe(t) for t in config.output],
        )

    def input_schema(self, admission: Admission) -> tuple[bool, dict[str, tuple[str, tuple[int, ...]]]]:
        """Whether an admitted model batches, and its inputs: name -> (wire datatype, dims)."""
        config = admission.config
        inputs = {
            tensor.name: (datatypes.config_to_wire(enum_name(tensor, "data_type")), tuple(tensor.dims))
            for tensor in config.input
        }
        return config.max_batch_size > 0, inputs

    def model_config(self, name: str, version: str = "") -> ModelConfigResponse:
        model = self._ready_model(name, version)
        assert model.config is not None
        return ModelConfigResponse(model.config)

    # inference -------------------------------------------------------------------------------------
    def admission(self, name: str, version: str = "") -> Admission:
        """The model and version a request names, resolved once for the whole request (see Admission);
        never raises: an unknown model is the admission's error."""
        try:
            model, entry = self.manager.resolve(name, version)
        except TritonError as error:
            return Admission(None, None, self.is_decoupled(name), error)
        config = model.config  # a resolved model always has one
        return Admission(model, entry, config is not None and config.model_transaction_policy.decoupled)

    def trace_model(self, name: str) -> None:
        """Raise the trace settings API's error when `name` (a model's settings asked) is not ready."""
        if name and not self.model_ready(name).ready:
            raise trace_model_unknown(name)

    def sample_trace(
        self, request: InferenceRequest, traceparent: str, received: tuple[tuple[str, int], ...]
    ) -> Trace | None:
        """The request's trace (set as `request.trace`) when tracing samples it, continuing the W3C
        `traceparent`, stamped with the front end's `received` (activity, ns; 0: now) so far."""
        trace = self.tracer.sample(request.model_name, traceparent)
        if trace is not None:
            for activity, ns in received:
                trace.stamp(activity, ns)
            request.trace = trace
        return trace

    def _admit(
        self, request: InferenceRequest, admission: Admission | None, unary: bool
    ) -> tuple[ServedModel, VersionEntry]:
        """Every inference request's steps before its model runs, unary or streamed: the model resolved
        and still taking requests (a front end's admission as it is, else now), the trace started,
        the request checked. An ensemble goes to its scheduler next, any other model to its runner."""
        self.requests_started += 1
        if admission is None:
            model, entry = self.manager.resolve(request.model_name, request.model_version)
            decoupled = None  # read from the config below, should it matter
        else:
            model, entry = admission.require()
            decoupled = admission.decoupled
        if not self.accepting and entry.ensemble is None and not (entry.runner and entry.runner.closed):
            raise stopping(request)  # else its scheduler answers, as Triton's (a sequence goes on)
        verbose.arrived(request, entry.version)
        rules = model.rules
        trace = request.trace
        if trace is not None:
            trace.started(request.model_name, str(entry.version), request.id, request.inputs)
        if entry.ensemble is not None and rules is not None:
            if unary and entry.ensemble.decoupled_models:
                raise unsupported(
                    f"model '{request.model_name}' is decoupled: its responses can only be streamed "
                    "(gRPC ModelStreamInfer, HTTP generate_stream)"
                )
            rules.check(request)
            if trace is not None:
                trace.stamp(QUEUE_START)
            return model, entry
        config = model.config
        if config is None or rules is None or entry.runner is None:
            raise no_available_versions(request.model_name)
        if unary and (config.model_transaction_policy.decoupled if decoupled is None else decoupled):
            raise unsupported(
                f"model '{request.model_name}' is decoupled: its responses can only be streamed "
                "(gRPC ModelStreamInfer, HTTP generate_stream)"
            )
        rules.check(request)
        return model, entry

    async def infer(self, request: InferenceRequest, admission: Admission | None = None) -> InferenceResponse:
        """The model's one response; `admission` is the front end's, when it took one."""
        model, entry = self._admit(request, admission, True)
        trace = request.trace
        if entry.ensemble is not None:
            response = self._finish(model, request, await self._run_ensemble(model.config, entry, request))
            if trace is not None:
                trace.responded(response.outputs)
                trace.ended()
            return response
        runner = entry.runner
        assert runner is not None  # _admit saw to it
        cache = self.manager.response_cache
        try:
            if cache is not None and _caches(model.config):  # a hit never reaches the runner
                run = partial(self._execute, runner, request)
                result = await cache.serve(request, entry.version, entry, runner.stats, run)
            else:
                result = await self._execute(runner, request)
        except TritonError:
            if trace is not None:
                trace.ended()
            raise
        if trace is None:
            return self._finish(model, request, result)
        response = self._finish(model, request, result)
        trace.responded(response.outputs)
        trace.ended()
        return response

    async def _run_ensemble(
        self, config: ModelConfig | None, entry: VersionEntry, request: InferenceRequest
    ) -> InferenceResponse:
        """An ensemble's top-level response: stored in the response cache when its config asks."""
        assert entry.ensemble is not None
        run = partial(entry.ensemble.infer, request, self.infer, str(entry.version))
        cache = self.manager.response_cache
        if cache is not None and _caches(config):
            return await cache.serve(request, entry.version, entry, entry.ensemble.stats, run)
        return await run()

    async def _execute(self, runner: ModelRunner, request: InferenceRequest) -> InferenceResponse:
        """The model's one response to a checked request, from its runner."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferenceResponse | TritonError] = loop.create_future()
        loop_thread = threading.get_ident()

        def complete(result: InferenceResponse | TritonError) -> None:
            if threading.get_ident() == loop_thread:  # ran inline: no wake-up needed
                _deliver(future, result)
            else:
                loop.call_soon_threadsafe(_deliver, future, result)

        if not runner.run_inline(request, complete):
            runner.submit(request, complete)
        try:
            result = await future
        except asyncio.CancelledError:  # the client went away: a request still queued is dropped
            request.cancel()
            raise
        if isinstance(result, TritonError):
            raise result
        return result

    async def infer_stream(
        self, request: InferenceRequest, admission: Admission | None = None
    ) -> AsyncGenerator[StreamResponse, None]:
        """The responses to `request` as the model sends them, the last one marked final. Raises
        TritonError (before yielding anything) when the request does not reach the model. Closing the
        iterator before the final item cancels the request: the model's response sender reports
        is_cancelled() from then on. `admission` is the front end's, when it took one."""
        model, entry = self._admit(request, admission, False)
        trace = request.trace
        if entry.ensemble is not None and entry.ensemble.decoupled_models:
            responses = entry.ensemble.stream(request, self.infer, self.infer_stream, str(entry.version))
            try:
                async for response in responses:
                    response = self._finish(model, request, response)
                    if trace is not None:
                        trace.responded(response.outputs)
                    yield StreamResponse(response, None, False)
            except TritonError as error:
                yield StreamResponse(None, error, True)
                return
            finally:
                await responses.aclose()
                if trace is not None:
                    trace.ended()
            yield StreamResponse(None, None, True)  # the flags-only end, as a decoupled model's
            return
        if entry.ensemble is not None:
            try:
                response = await self._run_ensemble(model.config, entry, request)
            except TritonError as error:
                yield StreamResponse(None, error, True)
                return
            response = self._finish(model, request, response)
            if trace is not None:
                trace.responded(response.outputs)
                trace.ended()
            yield StreamResponse(response, None, True)
            return
        runner = entry.runner
        assert runner is not None  # _admit saw to it
        cache = self.manager.response_cache
        if cache is not None and _caches(model.config):  # never decoupled: its one response, maybe stored
            try:
                run = partial(self._execute, runner, request)
                response = await cache.serve(request, entry.version, entry, runner.stats, run)
            except TritonError as error:
                yield StreamResponse(None, error, True)
                return
            yield StreamResponse(self._finish(model, request, response), None, True)
            return
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[tuple[InferenceResponse | TritonError | None, bool]] = asyncio.Queue()

        def sink(result: InferenceResponse | TritonError | None, final: bool) -> None:
            # a closed event loop (the server stopped) has nobody listening any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(answers.put_nowait, (result, final))

        stream = ResponseStream(sink)

        def finish(result: InferenceResponse | TritonError) -> None:
            # after the final response this is a no-op; before it, an error (a queue timeout, a failed
            # execution) ends the request
            stream.deliver(result, True)

        runner.submit(request, finish, stream)
        try:
            while True:
                answer, final = await answers.get()
                if answer is None:
                    yield StreamResponse(None, None, final)
                elif isinstance(answer, TritonError):
                    yield StreamResponse(None, answer, final)
                else:
                    response = self._finish(model, request, answer)
                    if trace is not None:
                        trace.responded(response.outputs)
                    yield StreamResponse(response, None, final)
                if final:
                    if trace is not None:
                        trace.ended()
                    return
        finally:
            if not stream.finished:
                stream.cancelled = True
                request.cancel()

    def _finish(
        self, model: ServedModel, request: InferenceRequest, response: InferenceResponse
    ) -> InferenceResponse:
        response.id = request.id
        if request.outputs:
            wanted = {o.name: o for o in request.outputs}
            outputs = []
            for tensor in response.outputs:
                asked = wanted.get(tensor.name)
                if asked is None:
                    continue
                if asked.class_count > 0:
                    batched = model.config is not None and model.config.max_batch_size > 0
                    tensor = classify(tensor, asked.class_count, model.labels.get(tensor.name), batched)
                outputs.append(tensor)
            response.outputs = outputs
        return response

    # repository ------------------------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> RepositoryIndexResponse:
        return RepositoryIndexResponse([ModelIndex(**row) for row in self.manager.index(ready_only)])

    def _require_explicit(self) -> None:
        if self.manager.mode != ControlMode.EXPLICIT:
            # Triton's text, which clients may look for, then what it leaves out: this server's mode
            # (often none, not poll) and the fix
            raise unavailable(
                "explicit model load / unload is not allowed if polling is enabled (this server runs "
                f"with --model-control-mode {self.manager.mode.value}; start it with "
                "--model-control-mode explicit to load and unload models)"
            )

    async def load(
        self, name: str, config_json: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load (or reload) a model, with a JSON config override and the `file:<path>` files of a load
        request when it carries them."""
        self._require_explicit()
        override = None
        if config_json:
            from google.protobuf import json_format

            from server.protocol.config_json import parse_override

            try:
                override = parse_override(config_json)
            except json_format.ParseError as exc:
                # Triton's words for a config it cannot read (a failed repository poll); its 500 is a
                # 400 here, the request being at fault. The parser's message goes to the log.
                log.error("failed to parse the model config override for '%s': %s", name, exc)
                raise invalid_arg(f"failed to load '{name}', failed to poll from model repository") from None
        await asyncio.to_thread(self.manager.load, name, override, files)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model; a name that is not loaded (or not in the repository) is not an error."""
        self._require_explicit()
        await asyncio.to_thread(self.manager.unload, name)
        if unload_dependents:
            for other, model in list(self.manager.models().items()):
                config = model.config
                if (
                    config is not None
                    and config.platform == backends.ENSEMBLE
                    and any(step.model_name == name for step in config.ensemble_scheduling.step)
                ):
                    await asyncio.to_thread(self.manager.unload, other)

    # statistics ------------------------------------------------------------------------------------
    def statistics(self, name: str = "", version: str = "") -> ModelStatisticsResponse:
        stats = []
        if name:
            model = self.manager.models().get(name)
            ready = model.ready_versions() if model is not None else []
            if not ready:
                raise invalid_arg(f"requested model '{name}' is not available")
            if version not in ("", "-1"):
                number = int(version) if version.isdigit() else None
                if number not in ready:
                    raise invalid_arg(f"requested model version is not available for model '{name}'")
                ready = [number]
            stats = [self.manager.stats.get(name, v).statistics() for v in ready]
        else:
            for model_name, model in sorted(self.manager.models().items()):
                for v in model.ready_versions():
                    stats.append(self.manager.stats.get(model_name, v).statistics())
        return ModelStatisticsResponse(stats)

    def metrics(self) -> MetricsSnapshot:
        """What /metrics reads of the models right now (server/frontends/metrics.py writes it)."""
        return metrics_snapshot(self.manager)

    # logging and trace -----------------------------------------------------------------------------
    def update_log_settings(self, changes: dict[str, Any]) -> LogSettingsResponse:
        """Apply logging changes one by one in Triton's order (log_file, log_info, log_warning,
        log_error, log_verbose_level, log_format); the first bad value stops there, and what came
        before it stays applied, as in Triton. Values arrive as the JSON carried them, so a wrong
        type gets Triton's JSON access message (Triton answers it with a 500, tcli with a 400: the
        request is at fault)."""
        settings = self.log_settings
        for key in changes:
            if key not in settings.__dict__:
                raise invalid_arg(f"Logging setting '{key}' is not supported")
        for key in settings.__dict__:
            if key not in changes or changes[key] is None:
                continue
            value = changes[key]
            if key == "log_file":
                raise unsupported("log file location can not be updated through network protocol")
            if key == "log_verbose_level":
                if type(value) is not int or not 0 <= value < 2**64:
                    raise invalid_arg("attempt to access JSON non-unsigned-integer as unsigned-integer")
                value %= _UINT32  # Triton keeps it as a 32-bit int: larger values wrap, negatives read 0
                value = 0 if value > _INT32_MAX else value
            elif key == "log_format":
                if type(value) is not str:
                    raise invalid_arg("attempt to access JSON non-string as string")
                if value not in ("default", "ISO8601"):
                    raise unavailable(f"invalid argument for --log_format, got: {value}")
            elif type(value) is not bool:
                raise invalid_arg("attempt to access JSON non-boolean as boolean")
            setattr(settings, key, value)
        apply_verbosity(settings)
        return LogSettingsResponse(**settings.as_dict())

    def trace_settings(self, model: str = "") -> TraceSettingResponse:
        values = self._trace_values(model)
        values["trace_count"] = str(self.tracer.count_left(model))  # as Triton: what is left of it
        return TraceSettingResponse(**values)

    def _trace_values(self, model: str) -> dict[str, Any]:
        if model:
            self.manager.get(model)
            overrides = self.model_trace.get(model, {})
            return {key: overrides.get(key, value) for key, value in self.trace.values.items()}
        return dict(self.trace.values)

    def update_trace_settings(self, changes: dict[str, Any], model: str = "") -> TraceSettingResponse:
        """Apply the changes together, once every one is read (`parse_changes`: Triton changes nothing
        when one is bad). None resets a setting: a model's to the global value, a global one to its
        default."""
        parsed = parse_changes(changes)
        if model:
            self.manager.get(model)
        merged = self._trace_values(model)
        for key, value in parsed.items():
            merged[key] = (
                (self.trace.values if model else self.trace_startup)[key] if value is None else value
            )
        if merged["trace_level"] != ["OFF"] and not merged["trace_file"] and merged["trace_mode"] == "triton":
            raise invalid_arg("Attempting to set invalid trace setting :trace file name is not given")
        if model:
            overrides = self.model_trace.setdefault(model, {})
            for key, value in parsed.items():
                if value is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = value
        else:
            for key, value in parsed.items():
                self.trace.values[key] = self.trace_startup[key] if value is None else value
        models = {
            m: {k: o.get(k, v) for k, v in self.trace.values.items()}
            for m, o in self.model_trace.items()
            if o
        }
        self.tracer.apply(self.trace.values, models)
        return self.trace_settings(model)


def _caches(config: ModelConfig | None) -> bool:
    """Whether the model's config asks for the response cache (`response_cache { enable: true }`)."""
    return config is not None and config.response_cache.enable
