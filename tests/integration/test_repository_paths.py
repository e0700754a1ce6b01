"""A model name in a request names one folder directly inside the repository, never a path: a load
of `../elsewhere/model`, of an absolute path or of `..` finds nothing, over HTTP and gRPC alike, with
Triton's answer for a model the repository does not hold; the model outside is never loaded.

A symlink the operator put in the repository is followed, as Triton follows it (Kubernetes mounts
ConfigMaps and Secrets as symlinks): it is part of the repository the operator chose.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.conftest import REPO, RunningServer, start_server

# names that would reach the model outside the repository if they were taken as paths
ESCAPES = ["../outside/add_sub", "../outside", "..", ".", "/", "add_sub/../../outside/add_sub", "a\\..\\b"]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("paths")
    repository, outside = root / "repository", root / "outside"
    repository.mkdir()
    shutil.copytree(REPO / "add_sub", outside / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    # a model of the repository's own, reached through a symlink the operator placed
    shutil.copytree(REPO / "add_sub", root / "kept" / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    (repository / "add_sub").symlink_to(root / "kept" / "add_sub", target_is_directory=True)
    return repository, outside


def _servers(repository: Path, protocol: str) -> Iterator[RunningServer]:
    running = start_server(repository, ControlMode.EXPLICIT, protocol=protocol)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def http_server(layout: tuple[Path, Path]) -> Iterator[RunningServer]:
    yield from _servers(layout[0], "http")


@pytest.fixture(scope="module")
def grpc_server(layout: tuple[Path, Path]) -> Iterator[RunningServer]:
    yield from _servers(layout[0], "grpc")


ABSOLUTE = "<absolute path of the model outside>"


@pytest.mark.parametrize("name", [*ESCAPES, ABSOLUTE])
def test_http_load_of_a_path_finds_no_model(
    http_server: RunningServer, layout: tuple[Path, Path], name: str
) -> None:
    if name == ABSOLUTE:
        name = str(layout[1] / "add_sub")
    with httpx.Client(base_url=http_server.base_url, timeout=30) as http:
        # every byte percent-encoded: a client would otherwise collapse "." and ".." out of the URL
        encoded = "".join(f"%{byte:02X}" for byte in name.encode())
        response = http.post(f"/v2/repository/models/{encoded}/load")
        assert response.status_code == 500
        assert response.json() == {"error": f"failed to load '{name}', failed to poll from model repository"}
        assert all(row["name"] == "add_sub" for row in http.post("/v2/repository/index").json())
        assert http.get("/v2/health/ready").status_code == 200


def test_grpc_load_of_a_path_finds_no_model(grpc_server: RunningServer, layout: tuple[Path, Path]) -> None:
    client = grpcclient.InferenceServerClient(grpc_server.url)
    for name in [*ESCAPES, str(layout[1] / "add_sub")]:
        with pytest.raises(InferenceServerException) as failure:
            client.load_model(name)
        assert failure.value.message() == f"failed to load '{name}', failed to poll from model repository"
    assert [model.name for model in client.get_model_repository_index().models] == ["add_sub"]
    client.close()


def test_a_symlinked_model_of_the_repository_loads(http_server: RunningServer) -> None:
    with httpx.Client(base_url=http_server.base_url, timeout=60) as http:
        assert http.post("/v2/repository/models/add_sub/load").status_code == 200
        body = {
            "inputs": [
                {"name": name, "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                for name in ("INPUT0", "INPUT1")
            ]
        }
        outputs = http.post("/v2/models/add_sub/infer", json=body).json()["outputs"]
        assert {o["name"]: o["data"] for o in outputs} == {"OUTPUT0": [2, 4, 6, 8], "OUTPUT1": [0, 0, 0, 0]}
