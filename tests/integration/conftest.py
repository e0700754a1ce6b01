"""A real tcli HTTP server on port 0, in-process: `server.app.Server` as `tcli serve` composes it, its
front end on its own event loop thread. Servers are started once per module and stopped (every model
unloaded) at the end; start-up waits on the server binding, never on sleeps."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode, ModelManager
from server.service import InferenceService
from tests.torch_needed import TORCH_MISSING

REPO = Path(__file__).resolve().parents[2] / "model_repository"
# without torch (no CPU build for this Python) the servers leave the TorchScript model out, and the
# tests that use it are skipped (tests/torch_needed.py)
TORCHSCRIPT = [] if TORCH_MISSING else ["digits_torchscript"]
FRAMEWORK_MODELS = ["simple", "densenet_onnx", "digits_onnx", *TORCHSCRIPT]
PYTHON_MODELS = ["add_sub", "simple_identity"]


@dataclass
class RunningServer:
    """A started `server.app.Server` with one front end (HTTP, or gRPC in the gRPC tests) and the
    repository it serves."""

    server: Server
    repository: Path

    @property
    def manager(self) -> ModelManager:
        return self.server.manager

    @property
    def service(self) -> InferenceService:
        return self.server.service

    @property
    def port(self) -> int:
        """The port of the one front end the test server runs (HTTP, or gRPC for gRPC tests)."""
        port = self.server.http_port or self.server.grpc_port
        assert port is not None
        return port

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The server's event loop (to start more front ends on it in tests)."""
        assert self.server.loop is not None
        return self.server.loop

    @property
    def url(self) -> str:
        """host:port, as tritonclient takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop()


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
    protocol: str = "http",
    grpc_implementation: str | None = None,
) -> RunningServer:
    """The real server (`server.app.Server`, as `tcli serve` composes it) with one front end, HTTP or
    gRPC (`protocol`), on port 0; returns once it is bound. `grpc_implementation` (native | grpcio)
    defaults to $TCLI_TEST_GRPC_IMPLEMENTATION, else the server's default."""
    settings = ServerSettings(
        [repository],
        mode,
        load_models=list(load_models or []),
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_http=protocol == "http",
        allow_grpc=protocol == "grpc",
        allow_metrics=False,
        allow_client_shm=allow_client_shm,
        http_max_input_size=max_input_size,
        exit_timeout_secs=10,
    )
    implementation = grpc_implementation or os.environ.get("TCLI_TEST_GRPC_IMPLEMENTATION")
    if implementation:
        settings.grpc_implementation = implementation
    return RunningServer(Server(settings).start(), repository)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Explicit control mode, client shared memory allowed; the ONNX and TorchScript example models
    (and the python ones when the python backend host is there) loaded at start-up."""
    models = FRAMEWORK_MODELS + PYTHON_MODELS
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
