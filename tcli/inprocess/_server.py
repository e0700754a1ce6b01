"""The in-process server, as `tritonserver.Server`: tcli's server (`server.app.Server`, the composition
`tcli serve` runs) on an event loop thread of its own, with no front end unless the options ask for
one. Every call goes to the core service (`server/service.py`) on that loop, as the front ends' calls
do, so requests meet the same schedulers, instances and checks.

`start()` loads the models (as `tcli serve` does before it listens) and raises InternalError when one
failed and `exit_on_error` is set; `stop()` stops accepting requests, waits up to `exit_timeout` for
those in flight, ends the rest with UnavailableError and unloads every model. `with Server(...) as
server:` does both.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from server import signals
from server.app import Server as AppServer
from server.frontends.ports import PortInUseError
from server.protocol import json_messages
from server.protocol.errors import TritonError as ServerError
from tcli.inprocess._connection import Connection
from tcli.inprocess._errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    from_server,
)
from tcli.inprocess._flight import stopped
from tcli.inprocess._log import install as install_log
from tcli.inprocess._model import Model
from tcli.inprocess._options import Options

if TYPE_CHECKING:
    from server.repository.manager import ModelManager

_UNLOADED_STATES = (None, "UNAVAILABLE")
log = logging.getLogger("tcli.inprocess")


def _shutdown(connection: Connection) -> bool:
    """Stop the server `connection` leads to; True when requests in flight had to be ended."""
    app = connection.app
    if app is None:
        return False
    connection.run(app.drain(app.settings.exit_timeout_secs))  # refuses new requests from here on
    connection.stop_frontends()
    left = connection.end_flights(stopped())
    app.stop()
    connection.detach()
    return left


class ModelDictionary(dict[tuple[str, int], Model]):
    """`server.models()`: (name, version) -> Model; a name alone gives the model at version -1."""

    def __init__(self, connection: Connection, models: list[Model]) -> None:
        super().__init__({(model.name, model.version): model for model in models})
        self._connection = connection
        self._names = {model.name for model in models}

    def __getitem__(self, key: Any) -> Model:
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._names:
            return Model(self._connection, key, -1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """`Server(model_repository=..., ...)` or `Server(Options(...))`: see Options for the settings."""

    def __init__(self, options: Options | None = None, **kwargs: Any) -> None:
        self.options = options if options is not None else Options(**kwargs)
        self._connection = Connection()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # life ------------------------------------------------------------------------------------------
    def start(
        self, wait_until_ready: bool = False, polling_interval: float = 0.1, timeout: float | None = None
    ) -> Server:
        if self._connection.app is not None:
            raise InvalidArgumentError("Server already started")
        settings = self.options.to_settings()
        assert settings.log_settings is not None
        log = install_log(settings.log_settings)
        signals.end_on_sigterm()  # SIGTERM still ends the program, but leaves no process or shared memory
        app = AppServer(settings)
        try:
            app.start()  # a front end that cannot bind: nothing loaded is left, nothing listens
        except PortInUseError as error:
            log.remove()
            raise UnavailableError(
                f"Socket '{error.address}:{error.port}' already in use ({error.reason}): give "
                f"Server({error.setting.lstrip('-').replace('-', '_')}=...) another port, or 0 for any free one"
            ) from None
        except ServerError as error:  # nothing listens yet; what loaded is unloaded
            log.remove()
            app.manager.shutdown(settings.exit_timeout_secs)
            raise from_server(error) from None
        self._connection.attach(app, log)
        # a server nobody holds any more is stopped, as tritonserver's is; and so is one still running
        # when the program exits (its instances' processes would keep the exit waiting)
        self._finalizer = weakref.finalize(self, _shutdown, self._connection)
        failures = app.manager.startup_failures()
        if failures and settings.exit_on_error:
            self._stop()
            raise InternalError("failed to load all models: " + "; ".join(failures))
        deadline = None if timeout is None else time.monotonic() + timeout
        while wait_until_ready and not self.ready():
            if deadline is not None and time.monotonic() >= deadline:
                raise UnavailableError("Timeout before ready")
            time.sleep(polling_interval)  # tritonserver's polling, bounded by `timeout`
        return self

    def stop(self) -> None:
        """Stop: refuse new requests, wait up to `exit_timeout` for those in flight, end the rest,
        unload every model. Raises InternalError, as `tritonserver` does, when requests were still in
        flight at the timeout (the server is stopped all the same)."""
        if self._stop():
            raise InternalError("Exit timeout expired. Exiting immediately.")

    def _stop(self) -> bool:
        """Stop the server; True when requests in flight had to be ended."""
        self._connection.started()
        if self._finalizer is not None:
            self._finalizer.detach()
        return _shutdown(self._connection)

    def __enter__(self) -> Server:
        return self.start() if self._connection.app is None else self

    def __exit__(self, *exc: object) -> None:
        if self._connection.app is not None and self._stop():
            log.warning("the in-process server stopped with requests in flight; they were ended")

    # front ends (only those the options asked for) ------------------------------------------------
    @property
    def http_port(self) -> int | None:
        return self._connection.started().http_port

    @property
    def grpc_port(self) -> int | None:
        return self._connection.started().grpc_port

    @property
    def metrics_port(self) -> int | None:
        return self._connection.started().metrics_port

    # health and metadata ---------------------------------------------------------------------------
    def live(self) -> bool:
        service = self._connection.service()
        return self._connection.on_loop(service.live)

    def ready(self) -> bool:
        service = self._connection.service()
        return self._connection.on_loop(service.ready)

    def metadata(self) -> dict[str, Any]:
        service = self._connection.service()
        return dict(orjson.loads(json_messages.encode(self._connection.on_loop(service.server_metadata))))

    def metrics(self, metric_format: Any = None) -> str:
        """Prometheus' text format, as /metrics answers (the only format)."""
        from server.backends.python.pb_utils.metric_registry import METRICS
        from server.frontends.metrics import metrics_text

        app = self._connection.started()
        text = metrics_text(app.service, cpu_metrics=app.settings.allow_cpu_metrics, custom=METRICS.collect)
        return text.decode()

    # models ----------------------------------------------------------------------------------------
    def model(self, model_name: str, model_version: int = -1) -> Model:
        self._connection.started()
        return Model(self._connection, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        service = self._connection.service()
        index = self._connection.on_loop(lambda: service.repository_index(exclude_not_ready))
        rows = [
            Model(
                self._connection,
                row.name,
                int(row.version) if row.version else -1,
                row.state or None,
                row.reason or None,
            )
            for row in index.models
        ]
        return ModelDictionary(self._connection, rows)

    def load(self, model_name: str, parameters: dict[str, str | int | bool | bytes] | None = None) -> Model:
        """Load (or reload) a model, EXPLICIT mode only. `parameters`: "config" (a JSON config to use
        instead of the repository's) and "file:<path>" (the bytes of a file of the model), as a load
        request over HTTP or gRPC carries them."""
        config: str | None = None
        files: dict[str, bytes] = {}
        for key, value in (parameters or {}).items():
            if key == "config" and isinstance(value, str):
                config = value
            elif key.startswith("file:") and isinstance(value, bytes):
                files[key] = value
            else:
                raise InvalidArgumentError(
                    f"load parameter '{key}': expected 'config' (a JSON string) or 'file:<path>' (bytes)"
                )
        service = self._connection.service()
        self._connection.run(service.load(model_name, config, files or None))
        return self.model(model_name)

    def unload(
        self,
        model: str | Model,
        unload_dependents: bool = False,
        wait_until_unloaded: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> None:
        name = model.name if isinstance(model, Model) else model
        service = self._connection.service()
        self._connection.run(service.unload(name, unload_dependents))
        # tcli's unload returns once the model is unloaded; the wait is kept for tritonserver's signature
        deadline = None if timeout is None else time.monotonic() + timeout
        while wait_until_unloaded and not self._unloaded(name):
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(polling_interval)

    def poll_model_repository(self) -> None:
        """Reload changed models, load new ones, unload removed ones now (POLL mode only)."""
        app = self._connection.started()
        if app.settings.model_control_mode != "poll":
            raise UnavailableError("poll_model_repository needs model_control_mode=ModelControlMode.POLL")
        self._connection.run(asyncio.to_thread(app.manager.poll_once))

    # repositories ------------------------------------------------------------------------------------
    def register_model_repository(
        self, repository_path: str, name_mapping: dict[str, str] | None = None
    ) -> None:
        """Serve the models of another repository folder too (EXPLICIT mode only): load them by name,
        as those of the first. Models keep their folders' names (`name_mapping` is refused)."""
        from server.repository.sources import open_repository

        manager = self._explicit_manager("registration")
        if name_mapping:
            raise UnsupportedError(
                f"failed to register '{repository_path}': name_mapping is not supported by tcli; each model "
                "is served under its folder's name"
            )
        path = Path(repository_path)
        if not path.is_dir():
            raise InvalidArgumentError(f"failed to register '{repository_path}', repository not found")

        def add() -> None:
            if any(_same(r.label, path) for r in manager.repositories):
                raise AlreadyExistsError(f"model repository '{repository_path}' has already been registered")
            manager.repositories = [*manager.repositories, open_repository(path)]  # readers keep the old list

        self._connection.on_loop(add)
        log.info("Model repository registered: %s", repository_path)

    def unregister_model_repository(self, repository_path: str) -> None:
        """Stop finding models in a repository (EXPLICIT mode only); models loaded from it stay loaded."""
        manager = self._explicit_manager("unregistration")
        path = Path(repository_path)

        def remove() -> None:
            kept = [r for r in manager.repositories if not _same(r.label, path)]
            if len(kept) == len(manager.repositories):
                raise InvalidArgumentError(f"failed to unregister '{repository_path}', repository not found")
            manager.repositories = kept

        self._connection.on_loop(remove)
        log.info("Model repository unregistered: %s", repository_path)

    def _explicit_manager(self, what: str) -> ModelManager:
        app = self._connection.started()
        if app.settings.model_control_mode != "explicit":
            raise UnsupportedError(f"repository {what} is not allowed if model control mode is not EXPLICIT")
        return app.manager

    def _unloaded(self, name: str) -> bool:
        return all(m.state in _UNLOADED_STATES for (n, _), m in self.models().items() if n == name)


def _same(label: str, path: Path) -> bool:
    """Whether a repository (its label, as given) is the folder `path`."""
    return "://" not in label and Path(label).resolve() == path.resolve()
