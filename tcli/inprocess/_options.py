"""The in-process server's options: `tritonserver.Options`' names for what tcli does, turned into the
`ServerSettings` that `tcli serve` builds from its flags (server/app.py), so an embedded server is
configured as a served one.

Three differences, all tcli's own fields:
- front ends: none by default (no socket is opened); `http_port`, `grpc_port`, `metrics_port` start
  the same front ends `tcli serve` runs (0: any free port), on `host`.
- POLL mode polls the repositories every `repository_poll_secs`, as `tcli serve` does, besides
  `Server.poll_model_repository()`.
- `server_settings`: any other field of `ServerSettings` by name (a `tcli serve` flag), e.g.
  `{"grpc_implementation": "grpcio"}`.
Triton's options for GPUs, pinned memory, caches and the rate limiter have no counterpart in tcli and
are not accepted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.app import ServerSettings
from server.repository.manager import ControlMode
from tcli.inprocess._errors import InvalidArgumentError
from tcli.inprocess._types import ModelControlMode

_MODES = {
    ModelControlMode.NONE: ControlMode.NONE,
    ModelControlMode.POLL: ControlMode.POLL,
    ModelControlMode.EXPLICIT: ControlMode.EXPLICIT,
}


@dataclass
class Options:
    """Server options, named as `tritonserver.Options` names them."""

    model_repository: str | Path | list[str | Path] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)  # EXPLICIT mode: loaded at start ("*": all)
    strict_model_config: bool = False  # True: no auto-completed configs
    exit_on_error: bool = True  # start() fails when a model fails to load
    strict_readiness: bool = True
    exit_timeout: int = 30  # seconds stop() waits for requests in flight
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    repo_agent_directory: str = ""  # user repository agents (--repoagent-directory)
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_metrics: bool = True
    metrics_interval: int = 2000  # ms
    # tcli's own (module docstring)
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    host: str = "127.0.0.1"
    repository_poll_secs: float = 15.0
    server_settings: dict[str, Any] = field(default_factory=dict)

    def to_settings(self) -> ServerSettings:
        """The `tcli serve` settings these options stand for."""
        repositories = self.model_repository
        if isinstance(repositories, (str, Path)):
            repositories = [repositories]
        if not repositories:
            raise InvalidArgumentError("Model repository must be specified: Server(model_repository=PATH)")
        try:
            mode = _MODES[ModelControlMode(self.model_control_mode)]
        except ValueError:
            raise InvalidArgumentError(
                f"model_control_mode {self.model_control_mode!r} is not one of NONE, POLL, EXPLICIT"
            ) from None
        settings = ServerSettings(
            [str(path) for path in repositories],
            mode,
            repository_poll_secs=self.repository_poll_secs,
            load_models=list(self.startup_models),
            strict_readiness=self.strict_readiness,
            exit_timeout_secs=float(self.exit_timeout),
            host=self.host,
            http_port=self.http_port or 0,
            grpc_port=self.grpc_port or 0,
            metrics_port=self.metrics_port or 0,
            allow_http=self.http_port is not None,
            allow_grpc=self.grpc_port is not None,
            allow_metrics=self.metrics_port is not None,
            repoagent_directories=[Path(self.repo_agent_directory)] if self.repo_agent_directory else [],
            server_id=self.server_id,
            exit_on_error=self.exit_on_error,
            auto_complete_config=not self.strict_model_config,
            model_load_thread_count=self.model_load_thread_count,
            model_load_retry_count=self.model_load_retry_count,
            metrics_interval_ms=float(self.metrics_interval),
            allow_cpu_metrics=self.cpu_metrics,
            backend_config={k: dict(v) for k, v in self.backend_configuration.items()},
        )
        known = {f.name for f in dataclasses.fields(ServerSettings)}
        for key, value in self.server_settings.items():
            if key not in known:
                raise InvalidArgumentError(
                    f"server_settings: '{key}' is not a setting of tcli serve; see ServerSettings in "
                    "server/app.py for the names"
                )
            setattr(settings, key, value)
        return settings
