"""Request rescheduling and iterative sequences (`sequence_batching { iterative_sequence: true }`), as
Triton's python backend has them: a model releases a request with
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE and gives it no response, and the request is executed again;
a request without a correlation ID starts a sequence of its own (Triton numbers them from 1 per
model), START on its first execution only. A generate loop over a gRPC stream (tritonclient), in the
server's thread and in an instance process of its own; the errors Triton gives otherwise, in its
words (checked against Triton 2.51). Tests wait on responses, never on fixed sleeps."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.grpc_fixtures import RunningGrpcServer, start_grpc_server

WAIT = 30.0  # failure timeout; never reached when things work
PROCESS = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "true" } }\n'
IO = """
input [ { name: "STEPS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "LEFT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SEQUENCE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
HEAD = """
import numpy as np
import triton_python_backend_utils as pb_utils

RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def answer(request, left):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("LEFT", np.array([left], np.int32)),
        pb_utils.Tensor("SEQUENCE", np.array([str(request.correlation_id()).encode()], object)),
        pb_utils.Tensor("FLAGS", np.array([request.flags()], np.int32)),
    ])
"""
# a generate loop: one response per execution, rescheduled until STEPS are done
GENERATE = """
class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            key = request.correlation_id()
            if key not in self.left:
                self.left[key] = int(pb_utils.get_input_tensor_by_name(request, "STEPS").as_numpy()[0])
            self.left[key] -= 1
            sender = request.get_response_sender()
            if self.left[key] > 0:
                request.set_release_flags(RESCHEDULE)
                sender.send(answer(request, self.left[key]))
            else:
                del self.left[key]
                sender.send(answer(request, 0), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
# not decoupled: the first execution of a sequence reschedules (None in the list), the second answers
ONCE_MORE = """
class TritonPythonModel:
    def initialize(self, args):
        self.seen = set()

    def execute(self, requests):
        responses = []
        for request in requests:
            if request.correlation_id() in self.seen:
                responses.append(answer(request, len(self.seen)))
            else:
                self.seen.add(request.correlation_id())
                request.set_release_flags(RESCHEDULE)
                responses.append(None)
        return responses
"""
WRONG_RETURN = """
class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.set_release_flags(RESCHEDULE)
        return [answer(request, 1) for request in requests]
"""
DECOUPLED = "model_transaction_policy { decoupled: true }\n"
ITERATIVE = "sequence_batching { iterative_sequence: true }\n"
MODELS = {
    "generate": (GENERATE, DECOUPLED + ITERATIVE),
    "generate_process": (GENERATE, DECOUPLED + ITERATIVE + PROCESS),
    "generate_oldest": (GENERATE, DECOUPLED + "sequence_batching { iterative_sequence: true oldest { } }\n"),
    "once_more": (ONCE_MORE, ITERATIVE),
    "once_more_process": (ONCE_MORE, ITERATIVE + PROCESS),
    "wrong_return": (WRONG_RETURN, ITERATIVE),
    "not_iterative": (ONCE_MORE, ""),
    "not_iterative_stream": (GENERATE, DECOUPLED),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGrpcServer]:
    root = tmp_path_factory.mktemp("rescheduling")
    for name, (body, extra) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(HEAD + body)
        config = f'name: "{name}"\nbackend: "python"\n{extra}{IO}instance_group [ {{ kind: KIND_CPU }} ]\n'
        (root / name / "config.pbtxt").write_text(config)
    running = start_grpc_server(Path(root), ControlMode.EXPLICIT, list(MODELS))
    try:
        yield running
    finally:
        running.stop()


def steps(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("STEPS", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


def stream(server: RunningGrpcServer, model: str, value: int, **sequence: Any) -> list[Any]:
    """One request over a gRPC stream: (LEFT, SEQUENCE, FLAGS) per response, up to the final one, or
    the error that ends it."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(model, steps(value), enable_empty_final_response=True, **sequence)
        seen: list[Any] = []
        for _ in range(20):
            result, error = answers.get(timeout=WAIT)
            if error is not None:
                return [*seen, error.message()]
            response = result.get_response()
            if response.outputs:
                seen.append(
                    (
                        int(result.as_numpy("LEFT")[0]),
                        result.as_numpy("SEQUENCE")[0].decode(),
                        int(result.as_numpy("FLAGS")[0]),
                    )
                )
            if response.parameters["triton_final_response"].bool_param:
                return seen
        raise AssertionError(f"no final response: {seen}")
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("model", ["generate", "generate_process", "generate_oldest"])
def test_a_generate_loop_reschedules_its_request_until_done(server: RunningGrpcServer, model: str) -> None:
    # without a correlation ID the request starts a sequence of its own: 1, then 2 (Triton numbers
    # them per model); START on the first execution only
    assert stream(server, model, 3) == [(2, "1", 1), (1, "1", 0), (0, "1", 0)]
    assert stream(server, model, 2) == [(1, "2", 1), (0, "2", 0)]
    # a client's own correlation ID is kept
    assert stream(server, model, 2, sequence_id=42, sequence_start=True) == [(1, "42", 1), (0, "42", 0)]


@pytest.mark.parametrize("model", ["once_more", "once_more_process"])
def test_a_rescheduled_request_of_a_default_model_is_answered_by_its_next_execution(
    server: RunningGrpcServer, model: str
) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    for expected in (1, 2):
        result = client.infer(model, steps(1))
        assert int(result.as_numpy("LEFT")[0]) == expected
        assert result.as_numpy("SEQUENCE")[0] == str(expected).encode()
        assert int(result.as_numpy("FLAGS")[0]) == 0  # the second execution: neither START nor END


def test_rescheduling_needs_an_iterative_sequence(server: RunningGrpcServer) -> None:
    # Triton logs this and never answers the request; tcli answers it with the same words
    message = (
        "Failed to release request: Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, "
        "while the model is not configured to handle such a flag."
    )
    client = grpcclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("not_iterative", steps(1), client_timeout=WAIT)
    assert (caught.value.status(), caught.value.message()) == ("StatusCode.INTERNAL", message)
    assert stream(server, "not_iterative_stream", 3) == [(2, "0", 0), message]
    assert stream(server, "generate", 1)[-1][0] == 0  # the server goes on serving


def test_a_rescheduled_request_must_get_no_response(server: RunningGrpcServer) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("wrong_return", steps(1), client_timeout=WAIT)
    assert caught.value.message() == (
        "Failed to process the request(s) for model 'wrong_return_0_0', message: Expected a None object in "
        "the execute function return list for reschduled request, found type "
        "'<class 'c_python_backend_utils.InferenceResponse'>'."
    )
