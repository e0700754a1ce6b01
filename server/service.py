"""The one core facade both front ends call: health, metadata, config, infer, repository, statistics,
logging and trace settings. Nothing here knows HTTP or gRPC."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.classification import classify
from server.config import backends
from server.config.validate import enum_name
from server.protocol import datatypes
from server.protocol.errors import ErrorCode, TritonError, invalid_arg, unavailable, unsupported
from server.protocol.types import InferenceRequest, InferenceResponse
from server.repository.manager import ControlMode, ModelManager

if TYPE_CHECKING:
    from server.repository.models import ServedModel

SERVER_NAME = "triton"  # what Triton clients expect to find; tcli's own version is in `tcli --version`
SERVER_VERSION = "2.51.0"  # the Triton release whose protocol tcli follows
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)

log = logging.getLogger("tcli.server")


@dataclass
class LogSettings:
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TraceSettings:
    values: dict[str, Any] = field(
        default_factory=lambda: {
            "trace_file": "",
            "trace_level": ["OFF"],
            "trace_rate": "1000",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_mode": "triton",
        }
    )


def _deliver(future: asyncio.Future[Any], result: object) -> None:
    if not future.done():
        future.set_result(result)


class InferenceService:
    def __init__(self, manager: ModelManager, *, strict_readiness: bool = True) -> None:
        self.manager = manager
        self.strict_readiness = strict_readiness
        self.live_flag = True
        self.accepting = True  # False once shutdown starts: readiness drops, new requests get 503
        self.log_settings = LogSettings()
        self.trace = TraceSettings()
        self.model_trace: dict[str, dict[str, Any]] = {}

    # health ----------------------------------------------------------------------------------------
    def live(self) -> bool:
        return self.live_flag

    def ready(self) -> bool:
        if not self.accepting:
            return False
        return self.manager.all_ready() if self.strict_readiness else True

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": list(EXTENSIONS)}

    # models ----------------------------------------------------------------------------------------
    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self.manager.resolve(name, version)
        except TritonError:
            return False
        return True

    def _ready_model(self, name: str, version: str) -> ServedModel:
        model, _ = self.manager.resolve(name, version)
        if model.config is None:
            raise unavailable(f"Request for unknown model: '{name}' has no available versions")
        return model

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self._ready_model(name, version)
        config = model.config
        assert config is not None
        batch = [-1] if config.max_batch_size > 0 else []
        versions = [version] if version not in ("", "-1") else [str(v) for v in model.ready_versions()]

        def describe(tensor: Any) -> dict[str, Any]:
            wire = datatypes.config_to_wire(enum_name(tensor, "data_type"))
            return {"name": tensor.name, "datatype": wire, "shape": batch + list(tensor.dims)}

        return {
            "name": name,
            "versions": versions,
            "platform": config.platform or config.backend,
            "inputs": [describe(t) for t in config.input],
            "outputs": [describe(t) for t in config.output],
        }

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        from server.config.write import to_json_dict

        model = self._ready_model(name, version)
        assert model.config is not None
        return to_json_dict(model.config)

    # inference -------------------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if not self.accepting:
            raise unavailable("Server is shutting down: not accepting new inference requests")
        model, entry = self.manager.resolve(request.model_name, request.model_version)
        config, rules, runner = model.config, model.rules, entry.runner
        if entry.ensemble is not None and rules is not None:
            rules.check(request)
            response = await entry.ensemble.infer(request, self.infer, str(entry.version))
            return self._finish(model, request, response)
        if config is None or rules is None or runner is None:
            raise unavailable(f"Request for unknown model: '{request.model_name}' has no available versions")
        rules.check(request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferenceResponse | TritonError] = loop.create_future()

        def complete(result: InferenceResponse | TritonError) -> None:
            loop.call_soon_threadsafe(_deliver, future, result)

        runner.submit(request, complete)
        result = await future
        if isinstance(result, TritonError):
            raise result
        return self._finish(model, request, result)

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
    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.manager.index(ready_only)

    def _require_explicit(self) -> None:
        if self.manager.mode != ControlMode.EXPLICIT:
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load(self, name: str, config_json: str | None = None) -> None:
        self._require_explicit()
        override = None
        if config_json:
            from google.protobuf import json_format

            from server.config.parse import new_config

            try:
                override = json_format.Parse(config_json, new_config())
            except json_format.ParseError as exc:
                raise invalid_arg(f"failed to parse the model config override for '{name}': {exc}") from None
        await asyncio.to_thread(self.manager.load, name, override)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self._require_explicit()
        if name not in self.manager.models() and name not in self.manager.folders():
            raise TritonError(ErrorCode.INVALID_ARG, f"failed to unload '{name}', no model with that name")
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
    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        stats = []
        if name:
            model = self.manager.get(name)
            if version not in ("", "-1"):
                self.manager.resolve(name, version)
                versions = [int(version)]
            else:
                versions = model.ready_versions()
                if not versions:
                    raise unavailable(f"Request for unknown model: '{name}' has no available versions")
            stats = [self.manager.stats.get(name, v).as_dict() for v in versions]
        else:
            for model_name, model in sorted(self.manager.models().items()):
                for v in model.ready_versions():
                    stats.append(self.manager.stats.get(model_name, v).as_dict())
        return {"model_stats": stats}

    # logging and trace -----------------------------------------------------------------------------
    def update_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        settings = self.log_settings
        for key, value in changes.items():
            if key not in settings.__dict__:
                raise invalid_arg(f"Logging setting '{key}' is not supported")
            expected = type(getattr(settings, key))
            if expected is bool and not isinstance(value, bool):
                raise invalid_arg(f"invalid value for '{key}': expected a boolean")
            if expected is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise invalid_arg(f"invalid value for '{key}': expected a non-negative integer")
            if key == "log_format" and value not in ("default", "ISO8601"):
                raise invalid_arg(
                    f"invalid value for 'log_format': expected default or ISO8601, got {value!r}"
                )
            if key == "log_file" and value:
                raise unsupported("changing the log file is not supported: redirect the server's stderr")
            setattr(settings, key, value)
        logging.getLogger("tcli").setLevel(logging.DEBUG if settings.log_verbose_level > 0 else logging.INFO)
        return settings.as_dict()

    def trace_settings(self, model: str = "") -> dict[str, Any]:
        if model:
            self.manager.get(model)
            return {**self.trace.values, **self.model_trace.get(model, {})}
        return dict(self.trace.values)

    def update_trace_settings(self, changes: dict[str, Any], model: str = "") -> dict[str, Any]:
        known = set(self.trace.values)
        for key in changes:
            if key not in known:
                raise invalid_arg(f"trace setting '{key}' is not supported")
        if model:
            self.manager.get(model)
            overrides = self.model_trace.setdefault(model, {})
            for key, value in changes.items():
                if value is None:
                    overrides.pop(key, None)
                else:
                    overrides[key] = value
            return self.trace_settings(model)
        for key, value in changes.items():
            if value is not None:
                self.trace.values[key] = value
        return self.trace_settings()
