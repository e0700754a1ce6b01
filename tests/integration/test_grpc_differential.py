"""The same unary gRPC calls, good and bad, against real Triton 2.51 and tcli on the python-backend
example models: status codes, messages, metadata and outputs compared (skipped without the reference)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.integration.conftest import REPO
from tests.integration.grpc_fixtures import start_grpc_server

MODELS = ["add_sub", "simple_identity"]


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    root = tmp_path_factory.mktemp("grpc-differential") / "models"
    root.mkdir()
    for model in MODELS:
        shutil.copytree(REPO / model, root / model)
    tcli = start_grpc_server(root)
    channels = []
    try:
        with RealTriton(binary, root) as triton:
            stubs = {}
            for name, address in (("triton", triton.grpc_address), ("tcli", tcli.url)):
                channel = grpc.insecure_channel(address)
                channels.append(channel)
                stubs[name] = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            yield stubs
    finally:
        for channel in channels:
            channel.close()
        tcli.stop()


def add_sub(
    shape: list[int],
    values: tuple[int, int] = (4, 4),
    datatype: str = "FP32",
    model: str = "add_sub",
    **extra: Any,
) -> Any:
    request = service_pb2.ModelInferRequest(model_name=model, **extra)
    for name, count in zip(("INPUT0", "INPUT1"), values, strict=True):
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(np.arange(count, dtype=np.float32).tobytes())
    return request


def call(stub: Any, method: str, request: Any) -> tuple[str, Any]:
    """(status code name, answer) where the answer is comparable across servers."""
    try:
        answer = getattr(stub, method)(request, timeout=30)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()
    if method == "ModelInfer":
        outputs = {
            o.name: (o.datatype, list(o.shape), answer.raw_output_contents[i])
            for i, o in enumerate(answer.outputs)
        }
        return "OK", (answer.model_name, answer.model_version, answer.id, outputs)
    return "OK", str(answer)


CASES: list[tuple[str, Any]] = [
    ("ServerLive", service_pb2.ServerLiveRequest()),
    ("ServerReady", service_pb2.ServerReadyRequest()),
    ("ModelReady", service_pb2.ModelReadyRequest(name="add_sub")),
    ("ModelReady", service_pb2.ModelReadyRequest(name="nope")),
    ("ModelMetadata", service_pb2.ModelMetadataRequest(name="add_sub")),
    ("ModelMetadata", service_pb2.ModelMetadataRequest(name="simple_identity")),
    ("ModelMetadata", service_pb2.ModelMetadataRequest(name="nope")),
    ("ModelMetadata", service_pb2.ModelMetadataRequest(name="add_sub", version="3")),
    ("ModelInfer", add_sub([4], id="r1")),
    ("ModelInfer", add_sub([4], model="nope")),
    ("ModelInfer", add_sub([5], values=(5, 5))),
    ("ModelInfer", add_sub([1, 4])),
    ("ModelInfer", add_sub([4], datatype="INT32")),
    # one wrong input: when several are wrong Triton names the one its hash map yields first
    ("ModelInfer", add_sub([4], values=(4, 3))),
    ("ModelInfer", service_pb2.ModelInferRequest(model_name="add_sub")),
    ("ModelStatistics", service_pb2.ModelStatisticsRequest(name="nope")),
    ("RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name="add_sub")),
]


@pytest.mark.reference
@pytest.mark.parametrize(
    ("method", "request_message"), CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)]
)
def test_same_answer_as_triton(stubs: dict[str, Any], method: str, request_message: Any) -> None:
    theirs = call(stubs["triton"], method, request_message)
    ours = call(stubs["tcli"], method, request_message)
    polling = "explicit model load / unload is not allowed if polling is enabled"
    if method == "RepositoryModelLoad" and theirs[1] == polling:
        # DIFFERENCE (README, model commands): Triton's words, then the server's mode and the fix
        assert ours[0] == theirs[0] and str(ours[1]).startswith(
            polling + " (this server runs with --model-control-mode"
        )
        return
    assert ours == theirs
