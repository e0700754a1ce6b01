"""A real tcli HTTP server on port 0, in-process: model manager, service and HTTP front end, the front end
on its own event loop thread. Servers are started once per module and stopped (every model unloaded) at
the end; start-up waits on the server binding, never on sleeps."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from server.repository.manager import ControlMode, ModelManager
from server.service import InferenceService

REPO = Path(__file__).resolve().parents[2] / "model_repository"
FRAMEWORK_MODELS = ["simple", "densenet_onnx", "digits_onnx", "digits_torchscript"]
PYTHON_MODELS = ["add_sub", "simple_identity"]


def python_host_available() -> bool:
    """Python-backend models need the host module (server/backends/python/host.py)."""
    try:
        importlib.import_module("server.backends.python.host")
    except Exception:
        return False
    return True


@dataclass
class RunningServer:
    manager: ModelManager
    service: InferenceService
    app: Any
    port: int
    loop: asyncio.AbstractEventLoop
    repository: Path
    _handle: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """host:port, as tritonclient takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        try:
            future = asyncio.run_coroutine_threadsafe(self._handle.shutdown(), self.loop)
            future.result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.manager.shutdown(10)


def link_repository(root: Path, models: list[str]) -> Path:
    """A model repository holding (symlinks to) the named example models."""
    root.mkdir(parents=True, exist_ok=True)
    for model in models:
        (root / model).symlink_to(REPO / model, target_is_directory=True)
    return root


def start_server(
    repository: Path,
    mode: ControlMode = ControlMode.NONE,
    load_models: list[str] | None = None,
    *,
    allow_client_shm: bool = False,
    max_input_size: int = 64 * 2**20,
) -> RunningServer:
    from server.frontends.http import create_http_app, serve_http

    manager = ModelManager([repository], mode)
    manager.load_startup(load_models)
    service = InferenceService(manager, allow_client_shm=allow_client_shm)
    app = create_http_app(service, max_input_size=max_input_size, allow_client_shm=allow_client_shm)
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop comes with the server's dependencies
        loop = asyncio.new_event_loop()
    bound = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            result["handle"] = loop.run_until_complete(serve_http(app, "127.0.0.1", 0))
        except BaseException as exc:  # reported to the starting thread
            result["error"] = exc
            bound.set()
            return
        bound.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="http-test-server", daemon=True)
    thread.start()
    if not bound.wait(30) or "error" in result:
        manager.shutdown(5)
        raise RuntimeError(f"HTTP server did not start: {result.get('error')}")
    handle = result["handle"]
    return RunningServer(manager, service, app, handle.port, loop, repository, handle, thread)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Explicit control mode, client shared memory allowed; the ONNX and TorchScript example models
    (and the python ones when the python backend host is there) loaded at start-up."""
    models = FRAMEWORK_MODELS + (PYTHON_MODELS if python_host_available() else [])
    repository = link_repository(tmp_path_factory.mktemp("repo") / "models", models)
    server = start_server(repository, ControlMode.EXPLICIT, models, allow_client_shm=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Control mode none with only `simple`, client shared memory disabled (the default) and a 64 KiB
    --http-max-input-size."""
    repository = link_repository(tmp_path_factory.mktemp("repo") / "models", ["simple"])
    server = start_server(repository, ControlMode.NONE, max_input_size=64 * 1024)
    try:
        yield server
    finally:
        server.stop()
