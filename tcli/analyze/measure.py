"""Where candidates are measured, and how: a target loads a candidate's config as a variant of the
model through model control (no restart), then perf's profiler sweeps concurrency over it.

- InProcessTarget (the default): tcli's server inside this process (tcli.inprocess, EXPLICIT model
  control) and the in-process load generator (load.py): no socket, no process restart.
- RemoteTarget (`-u URL`): a running server in EXPLICIT mode, loaded through its repository API, and
  perf's load generator processes over HTTP or gRPC. The model's own config is loaded back at the end.

Both measure with `tcli perf`'s windows and stability rule and its input options. An in-process
target also serves the model over HTTP on request (`served_profiler`): tcli's HTTP front end, the one
`tcli serve` runs, on 127.0.0.1 and a free port, with perf's load generator process sending to it, so
that the best configs are checked as they will be served (verify.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tcli.analyze.results import Constraints, Level
from tcli.analyze.sweep import Lead, sweep
from tcli.errors import CliError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from tcli.perf.profiler import Profiler, Settings


@dataclass
class InputOptions:
    """`tcli perf`'s input options."""

    shapes: list[str] = field(default_factory=list)
    input_data: str = "random"
    string_length: int = 128
    string_data: str | None = None
    composing: bool = False  # a composing model: --shape options naming other models' inputs are dropped

    @property
    def generated(self) -> str:
        """The data a composing model gets: its inputs are not the top model's, so a JSON file
        written for those gives way to random data."""
        return self.input_data if self.input_data in ("random", "zero") else "random"

    def for_composing(self) -> InputOptions:
        return InputOptions(self.shapes, self.generated, self.string_length, self.string_data, composing=True)


@dataclass
class MeasureOptions:
    measurement_ms: int = 200
    stability: float = 0.10
    max_trials: int = 4  # a level not stable in 4 windows of a busy machine seldom is in 6
    max_concurrency: int = 64
    min_requests: int = 50  # a window holds at least this many requests at the first level

    def settings(self) -> Settings:
        from tcli.perf.profiler import Settings

        return Settings(
            mode="concurrency",
            measurement_ms=self.measurement_ms,
            stability=self.stability,
            max_trials=self.max_trials,
            async_mode=False,
        )

    def concurrencies(self) -> list[int]:
        """1, 2, 4, ... up to --max-concurrency (itself included)."""
        values, value = [], 1
        while value < self.max_concurrency:
            values.append(value)
            value *= 2
        return [*values, self.max_concurrency]

    def signature(self) -> dict[str, Any]:
        return {
            "measurement_ms": self.measurement_ms,
            "stability": self.stability,
            "max_trials": self.max_trials,
            "max_concurrency": self.max_concurrency,
            "min_requests": self.min_requests,
        }


def backend_of(config: ModelConfig) -> str:
    """The backend a completed config names (platforms mapped as Triton maps them)."""
    from server.backends import table

    if config.backend:
        return config.backend
    served = table.serving(config.platform)
    return served[0].name if served is not None else config.platform


def config_json(config: ModelConfig) -> str:
    from server.protocol.config_json import to_json_dict

    return json.dumps(to_json_dict(config))


def config_from_json(data: dict[str, Any]) -> ModelConfig:
    from server.protocol.config_json import from_json_dict

    return from_json_dict(data)


class Target:
    """A server the candidates are loaded into and measured on."""

    name: str  # the model
    where: str  # for the checkpoint: "in-process" or the URL
    # whether its figures leave the front end out: the best configs are then checked over HTTP
    in_process: bool = False

    def completed_config(self) -> ModelConfig:
        """The model's config as the server completed it (the model's own, before any candidate)."""
        raise NotImplementedError

    def check(self) -> None:
        """Refuse a model tcli analyze cannot measure (sequence, decoupled)."""
        raise NotImplementedError

    def load(self, config: ModelConfig) -> None:
        raise NotImplementedError

    def profiler(self, settings: Settings) -> Profiler:
        raise NotImplementedError

    def served_profiler(self, settings: Settings) -> Profiler:
        """A profiler that measures the loaded config through the HTTP front end (in-process only)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _model_info(name: str, metadata: dict[str, Any], config: dict[str, Any]) -> Any:
    from tcli.perf.model import model_info

    return model_info(name, "", metadata, config)


def _streams(info: Any, inputs: InputOptions) -> list[list[Any]]:
    from tcli.perf.data import from_json_file, synthetic
    from tcli.perf.model import resolve_shapes

    user_data = inputs.input_data not in ("random", "zero")
    shapes = inputs.shapes
    if inputs.composing:
        names = {spec.name for spec in info.inputs}
        shapes = [text for text in shapes if text.rpartition(":")[0] in names]
    resolved = resolve_shapes(info, shapes, allow_variable=user_data)
    if user_data:
        path = Path(inputs.input_data)
        if path.is_dir():
            raise CliError(
                f"--input-data '{inputs.input_data}' is a directory: give random, zero or a JSON file"
            )
        return from_json_file(path, info, resolved)
    return synthetic(info, resolved, inputs.input_data, inputs.string_length, inputs.string_data)


def _http_profiler(
    name: str, info: Any, protocol: str, url: str, inputs: InputOptions, settings: Settings
) -> Profiler:
    """perf's profiler over its load generator processes, sending to the server at `url`."""
    from tcli.perf.prepare import build_spec
    from tcli.perf.profiler import Profiler

    spec = build_spec(
        info,
        protocol,
        url,
        1,
        inputs.shapes,
        inputs.input_data,
        inputs.string_length,
        inputs.string_data,
        [],
        False,
        None,
        20.0,
        1,
        0,
        4,
    )
    settings.processes = 1
    return Profiler(spec, settings, None, (name, ""), {})


def _refused(name: str, info: Any) -> None:
    if info.sequence:
        raise CliError(
            f"model '{name}' uses the sequence batcher: tcli analyze measures stateless models "
            "(measure it with tcli perf)"
        )
    if info.decoupled:
        raise CliError(
            f"model '{name}' is decoupled (several responses per request): tcli analyze measures one "
            "response per request"
        )


def start_inprocess(repository: Path) -> Any:
    """tcli's server in this process, in EXPLICIT mode (candidates are loaded one at a time)."""
    import tcli.inprocess as tritonserver

    server = tritonserver.Server(
        model_repository=str(repository),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        exit_on_error=False,
        exit_timeout=5,
    )
    try:
        server.start()
    except tritonserver.TritonError as exc:
        raise CliError(f"cannot start the in-process server on {repository}: {exc}") from None
    return server


class InProcessTarget(Target):
    in_process = True

    def __init__(self, server: Any, repository: Path, name: str, inputs: InputOptions) -> None:
        import tcli.inprocess as tritonserver

        self.name = name
        self.where = "in-process"
        self.server = server
        self.inputs = inputs
        self.requests: list[dict[str, Any]] | None = None
        self.http: Any = None  # tcli.frontend.KServeHttp, started by the first served_profiler()
        try:
            server.load(name)
        except tritonserver.TritonError as exc:
            raise CliError(f"model '{name}' failed to load from {repository}: {exc}") from None
        self.model = server.model(name)
        config = self.model.config()
        self._completed = config_from_json(config)
        self.info = _model_info(name, self.model.metadata(), config)

    def check(self) -> None:
        _refused(self.name, self.info)

    def completed_config(self) -> ModelConfig:
        return self._completed

    def load(self, config: ModelConfig) -> None:
        self.server.load(self.name, {"config": config_json(config)})

    def profiler(self, settings: Settings) -> Profiler:
        from tcli.analyze.load import InProcessProfiler, step_inputs

        if self.requests is None:
            batched = self.info.max_batch_size > 0
            self.requests = [
                step_inputs(step, batched) for stream in _streams(self.info, self.inputs) for step in stream
            ]
        return InProcessProfiler(self.model, self.requests, settings)

    def served_profiler(self, settings: Settings) -> Profiler:
        from tcli.frontend import KServeHttp

        if self.http is None:  # the front end `tcli serve` runs, on this server, local only
            http = KServeHttp(self.server, KServeHttp.Options(address="127.0.0.1", port=0))
            http.start()
            self.http = http
        return _http_profiler(
            self.name, self.info, "http", f"127.0.0.1:{self.http.port}", self.inputs, settings
        )

    def close(self) -> None:
        if self.http is not None:  # the server itself is the caller's
            self.http.stop()
            self.http = None


class RemoteTarget(Target):
    def __init__(self, url: str, protocol: str, name: str, inputs: InputOptions) -> None:
        from tcli.client import connect
        from tcli.client.types import ClientError

        self.name = name
        self.where = url
        self.url = url
        self.protocol = protocol
        self.inputs = inputs
        self.loaded_variant = False
        try:
            self.client = connect(url, protocol, timeout=120.0)
            metadata = self.client.model_metadata(name, "")
            config = self.client.model_config(name, "")
        except ClientError as exc:
            raise CliError(f"-u {url}: model '{name}': {exc.message}") from None
        self._completed = config_from_json(config)
        self._served = config  # what the server served before: put back at the end
        self.info = _model_info(name, metadata, config)

    def check(self) -> None:
        _refused(self.name, self.info)

    def completed_config(self) -> ModelConfig:
        return self._completed

    def load(self, config: ModelConfig) -> None:
        from tcli.client.types import ClientError

        try:
            self.client.load_model(self.name, config_json(config))
        except ClientError as exc:
            if not self.loaded_variant and "explicit" in exc.message.lower():
                raise CliError(
                    f"-u {self.url}: the server refuses to load models ({exc.message}); start it with "
                    "--model-control-mode explicit so that tcli analyze can load each config"
                ) from None
            raise
        self.loaded_variant = True

    def profiler(self, settings: Settings) -> Profiler:
        return _http_profiler(self.name, self.info, self.protocol, self.url, self.inputs, settings)

    def close(self) -> None:
        from tcli.client.types import ClientError

        try:
            if self.loaded_variant:  # back to the model's own config, read from the repository
                self.client.load_model(self.name)
                # unless the user had loaded another config: then that one, as it was served
                if self.client.model_config(self.name, "") != self._served:
                    self.client.load_model(self.name, config_json(self._completed))
        except ClientError:
            pass
        finally:
            self.client.close()


def measure_candidate(
    target: Target,
    config: ModelConfig,
    options: MeasureOptions,
    constraints: Constraints,
    stop_when_flat: bool,
    lead: Lead | None = None,
) -> tuple[list[Level], int]:
    """Load one candidate's config into the target, then sweep it (sweep.py); its levels, and the
    window it was measured with (stretched at its first level)."""
    target.load(config)
    profiler = target.profiler(options.settings())
    try:
        profiler.start()
        levels = sweep(
            profiler, options.concurrencies(), constraints, stop_when_flat, options.min_requests, lead
        )
        return levels, profiler.settings.measurement_ms
    finally:
        profiler.close()
