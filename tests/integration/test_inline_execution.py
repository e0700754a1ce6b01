"""Cheap python models opted in to the server process (TCLI_INSTANCE_PROCESS "false") run on the
server's event loop (no thread hand-off); slow, decoupled and BLS models keep their worker threads,
so a model that blocks never stalls the other connections.

Each test model answers with the name of the thread its execute() ran on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server.repository.manager import ControlMode
from tests.integration.conftest import RunningServer, start_server

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "false" }} }}
{extra}
"""

MODEL = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

SLEEP = {sleep}

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if SLEEP:
                time.sleep(SLEEP)
            name = np.array([threading.current_thread().name.encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", name)]))
        return responses

    def unused_bls(self):
        # a model that builds BLS requests may call back into the server: never inline
        return pb_utils.InferenceRequest(model_name="cheap", inputs=[], requested_output_names=[])
"""


def write_model(root: Path, name: str, *, sleep: float = 0.0, bls: bool = False, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    source = MODEL.format(sleep=sleep)
    if not bls:
        source = source.split("    def unused_bls")[0]
    (root / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("inline") / "models"
    write_model(root, "cheap")
    write_model(root, "slow", sleep=0.002)
    write_model(root, "builds_bls", bls=True)
    running = start_server(root, ControlMode.NONE)
    try:
        yield running
    finally:
        running.stop()


def threads_used(server: RunningServer, model: str, count: int = 30) -> set[str]:
    client = httpclient.InferenceServerClient(server.url)
    value = httpclient.InferInput("IN", [1], "FP32")
    value.set_data_from_numpy(np.ones(1, np.float32))
    names = set()
    for _ in range(count):
        result = client.infer(model, [value])
        names.add(result.as_numpy("THREAD")[0].decode())
    client.close()
    return names


def loop_thread_name(server: RunningServer) -> str:
    names: list[str] = []
    done = threading.Event()

    def record() -> None:
        names.append(threading.current_thread().name)
        done.set()

    server.loop.call_soon_threadsafe(record)
    assert done.wait(5)
    return names[0]


def test_cheap_model_runs_on_the_event_loop_after_its_first_executions(server: RunningServer) -> None:
    names = threads_used(server, "cheap")
    worker = {n for n in names if n.startswith("cheap_1_")}
    # the first executions (their average starts above the budget) go to the worker thread...
    assert worker, names
    # ...then the model is known to be cheap and runs where the request arrived
    assert loop_thread_name(server) in names


def test_slow_model_keeps_its_worker_thread(server: RunningServer) -> None:
    assert threads_used(server, "slow", 20) == {"slow_1_0"}


def test_model_that_builds_bls_requests_keeps_its_worker_thread(server: RunningServer) -> None:
    assert threads_used(server, "builds_bls") == {"builds_bls_1_0"}


def test_inline_requests_count_in_statistics_like_queued_ones(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    before = client.get_inference_statistics("cheap")["model_stats"][0]["inference_stats"]["success"]["count"]
    threads_used(server, "cheap", 10)
    after = client.get_inference_statistics("cheap")["model_stats"][0]["inference_stats"]["success"]["count"]
    client.close()
    assert int(after) - int(before) == 10


def test_grpc_requests_run_inline_too(tmp_path: Path) -> None:
    root = tmp_path / "models"
    write_model(root, "cheap")
    running = start_server(root, ControlMode.NONE, protocol="grpc")
    try:
        client = grpcclient.InferenceServerClient(running.url)
        value = grpcclient.InferInput("IN", [1], "FP32")
        value.set_data_from_numpy(np.ones(1, np.float32))
        names = {client.infer("cheap", [value]).as_numpy("THREAD")[0].decode() for _ in range(30)}
        client.close()
        assert loop_thread_name(running) in names
    finally:
        running.stop()
