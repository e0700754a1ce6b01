"""Python model instances in their own processes, end to end: the real server on port 0, real
tritonclient HTTP and gRPC clients. A pure-Python CPU-bound model with two instances answers two
requests in two processes at the same time (a cross-process rendezvous, no timing), a decoupled
model streams from its process over gRPC, a model that kills its process fails that request in one
line and serves the next, and unloading ends the processes and frees their shared memory."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.conftest import RunningServer, start_server

WAIT = 60.0

SPIN_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
input [
  {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "FOLDER" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [
  {{ name: "SUM" data_type: TYPE_INT64 dims: [ 1 ] }},
  {{ name: "MET" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }}
]
"""

# sum of squares below N in a pure-Python loop; with a FOLDER, first wait (spinning) until two
# execute() calls have arrived there, and report how many did
SPIN_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            folder = pb_utils.get_input_tensor_by_name(request, "FOLDER").as_numpy()[0].decode()
            met = 0
            if folder:
                open(os.path.join(folder, str(os.getpid())), "w").close()
                deadline = time.monotonic() + 30
                while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
                    sum(range(1000))
                met = len(os.listdir(folder))
            total = 0
            for i in range(n):
                total += i * i
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([total], dtype=np.int64)),
                pb_utils.Tensor("MET", np.array([met], dtype=np.int32)),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
            ]))
        return responses
"""

STREAM_CONFIG = """
name: "stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
instance_group [ { count: 2 kind: KIND_CPU } ]
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "I" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""

# N responses, sent from a thread after execute() returned, then the final flag alone
STREAM_MODEL = """
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def send_all(sender, n):
    for i in range(n):
        sender.send(pb_utils.InferenceResponse([
            pb_utils.Tensor("I", np.array([i], dtype=np.int32)),
            pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
        ]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            threading.Thread(target=send_all, args=(request.get_response_sender(), n)).start()
        return None
"""

# one instance, in its own process because the parameter says so; N = -1 kills the process
CRASHY_CONFIG = """
name: "crashy"
backend: "python"
max_batch_size: 0
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "true" } }
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

CRASHY_MODEL = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0]) == -1:
                os._exit(7)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))])
                for _ in requests]
"""

MODELS = ["spin", "stream", "crashy"]


def write_model(repository: Path, name: str, config: str, model: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)
    (repository / name / "1" / "model.py").write_text(model)


def make_repository(root: Path) -> Path:
    write_model(root, "spin", SPIN_CONFIG.format(name="spin"), SPIN_MODEL)
    write_model(root, "spin_extra", SPIN_CONFIG.format(name="spin_extra"), SPIN_MODEL)
    write_model(root, "stream", STREAM_CONFIG, STREAM_MODEL)
    write_model(root, "crashy", CRASHY_CONFIG, CRASHY_MODEL)
    return root


def own_segments() -> set[str]:
    """The shared-memory segments of this (the server's) process: tcli<pid>_<n>."""
    return {p.name for p in Path("/dev/shm").glob(f"tcli{os.getpid()}_*")}


def sum_of_squares(n: int) -> int:
    return sum(i * i for i in range(n))


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = make_repository(tmp_path_factory.mktemp("repo"))
    server = start_server(repository, ControlMode.EXPLICIT, MODELS)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = make_repository(tmp_path_factory.mktemp("repo"))
    server = start_server(repository, ControlMode.EXPLICIT, ["spin", "stream"], protocol="grpc")
    try:
        yield server
    finally:
        server.stop()


def spin_inputs(module: Any, n: int, folder: str) -> list[Any]:
    inputs = [module.InferInput("N", [1], "INT32"), module.InferInput("FOLDER", [1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([n], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([folder.encode()], dtype=np.object_))
    return inputs


def check_overlap(results: list[Any], folder: Path, n: int) -> None:
    """Both requests met in the folder (they ran at the same time), in two processes other than the
    server's, and computed the right sum."""
    assert [int(r.as_numpy("MET")[0]) for r in results] == [2, 2]
    pids = {int(r.as_numpy("PID")[0]) for r in results}
    assert len(pids) == 2 and os.getpid() not in pids
    assert {p.name for p in folder.iterdir()} == {str(p) for p in pids}
    assert [int(r.as_numpy("SUM")[0]) for r in results] == [sum_of_squares(n)] * 2


def test_http_two_instances_run_at_once_in_two_processes(http_server: RunningServer, tmp_path: Path) -> None:
    client = httpclient.InferenceServerClient(http_server.url, concurrency=2)
    try:
        pending = [client.async_infer("spin", spin_inputs(httpclient, 5000, str(tmp_path))) for _ in range(2)]
        check_overlap([p.get_result(timeout=WAIT) for p in pending], tmp_path, 5000)
        for n in (0, 1, 777):  # and plain requests after that
            result = client.infer("spin", spin_inputs(httpclient, n, ""))
            assert int(result.as_numpy("SUM")[0]) == sum_of_squares(n)
    finally:
        client.close()


def test_grpc_two_instances_run_at_once_in_two_processes(grpc_server: RunningServer, tmp_path: Path) -> None:
    client = grpcclient.InferenceServerClient(grpc_server.url)
    answers: queue.Queue[Any] = queue.Queue()
    try:
        for _ in range(2):
            client.async_infer(
                "spin",
                spin_inputs(grpcclient, 3000, str(tmp_path)),
                callback=lambda result, error: answers.put(error or result),
            )
        results = [answers.get(timeout=WAIT) for _ in range(2)]
        assert not [r for r in results if isinstance(r, InferenceServerException)], results
        check_overlap(results, tmp_path, 3000)
    finally:
        client.close()


def test_grpc_decoupled_model_streams_from_its_process(grpc_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(grpc_server.url)
    received: queue.Queue[Any] = queue.Queue()
    try:
        client.start_stream(callback=lambda result, error: received.put(error or result))
        for n, request_id in ((3, "a"), (2, "b")):
            value = grpcclient.InferInput("N", [1], "INT32")
            value.set_data_from_numpy(np.array([n], dtype=np.int32))
            client.async_stream_infer("stream", [value], request_id=request_id)
        responses = [received.get(timeout=WAIT) for _ in range(5)]
        assert not [r for r in responses if isinstance(r, InferenceServerException)], responses
        by_id: dict[str, list[int]] = {}
        pids = set()
        for response in responses:
            request_id = response.get_response().id
            by_id.setdefault(request_id, []).append(int(response.as_numpy("I")[0]))
            pids.add(int(response.as_numpy("PID")[0]))
        assert by_id == {"a": [0, 1, 2], "b": [0, 1]}
        assert os.getpid() not in pids
    finally:
        client.stop_stream()
        client.close()


def test_http_crash_fails_the_request_and_the_instance_restarts(http_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(http_server.url)

    def infer(n: int) -> Any:
        value = httpclient.InferInput("N", [1], "INT32")
        value.set_data_from_numpy(np.array([n], dtype=np.int32))
        return client.infer("crashy", [value])

    try:
        first = int(infer(1).as_numpy("PID")[0])
        with pytest.raises(InferenceServerException) as caught:
            infer(-1)
        assert caught.value.message() == (
            "python model 'crashy' instance 'crashy_0_0': its process exited unexpectedly (exit code 7); "
            "the instance restarts for later requests"
        )
        second = int(infer(2).as_numpy("PID")[0])
        assert second not in (first, os.getpid())
        assert client.is_model_ready("crashy")
    finally:
        client.close()


def test_http_unload_ends_the_processes_and_frees_shared_memory(http_server: RunningServer) -> None:
    before = own_segments()
    client = httpclient.InferenceServerClient(http_server.url, concurrency=2)
    try:
        client.load_model("spin_extra")
        pids = set()
        for _ in range(6):
            pending = [client.async_infer("spin_extra", spin_inputs(httpclient, 10, "")) for _ in range(2)]
            pids |= {int(p.get_result(timeout=WAIT).as_numpy("PID")[0]) for p in pending}
        assert own_segments() - before  # the instances hold shared memory while loaded
        client.unload_model("spin_extra")
        deadline = time.monotonic() + WAIT  # a failure timeout: unloading may finish after the reply
        while own_segments() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert own_segments() <= before
        assert not client.is_model_ready("spin_extra")
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        client.close()


# run in an interpreter of its own: multiprocessing makes its socket folder once per process
LONG_TMPDIR_SCRIPT = """
import sys

import numpy as np

import tcli.inprocess as tritonserver

options = dict(model_control_mode=tritonserver.ModelControlMode.EXPLICIT, startup_models=["add_sub"])
with tritonserver.Server(model_repository=sys.argv[1], **options) as server:
    inputs = {"INPUT0": np.arange(4, dtype=np.float32), "INPUT1": np.ones(4, dtype=np.float32)}
    (response,) = list(server.model("add_sub").infer(inputs=inputs))
    print(np.from_dlpack(response.outputs["OUTPUT0"]).tolist())
"""


def test_instance_processes_start_under_a_deep_tmpdir(tmp_path: Path) -> None:
    # Triton's chart gives the server a scratch volume as TMPDIR; mounted deep, the zygote's socket
    # path under it would pass a Unix socket's 107 bytes
    deep = tmp_path / ("scratch-" + "d" * 100)
    deep.mkdir()
    repository = Path(__file__).resolve().parents[2] / "model_repository"
    done = subprocess.run(
        [sys.executable, "-c", LONG_TMPDIR_SCRIPT, str(repository)],
        env={**os.environ, "TMPDIR": str(deep)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.0, 2.0, 3.0, 4.0]"
    assert list(deep.iterdir()) == []  # nothing of multiprocessing's was left there
