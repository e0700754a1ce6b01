"""The in-process server's options: every field of `tritonserver.Options`, with its name, type and
default, turned into the `ServerSettings` that `tcli serve` builds from its flags (server/app.py), so
an embedded server is configured as a served one.

As in `tritonserver`, the options are checked when the server starts: a value of the wrong type is a
TypeError (`_option_checks.py`), a model repository that does not exist an InternalError. Fields for
what tcli does not have (GPUs and their memory, pinned memory, host policies, the buffer manager) are
taken and have no effect: tcli serves from host memory on the CPU.

tcli's own fields, after Triton's:
- front ends: none by default (no socket is opened); `http_port`, `grpc_port`, `metrics_port` start
  the same front ends `tcli serve` runs (0: any free port), on `host`. `tcli.frontend` starts them
  as Triton's `tritonfrontend` does.
- `repository_poll_secs`: POLL mode polls the repositories this
  often, as `tcli serve` does, besides `Server.poll_model_repository()`.
- `server_settings`: any other field of `ServerSettings` by name (a `tcli serve` flag), e.g.
  `{"grpc_implementation": "grpcio"}`.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from server.app import ServerSettings
from server.backends.base import DEFAULT_BACKEND_DIRECTORY
from server.logs import LogSettings
from server.protocol.errors import TritonError as ServerError
from server.repository.manager import ControlMode
from server.repository.storage.location import parse_location
from server.scheduling.cache_config import CacheConfigError, parse_cache_flags
from server.scheduling.latency_summary import parse_metrics_config
from server.scheduling.rate_limiter import ResourceLimit
from tcli.inprocess._errors import InternalError, InvalidArgumentError
from tcli.inprocess._option_checks import check_types
from tcli.inprocess._types import InstanceGroupKind, LogFormat, ModelControlMode, RateLimitMode

uint = Annotated[int, ctypes.c_uint]

_MODES = {
    ModelControlMode.NONE: ControlMode.NONE,
    ModelControlMode.POLL: ControlMode.POLL,
    ModelControlMode.EXPLICIT: ControlMode.EXPLICIT,
}
TRITON_REPO_AGENT_DIRECTORY = "/opt/tritonserver/repoagents"  # tritonserver's default: none of tcli's


@dataclass(slots=True)
class RateLimiterResource:
    """A resource the rate limiter hands out (`tcli serve --rate-limit-resource=name:count:device`)."""

    name: str
    count: uint
    device: uint


@dataclass(slots=True)
class ModelLoadDeviceLimit:
    """A GPU memory limit for loading models; taken, no effect (tcli loads no model on a GPU)."""

    kind: InstanceGroupKind
    device: uint
    fraction: float


@dataclass(slots=True)
class Options:
    """Server options, named, typed and defaulted as `tritonserver.Options`."""

    model_repository: str | Path | list[str | Path] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)  # EXPLICIT mode: loaded at start ("*": all)
    strict_model_config: bool = False  # True: no auto-completed configs
    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list[RateLimiterResource] = field(default_factory=list)
    pinned_memory_pool_size: uint = 1 << 28  # no effect
    cuda_memory_pool_sizes: dict[int, uint] = field(default_factory=dict)  # no effect
    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # {"local": {"size": bytes}}
    cache_directory: str = "/opt/tritonserver/caches"  # no effect: the local cache is built in
    min_supported_compute_capability: float = 6.0  # no effect
    exit_on_error: bool = True  # start() fails when a model fails to load
    strict_readiness: bool = True
    exit_timeout: uint = 30  # seconds stop() waits for requests in flight
    buffer_manager_thread_count: uint = 0  # no effect
    model_load_thread_count: uint = 4
    model_load_retry_count: uint = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True  # no effect
    log_file: str | None = None  # None: the console (standard error)
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: uint = 0
    metrics: bool = True
    gpu_metrics: bool = True  # no effect
    cpu_metrics: bool = True
    metrics_interval: uint = 2000  # ms
    backend_directory: str = str(DEFAULT_BACKEND_DIRECTORY)  # Python-based backends
    repo_agent_directory: str = TRITON_REPO_AGENT_DIRECTORY  # user repository agents
    model_load_device_limits: list[ModelLoadDeviceLimit] = field(default_factory=list)  # no effect
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)  # no effect
    metrics_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    # tcli's own (module docstring)
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    host: str = "127.0.0.1"
    repository_poll_secs: float = 15.0
    server_settings: dict[str, Any] = field(default_factory=dict)

    def to_settings(self) -> ServerSettings:
        """The `tcli serve` settings these options stand for; raises as `tritonserver` does on start."""
        check_types(self)
        known = {f.name for f in dataclasses.fields(ServerSettings)}
        for key in self.server_settings:
            if key not in known:
                raise InvalidArgumentError(
                    f"server_settings: '{key}' is not a setting of tcli serve; see ServerSettings in "
                    "server/app.py for the names"
                )
        repositories = self._repositories()
        if self.model_namespacing:
            raise InvalidArgumentError(
                "model_namespacing: tcli serves one model per name across repositories; leave it False"
            )
        self._cascade_log_levels()
        settings = ServerSettings(
            repositories,
            _MODES[self.model_control_mode],
            repository_poll_secs=self.repository_poll_secs,
            load_models=list(self.startup_models),
            strict_readiness=bool(self.strict_readiness),
            exit_timeout_secs=float(self.exit_timeout),
            host=self.host,
            http_port=self.http_port or 0,
            grpc_port=self.grpc_port or 0,
            metrics_port=self.metrics_port or 0,
            allow_http=self.http_port is not None,
            allow_grpc=self.grpc_port is not None,
            allow_metrics=self.metrics_port is not None,
            repoagent_directories=self._repo_agent_directories(),
            backend_directory=Path(self.backend_directory),
            server_id=self.server_id,
            exit_on_error=bool(self.exit_on_error),
            auto_complete_config=not self.strict_model_config,
            model_load_thread_count=max(1, self.model_load_thread_count),
            model_load_retry_count=self.model_load_retry_count,
            metrics_interval_ms=float(self.metrics_interval),
            allow_cpu_metrics=bool(self.metrics and self.cpu_metrics),
            metrics_config=self._metrics_config(),
            log_verbose=self.log_verbose,
            log_settings=LogSettings(
                log_file=self.log_file or "",
                log_info=bool(self.log_info),
                log_warning=bool(self.log_warn),
                log_error=bool(self.log_error),
                log_verbose_level=int(self.log_verbose),
                log_format="ISO8601" if self.log_format == LogFormat.ISO8601 else "default",
            ),
            backend_config={k: dict(v) for k, v in self.backend_configuration.items()},
            rate_limit=self.rate_limiter_mode == RateLimitMode.EXEC_COUNT,
            rate_limit_resources=[
                ResourceLimit(r.name, r.count, r.device) for r in self.rate_limiter_resources
            ],
            response_cache_byte_size=self._cache_size(),
        )
        for key, value in self.server_settings.items():
            setattr(settings, key, value)
        return settings

    def _cascade_log_levels(self) -> None:
        """Verbose logging implies info, info warnings, warnings errors, as `tritonserver` sets them."""
        if self.log_verbose > 0:
            self.log_info = True
        if self.log_info:
            self.log_warn = True
        if self.log_warn:
            self.log_error = True

    def _repositories(self) -> list[Path | str]:
        given = self.model_repository
        repositories = [given] if isinstance(given, (str, Path)) else list(given or [])
        if not repositories:
            raise InvalidArgumentError("Model repository must be specified: Server(model_repository=PATH)")
        for repository in repositories:
            try:
                location = parse_location(repository)
            except ServerError as error:
                raise InvalidArgumentError(error.message) from None
            if isinstance(location, Path) and not location.is_dir():
                # tritonserver's words, then what to do
                raise InternalError(
                    f"failed to stat file {repository}: pass the folder that holds the model folders, or "
                    "an s3://, gs:// or as:// path"
                )
        return repositories

    def _repo_agent_directories(self) -> list[Path]:
        if self.repo_agent_directory in ("", TRITON_REPO_AGENT_DIRECTORY):
            return []
        return [Path(self.repo_agent_directory)]

    def _metrics_config(self) -> Any:
        """`{"": {"summary_latencies": "true"}}`: the settings of `tcli serve --metrics-config`, whatever
        group they are given under (tritonserver's settings have none)."""
        values = [f"{k}={v}" for group in self.metrics_configuration.values() for k, v in group.items()]
        try:
            return parse_metrics_config(values)
        except ServerError as error:
            raise InvalidArgumentError("metrics_configuration: " + error.message) from None

    def _cache_size(self) -> int:
        """`{"local": {"size": bytes}}`: the response cache of `tcli serve --cache-config local,size=`."""
        flags = [f"{name},{k}={v}" for name, group in self.cache_config.items() for k, v in group.items()]
        try:
            cache = parse_cache_flags(flags, None)
        except CacheConfigError as error:
            raise InvalidArgumentError(f"cache_config: {error}") from None
        return 0 if cache is None else cache.size
