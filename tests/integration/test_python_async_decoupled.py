"""Decoupled python models whose execute() is a coroutine, as Triton's qa/L0_backend_python
async_execute subtest drives them, served by `tcli serve` in a process of its own:

- `await request.async_exec(decoupled=True)` resolves once the BLS stream's first response is in, as
  Triton's exec(decoupled=True) returns then. Before, it resolved at once and the model's loop then
  blocked on the first response while iterating, so concurrent requests of one instance ran one
  after another (the qa's test_concurrent_execute_multi_request_bls got 1 response of 4), in an
  instance's process and, through the server's BLS hook, in the server's;
- an execute() that raises after every request had its final flag is logged with the model's error,
  as Triton logs it (the qa's test_model_raise_exception reads it in the server log)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.serve_process import ServeProcess
from tests.waiting import wait_until

WAIT = 60.0

STREAM_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "FOLDER" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "{output}" data_type: TYPE_INT32 dims: [ 1 ] }} ]
model_transaction_policy {{ decoupled: true }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "{process}" }} }}
"""

# two responses; before the first, a pause (its own, so that a caller not waiting for it would look
# before it exists) and a marker file saying the first is on its way
SLOW_STREAM = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            folder = pb_utils.get_input_tensor_by_name(request, "FOLDER").as_numpy()[0].decode()
            sender = request.get_response_sender()
            time.sleep(0.5)
            open(os.path.join(folder, "first_sent"), "w").close()
            for n in (1, 2):
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if n == 2 else 0
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array([n], np.int32))]), flags)
        return None
"""

# async execute(): awaits a decoupled BLS stream from slow_stream, then answers whether that stream's
# first response was in when the await resolved (1) and how many responses with outputs it read
CALLER = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            folder = pb_utils.get_input_tensor_by_name(request, "FOLDER")
            bls = pb_utils.InferenceRequest(
                model_name="slow_stream", inputs=[folder], requested_output_names=["N"]
            )
            stream = await bls.async_exec(decoupled=True)
            first_in = os.path.exists(os.path.join(folder.as_numpy()[0].decode(), "first_sent"))
            count = sum(1 for response in stream if response.output_tensors())
            out = np.array([int(first_in) * 10 + count], np.int32)
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("FIRST_IN_AND_COUNT", out)]),
                pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""

# marks its arrival (gate_<n>), then waits in its own thread (20 s at most) until two requests of
# meeter have started (started_<n>), and answers how many had
GATE = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def started(folder):
    return sum(1 for name in os.listdir(folder) if name.startswith("started_"))


def wait_and_answer(sender, folder):
    deadline = time.monotonic() + 20
    while started(folder) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    seen = np.array([started(folder)], np.int32)
    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("N", seen)]), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            folder = pb_utils.get_input_tensor_by_name(request, "FOLDER").as_numpy()[0].decode()
            open(os.path.join(folder, f"gate_{len(os.listdir(folder))}"), "w").close()
            threading.Thread(target=wait_and_answer, args=(request.get_response_sender(), folder)).start()
        return None
"""

# async execute(): marks its start in FOLDER, then awaits gate's stream and answers what gate saw.
# Two requests meet at the gate only if the second one's coroutine runs while the first awaits
MEETER = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            folder = pb_utils.get_input_tensor_by_name(request, "FOLDER")
            path = folder.as_numpy()[0].decode()
            open(os.path.join(path, f"started_{len(os.listdir(path))}"), "w").close()
            bls = pb_utils.InferenceRequest(model_name="gate", inputs=[folder], requested_output_names=["N"])
            stream = await bls.async_exec(decoupled=True)
            seen = [r for r in stream if r.output_tensors()][0].output_tensors()[0].as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]),
                pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""

# async execute() that closes every request with the final flag, then raises
RAISER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        raise ValueError("wait_secs cannot be negative")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("repo")
    for name, output, source, process in (
        ("slow_stream", "N", SLOW_STREAM, "true"),
        ("caller", "FIRST_IN_AND_COUNT", CALLER, "true"),
        ("caller_in_server", "FIRST_IN_AND_COUNT", CALLER, "false"),
        ("gate", "N", GATE, "true"),
        ("meeter", "SEEN", MEETER, "true"),
        ("meeter_in_server", "SEEN", MEETER, "false"),
        ("raiser", "OUT", RAISER, "true"),
        ("raiser_in_server", "OUT", RAISER, "false"),
    ):
        (repo / name / "1").mkdir(parents=True)
        config = STREAM_CONFIG.format(name=name, output=output, process=process)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(source)
    process = ServeProcess("--model-repository", str(repo))
    yield process
    process.stop()


def _stream_one(server: ServeProcess, model: str, folder: str) -> grpcclient.InferResult:
    received: queue.SimpleQueue[object] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    try:
        value = grpcclient.InferInput("FOLDER", [1], "BYTES")
        value.set_data_from_numpy(np.array([folder.encode()], dtype=np.object_))
        client.async_stream_infer(model, [value])
        answer = received.get(timeout=WAIT)
    finally:
        client.stop_stream()
        client.close()
    assert isinstance(answer, grpcclient.InferResult), answer
    return answer


@pytest.mark.parametrize("model", ["caller", "caller_in_server"])
def test_async_exec_decoupled_resolves_once_the_first_response_is_in(
    server: ServeProcess, tmp_path: Path, model: str
) -> None:
    result = _stream_one(server, model, str(tmp_path))
    # first response in when the await resolved (10), and both responses read (2)
    assert result.as_numpy("FIRST_IN_AND_COUNT").tolist() == [12]


@pytest.mark.parametrize("model", ["meeter", "meeter_in_server"])
def test_an_instance_runs_its_coroutines_while_one_awaits_a_decoupled_bls_stream(
    server: ServeProcess, tmp_path: Path, model: str
) -> None:
    # as the qa's test_concurrent_execute_multi_request_bls: two requests on one stream, the second
    # sent once the first one's BLS request is at the gate, whose stream answers only when the
    # second one's coroutine has started too
    received: queue.SimpleQueue[object] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    try:
        value = grpcclient.InferInput("FOLDER", [1], "BYTES")
        value.set_data_from_numpy(np.array([str(tmp_path).encode()], dtype=np.object_))
        client.async_stream_infer(model, [value])
        at_gate = lambda: any(p.name.startswith("gate_") for p in tmp_path.iterdir())  # noqa: E731
        wait_until(at_gate, "the first request's BLS request at the gate", WAIT)
        client.async_stream_infer(model, [value])
        answers = [received.get(timeout=WAIT) for _ in range(2)]
    finally:
        client.stop_stream()
        client.close()
    assert [a.as_numpy("SEEN").tolist() for a in answers if isinstance(a, grpcclient.InferResult)] == [
        [2],
        [2],
    ]


@pytest.mark.parametrize("model", ["raiser", "raiser_in_server"])
def test_an_async_execute_raising_after_its_final_flags_is_logged(server: ServeProcess, model: str) -> None:
    received: queue.SimpleQueue[object] = queue.SimpleQueue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    try:
        value = grpcclient.InferInput("FOLDER", [1], "BYTES")
        value.set_data_from_numpy(np.array([b""], dtype=np.object_))
        client.async_stream_infer(model, [value])
        server.wait_for_output(f"model '{model}' version 1", timeout=WAIT)
    finally:
        client.stop_stream()
        client.close()
    logged = next(line for line in server.output().splitlines() if f"model '{model}' version 1" in line)
    assert "ValueError: wait_secs cannot be negative" in logged
