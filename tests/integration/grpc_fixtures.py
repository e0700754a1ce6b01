"""A real tcli gRPC server on port 0, in-process: model manager, service and the gRPC front end on its
own event loop thread (uvloop, as `tcli serve` runs it). Start-up waits on the server binding, never
on sleeps; stopping unloads every model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from server.repository.manager import ControlMode, ModelManager
from server.service import InferenceService
from tests.integration.conftest import link_repository, python_host_available

GRPC_FRAMEWORK_MODELS = ["simple", "digits_torchscript", "digits_ensemble"]
GRPC_PYTHON_MODELS = ["add_sub", "simple_identity", "simple_sequence"]
GRPC_REPOSITORY_MODELS = [*GRPC_FRAMEWORK_MODELS, *GRPC_PYTHON_MODELS, "digits_onnx", "digits_preprocess"]


@dataclass
class RunningGrpcServer:
    manager: ModelManager
    service: InferenceService
    port: int
    loop: asyncio.AbstractEventLoop
    repository: Path
    handle: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """host:port, as tritonclient takes it."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        try:
            future = asyncio.run_coroutine_threadsafe(self.handle.shutdown(), self.loop)
            future.result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.manager.shutdown(10)


def start_grpc_server(
    repository: Path,
    mode: ControlMode = ControlMode.NONE,
    load_models: list[str] | None = None,
    **serve_options: Any,
) -> RunningGrpcServer:
    from server.frontends.grpc import serve_grpc

    manager = ModelManager([repository], mode)
    manager.load_startup(load_models)
    service = InferenceService(manager)
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
            result["handle"] = loop.run_until_complete(serve_grpc(service, "127.0.0.1", 0, **serve_options))
        except BaseException as exc:  # reported to the starting thread
            result["error"] = exc
            bound.set()
            return
        bound.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="grpc-test-server", daemon=True)
    thread.start()
    if not bound.wait(30) or "error" in result:
        manager.shutdown(5)
        raise RuntimeError(f"gRPC server did not start: {result.get('error')}")
    handle = result["handle"]
    return RunningGrpcServer(manager, service, handle.port, loop, repository, handle, thread)


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGrpcServer]:
    """Explicit control mode, client shared memory allowed; the ONNX, TorchScript and ensemble example
    models (and the python ones when the python backend host is there) loaded at start-up."""
    models = GRPC_FRAMEWORK_MODELS + (GRPC_PYTHON_MODELS if python_host_available() else [])
    repository = link_repository(tmp_path_factory.mktemp("repo") / "models", GRPC_REPOSITORY_MODELS)
    server = start_grpc_server(repository, ControlMode.EXPLICIT, models, allow_client_shm=True)
    try:
        yield server
    finally:
        server.stop()
