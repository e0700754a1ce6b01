"""gRPC cancellation as Triton's gRPC handlers tell it in the verbose log, and the wait
TRITONSERVER_DELAY_GRPC_PROCESS puts on a new ModelInfer call (Triton's testing aid, which its qa
L0_request_cancellation uses): a call its client cancels while it waits at its START step ends
CANCELLED and never reaches the model, and the log says so with Triton's lines (scripts count them);
a call cancelled while the model runs it says so too, on ModelInfer and on ModelStreamInfer.

One `tcli serve --log-verbose=1` with TRITONSERVER_DELAY_GRPC_PROCESS=1500 and a python model that
answers at once, or, sent -1, holds until its request is cancelled (writing a file when it starts)."""

from __future__ import annotations

import queue
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.serve_process import ServeProcess
from tests.waiting import wait_until

WAIT = 30.0  # failure timeout; never reached when things work
DELAY_MS = 1500  # long enough for the test to cancel while a call waits, short for the suite
HOLD = -1  # the value that makes the model hold until cancelled

CONFIG = """
name: "holder"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

MODEL = """
import os
import time

import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if int(value[0]) == {hold}:
                open(os.path.join(FOLDER, "holding-%d" % len(os.listdir(FOLDER))), "w").close()
                for _ in range(6000):  # a minute at most: a test that never cancels still ends
                    if request.is_cancelled():
                        break
                    time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value)]))
        return responses
"""

CANCELLED_AT_START = re.compile(
    r"Cancellation notification received for ModelInferHandler, rpc_ok=1, context \d+, \d+ step START"
)
NEW_HANDLER = "New request handler for ModelInferHandler"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    root = tmp_path_factory.mktemp("handler_steps")
    folder = root / "state"
    folder.mkdir()
    (root / "models" / "holder" / "1").mkdir(parents=True)
    (root / "models" / "holder" / "config.pbtxt").write_text(CONFIG)
    (root / "models" / "holder" / "1" / "model.py").write_text(
        textwrap.dedent(MODEL.format(folder=str(folder), hold=HOLD))
    )
    server = ServeProcess(
        f"--model-repository={root / 'models'}",
        "--log-verbose=1",
        env={"TRITONSERVER_DELAY_GRPC_PROCESS": str(DELAY_MS)},
    )
    try:
        yield server, folder
    finally:
        server.stop()


def _inputs(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def _executions(client: grpcclient.InferenceServerClient) -> int:
    stats: dict[str, Any] = client.get_inference_statistics("holder", as_json=True)["model_stats"][0]
    return int(stats.get("execution_count", 0))


def test_a_call_cancelled_at_its_start_step_never_reaches_the_model(
    served: tuple[ServeProcess, Path],
) -> None:
    server, _ = served
    assert server.output().count(NEW_HANDLER) == 2  # Triton's two ModelInfer handlers, posted at start
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    waiting = server.output().count(f"Delaying the write of the response by {DELAY_MS} ms...")
    future = client.async_infer("holder", _inputs(7), callback=lambda result, error: answers.put(error))
    wait_until(
        lambda: server.output().count(f"Delaying the write of the response by {DELAY_MS} ms...") > waiting,
        "the call to wait at its START step",
        timeout=WAIT,
    )
    future.cancel()
    error = answers.get(timeout=WAIT)
    assert isinstance(error, InferenceServerException)
    assert error.status() == "StatusCode.CANCELLED"
    # seen when the START step is processed, and again with the call's done notification
    server.wait_for_output(
        "Completing cancellation for ModelInferHandler, rpc_ok=1, context 0, 0 step START", timeout=WAIT
    )
    out = server.output()
    assert len(CANCELLED_AT_START.findall(out)) == 2
    assert out.count(NEW_HANDLER) == 3  # the handler posted to replace the cancelled call's
    assert _executions(client) == 0  # (the next test shows a call that runs is counted)
    client.close()


def _hold_and_cancel(served: tuple[ServeProcess, Path], stream: bool) -> None:
    """A call (or a stream's request) the model runs, cancelled while it runs: it is counted."""
    server, folder = served
    client = grpcclient.InferenceServerClient(server.grpc_url)
    executions = _executions(client)
    answers: queue.Queue[Any] = queue.Queue()
    holding = len(list(folder.iterdir()))
    if stream:
        client.start_stream(callback=lambda result, error: answers.put(error))
        client.async_stream_infer("holder", _inputs(HOLD))
    else:
        future = client.async_infer(
            "holder", _inputs(HOLD), callback=lambda result, error: answers.put(error)
        )
    wait_until(lambda: len(list(folder.iterdir())) > holding, "the model to run the call", timeout=WAIT)
    if stream:
        client.stop_stream(cancel_requests=True)
    else:
        future.cancel()
    assert isinstance(answers.get(timeout=WAIT), InferenceServerException)
    wait_until(lambda: _executions(client) > executions, "the execution to be counted", timeout=WAIT)
    client.close()


def test_a_call_cancelled_while_the_model_runs_it_says_so(served: tuple[ServeProcess, Path]) -> None:
    server, _ = served
    _hold_and_cancel(served, stream=False)
    server.wait_for_output(
        "Cancellation notification received for ModelInferHandler, rpc_ok=1, context 0, 0 step ISSUED",
        timeout=WAIT,
    )
    assert "Issuing cancellation for 0" in server.output()
    assert "Process for ModelInferHandler" not in server.output()  # an ordinary step: level 2


def test_a_stream_cancelled_while_the_model_runs_its_request_says_so(
    served: tuple[ServeProcess, Path],
) -> None:
    server, _ = served
    _hold_and_cancel(served, stream=True)
    server.wait_for_output(
        "Cancellation notification received for ModelStreamInferHandler, rpc_ok=1, context 0, 0 step ISSUED",
        timeout=WAIT,
    )
