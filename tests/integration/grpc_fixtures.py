"""A real tcli gRPC server on port 0, in-process: `server.app.Server` as `tcli serve` composes it, with only
its gRPC front end, on its own event loop thread. Start-up waits on the server binding, never on
sleeps; stopping unloads every model. The module fixture `grpc_server` runs each test on both gRPC
transports (native and grpcio); other servers use $TCLI_TEST_GRPC_IMPLEMENTATION or the default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.frontends.grpc import GRPC_IMPLEMENTATIONS
from server.repository.manager import ControlMode
from tests.integration.conftest import TORCHSCRIPT, RunningServer, link_repository, start_server

GRPC_FRAMEWORK_MODELS = ["simple", *TORCHSCRIPT, "digits_ensemble"]
GRPC_PYTHON_MODELS = ["add_sub", "simple_identity", "simple_sequence"]
GRPC_REPOSITORY_MODELS = [*GRPC_FRAMEWORK_MODELS, *GRPC_PYTHON_MODELS, "digits_onnx", "digits_preprocess"]


RunningGrpcServer = RunningServer  # the same running server, with its gRPC front end


def start_grpc_server(
    repository: Path,
    mode: ControlMode = ControlMode.NONE,
    load_models: list[str] | None = None,
    *,
    allow_client_shm: bool = False,
    implementation: str | None = None,
) -> RunningGrpcServer:
    """The real server (`server.app.Server`, as `tcli serve` composes it) with only its gRPC front end,
    on port 0; returns once it is bound."""
    return start_server(
        repository,
        mode,
        load_models,
        allow_client_shm=allow_client_shm,
        protocol="grpc",
        grpc_implementation=implementation,
    )


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def grpc_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGrpcServer]:
    """Explicit control mode, client shared memory allowed; the ONNX, TorchScript and ensemble example
    models (and the python ones when the python backend host is there) loaded at start-up; once per
    gRPC implementation."""
    models = GRPC_FRAMEWORK_MODELS + GRPC_PYTHON_MODELS
    repository = link_repository(tmp_path_factory.mktemp("repo") / "models", GRPC_REPOSITORY_MODELS)
    server = start_grpc_server(
        repository, ControlMode.EXPLICIT, models, allow_client_shm=True, implementation=request.param
    )
    try:
        yield server
    finally:
        server.stop()
