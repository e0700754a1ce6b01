"""The example models simple_dyna_sequence (sequence batcher, oldest strategy, CORRID) and
repeat_int32 (decoupled) driven as Triton's own example clients drive them: sequences interleaved on
one gRPC stream (simple_grpc_sequence_stream_infer_client.py -d), concurrent sequences over HTTP,
and the decoupled repeat client's request; then the same against the REAL Triton 2.51, which serves
both (python backend), answer for answer (skipped when it is not installed)."""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server.protocol.config_json import to_json_dict
from server.repository.manager import ControlMode
from tests.integration.conftest import RunningServer, start_server
from tests.integration.grpc_fixtures import RunningGrpcServer, start_grpc_server

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["simple_dyna_sequence", "repeat_int32"]
WAIT = 30.0
VALUES = [11, 7, 5, 3, 2, 0, 1]  # what Triton's example sequence clients send after a first value


def build_repository(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        shutil.copytree(ROOT / "model_repository" / name, root / name)
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("examples") / "models")


@pytest.fixture(scope="module")
def grpc_server(repository: Path) -> Iterator[RunningGrpcServer]:
    server = start_grpc_server(repository, ControlMode.NONE)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http_server(repository: Path) -> Iterator[RunningServer]:
    server = start_server(repository)
    try:
        yield server
    finally:
        server.stop()


def expected_dyna(sequence_id: int, values: list[int]) -> list[int]:
    """OUTPUT = INPUT + START + (END ? CORRID : 0), nothing carried from one request to the next."""
    last = len(values) - 1
    return [v + (i == 0) + (sequence_id if i == last else 0) for i, v in enumerate(values)]


def example_sequence_stream(url: str) -> dict[int, list[int]]:
    """Two sequences sent back to back on one stream, as the example client sends them; answers
    matched by request id '<sequence>_<step>'."""
    plans = {1000: [0, *VALUES], 1001: [100, *(-v for v in VALUES)]}
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for sequence_id, values in plans.items():
                for step, value in enumerate(values, start=1):
                    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                    tensor.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
                    client.async_stream_infer(
                        "simple_dyna_sequence",
                        [tensor],
                        outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                        request_id=f"{sequence_id}_{step}",
                        sequence_id=sequence_id,
                        sequence_start=step == 1,
                        sequence_end=step == len(values),
                    )
            received = [answers.get(timeout=WAIT) for _ in range(sum(len(v) for v in plans.values()))]
        finally:
            client.stop_stream()
    results: dict[int, list[tuple[int, int]]] = {1000: [], 1001: []}
    for result, error in received:
        assert error is None, error
        sequence_id, step = result.get_response().id.split("_")
        results[int(sequence_id)].append((int(step), int(result.as_numpy("OUTPUT")[0][0])))
    return {sid: [value for _, value in sorted(steps)] for sid, steps in results.items()}


def concurrent_http_sequences(address: str, plans: dict[int, list[int]]) -> dict[int, list[int]]:
    """Each sequence from its own thread and client, all at once: the oldest strategy batches them."""

    def run(sequence_id: int) -> list[int]:
        values = plans[sequence_id]
        outputs = []
        with httpclient.InferenceServerClient(address) as client:
            for step, value in enumerate(values):
                tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
                result = client.infer(
                    "simple_dyna_sequence",
                    [tensor],
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == len(values) - 1,
                )
                outputs.append(int(result.as_numpy("OUTPUT")[0][0]))
        return outputs

    with ThreadPoolExecutor(len(plans)) as pool:
        return dict(zip(plans, pool.map(run, plans), strict=True))


def repeat_client(url: str) -> list[tuple[str, int, int]]:
    """The decoupled example's repeat client: IN [4, 2, 0, 1], DELAY [1, 2, 3, 4] ms, WAIT 5 ms."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    data = {
        "IN": (np.array([4, 2, 0, 1], dtype=np.int32), "INT32"),
        "DELAY": (np.array([1, 2, 3, 4], dtype=np.uint32), "UINT32"),
        "WAIT": (np.array([5], dtype=np.uint32), "UINT32"),
    }
    inputs = []
    for name, (array, datatype) in data.items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer(
                "repeat_int32",
                inputs,
                request_id="0",
                outputs=[grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")],
            )
            received = [answers.get(timeout=WAIT) for _ in range(4)]
        finally:
            client.stop_stream()
    summary = []
    for result, error in received:
        assert error is None, error
        summary.append(
            (result.get_response().id, int(result.as_numpy("OUT")[0]), int(result.as_numpy("IDX")[0]))
        )
    return summary


# ------------------------------------------------------------------------------------------ tcli
def test_example_sequence_client_on_a_stream(grpc_server: RunningGrpcServer) -> None:
    results = example_sequence_stream(grpc_server.url)
    assert results[1000] == [1, 11, 7, 5, 3, 2, 0, 1001]
    assert results[1001] == [101, -11, -7, -5, -3, -2, 0, 1000]


def test_concurrent_sequences_are_batched_without_mixing(http_server: RunningServer) -> None:
    plans = {sid: [sid % 7, 3, -2, 5][: 2 + sid % 3] for sid in range(1, 17)}
    results = concurrent_http_sequences(http_server.url, plans)
    assert results == {sid: expected_dyna(sid, values) for sid, values in plans.items()}
    stats = http_server.service.statistics("simple_dyna_sequence").model_stats[0]
    assert stats.inference_count == sum(len(v) for v in plans.values())


def test_repeat_example_client(grpc_server: RunningGrpcServer) -> None:
    assert repeat_client(grpc_server.url) == [("0", 4, 0), ("0", 2, 1), ("0", 0, 2), ("0", 1, 3)]


def test_example_configs_as_served(http_server: RunningServer) -> None:
    config = to_json_dict(http_server.service.model_config("simple_dyna_sequence").config)
    oldest = config["sequence_batching"]["oldest"]
    assert oldest["max_candidate_sequences"] == 1024
    assert [c["name"] for c in config["sequence_batching"]["control_input"]] == [
        "START",
        "END",
        "READY",
        "CORRID",
    ]
    assert config["instance_group"][0]["count"] == 2
    repeat = to_json_dict(http_server.service.model_config("repeat_int32").config)
    assert repeat["model_transaction_policy"] == {"decoupled": True}


# ------------------------------------------------------------------------------------------ real Triton
@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, str]]]:
    """The example models served by real Triton and by tcli: (gRPC, HTTP) addresses by name."""
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    root = build_repository(tmp_path_factory.mktemp("examples-reference") / "models")
    grpc_tcli = start_grpc_server(root)
    http_tcli = start_server(root)
    try:
        with RealTriton(binary, root) as triton:
            yield {
                "triton": (triton.grpc_address, triton.http_address),
                "tcli": (grpc_tcli.url, http_tcli.url),
            }
    finally:
        grpc_tcli.stop()
        http_tcli.stop()


@pytest.mark.reference
def test_same_answers_as_triton(both: dict[str, tuple[str, str]]) -> None:
    plans = {sid: [sid, 1, -2, 3, sid % 5][: 2 + sid % 4] for sid in range(1, 13)}
    answers = {
        name: (
            example_sequence_stream(grpc_address),
            concurrent_http_sequences(http_address, plans),
            repeat_client(grpc_address),
        )
        for name, (grpc_address, http_address) in both.items()
    }
    assert answers["tcli"] == answers["triton"]
    assert answers["tcli"][1] == {sid: expected_dyna(sid, values) for sid, values in plans.items()}
