"""The response sender's rules for python models, as Triton 2.51's python backend keeps them (its texts
checked against it): a model that is not decoupled answers each request once, so a second response
(sent, or returned after one was sent) never reaches the client: the model gets Triton's error, or
the execution fails in the server's log only (so does one that fails after its response was sent);
a batched execute() that answered every request through its senders returns None, and a returned
list may hold None for a request its sender answers; a decoupled model that returns responses is told so, naming the
instance. Over real tritonclient gRPC (unary and streaming); tests wait on answers, never sleeps."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.grpc_fixtures import RunningGrpcServer, start_grpc_server
from tests.waiting import wait_until

WAIT = 30.0  # failure timeout; never reached when things work
TWICE = "Unable to send response. Non-decoupled model cannot send more than one response."
HEAD = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])
"""
MODELS = {
    # the second send raises in the model, which reports what it was told in the log
    "sends_twice": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(answer(1), flags=FINAL)
            try:
                sender.send(answer(2), flags=FINAL)
            except pb_utils.TritonModelException as error:
                pb_utils.Logger.log_warn("second send refused: " + error.message())
        return None
""",
    "sends_and_returns": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(answer(1), flags=FINAL)
        return [answer(2) for _ in requests]
""",
    "batch_senders": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            request.get_response_sender().send(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value * 10)]), flags=FINAL
            )
        return None
""",
    # a second response raises in the model, uncaught: the execution fails after one was sent
    "sends_then_fails": """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(answer(1))
            sender.send(answer(2))
        return None
""",
    # None in the returned list for the requests its senders answer (from a thread, after return:
    # it pauses as Triton's qa model does, so the answer comes after execute() returned)
    "none_in_list": """
import threading


def later(sender, value, returned):
    returned.wait(30)  # answers once execute() has returned, as Triton's qa model does
    sender.send(answer(value), flags=FINAL)


class TritonPythonModel:
    def execute(self, requests):
        answers, returned = [], threading.Event()
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if value % 2 == 0:
                answers.append(answer(value))
                continue
            sender = request.get_response_sender()
            threading.Thread(target=later, args=(sender, value * 10, returned)).start()
            answers.append(None)
        try:
            return answers
        finally:
            returned.set()
""",
    "decoupled_returns": """
class TritonPythonModel:
    def execute(self, requests):
        return [answer(1) for _ in requests]
""",
}
CONFIGS = {
    "batch_senders": "max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 4 ] "
    "max_queue_delay_microseconds: 10000000 }\n",
    "decoupled_returns": "model_transaction_policy { decoupled: true }\n",
}
IO = """
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGrpcServer]:
    root = tmp_path_factory.mktemp("senders")
    for name, body in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(HEAD + body)
        config = f'name: "{name}"\nbackend: "python"\n{CONFIGS.get(name, "")}{IO}'
        (root / name / "config.pbtxt").write_text(config)
    running = start_grpc_server(Path(root), ControlMode.EXPLICIT, list(MODELS))
    try:
        yield running
    finally:
        running.stop()


def one(value: int, batched: bool = False) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1, 1] if batched else [1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]] if batched else [value], np.int32))
    return [tensor]


def streamed(server: RunningGrpcServer, model: str) -> list[Any]:
    """What one streamed request gets: OUT values and "final" at the final flag, or an error."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    seen: list[Any] = []
    try:
        client.async_stream_infer(model, one(5), enable_empty_final_response=True)
        while "final" not in seen and len(seen) < 10:
            result, error = answers.get(timeout=WAIT)
            if error is not None:  # ends the request (no final flag follows, as in Triton)
                seen.append(error.message())
                break
            response = result.get_response()
            seen.extend(int(v) for v in result.as_numpy("OUT")) if response.outputs else None
            if response.parameters["triton_final_response"].bool_param:
                seen.append("final")
    finally:
        client.stop_stream()
        client.close()
    return seen


def test_a_second_send_is_refused_and_never_reaches_the_client(
    server: RunningGrpcServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = grpcclient.InferenceServerClient(server.url)
    assert client.infer("sends_twice", one(5)).as_numpy("OUT").tolist() == [1]
    assert streamed(server, "sends_twice") == [1, "final"]
    assert f"second send refused: {TWICE}" in caplog.text


def test_a_response_returned_after_one_was_sent_fails_the_execution_in_the_log_only(
    server: RunningGrpcServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    assert client.infer("sends_and_returns", one(5)).as_numpy("OUT").tolist() == [1]
    assert streamed(server, "sends_and_returns") == [1, "final"]
    # Triton 2.51 logs exactly this (pb_stub.cc) and the client keeps its first response
    logged = f"Failed to process the request(s) for model 'sends_and_returns_0_0', message: {TWICE}"
    # the log line follows the response the client already has: wait for it
    wait_until(lambda: caplog.text.count(logged) >= 2, "the two failures in the log")
    assert caplog.text.count(logged) == 2
    assert client.infer("sends_and_returns", one(5)).as_numpy("OUT").tolist() == [1]  # still serving


def test_an_execution_failing_after_its_one_response_keeps_that_response(
    server: RunningGrpcServer, caplog: pytest.LogCaptureFixture
) -> None:
    # as Triton's qa (response_sender test_non_decoupled_two_response_pre_return): the client gets
    # the first response and no error; the failure is in the log
    client = grpcclient.InferenceServerClient(server.url)
    assert client.infer("sends_then_fails", one(5)).as_numpy("OUT").tolist() == [1]
    # a stream answers a default model's requests in their order: an error for the first request
    # would come before the second's response
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for _ in range(2):
            client.async_stream_infer("sends_then_fails", one(5))
        seen = []
        for _ in range(2):
            result, error = answers.get(timeout=WAIT)
            seen.append(error.message() if error is not None else result.as_numpy("OUT").tolist())
    finally:
        client.stop_stream()
        client.close()
    assert seen == [[1], [1]]
    logged = (
        "Failed to process the request(s) for model 'sends_then_fails_0_0', message: "
        f"TritonModelException: {TWICE}"
    )
    wait_until(lambda: caplog.text.count(logged) >= 3, "the three failures in the log")
    assert caplog.text.count(logged) == 3


def test_none_in_the_returned_list_leaves_that_request_to_its_sender(server: RunningGrpcServer) -> None:
    # as Triton's qa (response_sender test_non_decoupled_multiple_requests)
    client = grpcclient.InferenceServerClient(server.url)
    assert client.infer("none_in_list", one(3)).as_numpy("OUT").tolist() == [30]
    assert client.infer("none_in_list", one(4)).as_numpy("OUT").tolist() == [4]
    assert streamed(server, "none_in_list") == [50, "final"]


def test_a_batch_answered_through_the_senders_may_return_none(server: RunningGrpcServer) -> None:
    results: dict[int, Any] = {}

    def infer(value: int) -> None:
        client = grpcclient.InferenceServerClient(server.url)
        try:
            results[value] = client.infer("batch_senders", one(value, batched=True)).as_numpy("OUT").tolist()
        except InferenceServerException as error:
            results[value] = error.message()

    threads = [threading.Thread(target=infer, args=(value,)) for value in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert results == {value: [[value * 10]] for value in range(1, 5)}
    statistics = grpcclient.InferenceServerClient(server.url).get_inference_statistics("batch_senders")
    stats = statistics.model_stats[0]
    assert (stats.inference_count, stats.execution_count) == (4, 1)  # one batch of four


def test_a_decoupled_model_that_returns_responses_is_told_so_by_instance(server: RunningGrpcServer) -> None:
    assert streamed(server, "decoupled_returns")[0] == (
        "Failed to process the request(s) for model 'decoupled_returns_0_0', message: Python model "
        "'decoupled_returns_0_0' is using the decoupled mode and the execute function must return None."
    )
