"""A decoupled python model whose response sender is dropped before its final flag: the thread that
held it raised (Triton's qa decoupled_bls model calls `.to("cuda")` on a CPU build of torch there).
Nobody can end that request any more; Triton's stub leaves the client's stream open until the client
gives up. tcli ends the request with an error naming the model, and the stream serves on. In the
server's process and in an instance's own, served by `tcli serve` in a process of its own (a test's
own process keeps the records it logs, and with them the failed thread's frames and its sender);
real tritonclient gRPC streaming."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.serve_process import ServeProcess

WAIT = 60.0  # failure timeout; never reached when things work

# IN > 0: a thread answers IN, then raises before its final flag; IN == 0: answered and ended
MODEL = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def answer(sender, value):
    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))]))
    if value > 0:
        raise RuntimeError("the model's thread fails before its final flag")
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=answer, args=(request.get_response_sender(), value)).start()
        return None
"""
CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
model_transaction_policy {{ decoupled: true }}
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "{process}" }} }}
"""
MODELS = {"dropped_in_process": "true", "dropped_in_server": "false"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("dropped")
    for name, process in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(MODEL)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, process=process))
    running = ServeProcess(str(Path(root)))
    try:
        yield running
    finally:
        running.stop()


def _one(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


@pytest.mark.parametrize("model", list(MODELS))
def test_a_sender_dropped_before_its_final_flag_ends_the_request_with_an_error(
    server: ServeProcess, model: str
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    seen: list[Any] = []
    try:
        client.async_stream_infer(model, _one(7), request_id="r7", enable_empty_final_response=True)
        for _ in range(2):  # the response, then the error that ends the request
            result, error = answers.get(timeout=WAIT)
            seen.append(error.message() if error is not None else result.as_numpy("OUT").tolist())
        # the stream serves on: a request that the model ends itself
        client.async_stream_infer(model, _one(0), request_id="r0", enable_empty_final_response=True)
        result, error = answers.get(timeout=WAIT)
        assert error is None and result.as_numpy("OUT").tolist() == [0]
    finally:
        client.stop_stream(cancel_requests=True)  # a request left open would block a plain stop
        client.close()
    assert seen[0] == [7]
    assert seen[1] == (
        f"model '{model}' version 1 dropped the response sender of request 'r7' without its final flag "
        "(a thread of the model's that raised drops it): a decoupled model ends each request with "
        "sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
    )
