"""Faults on the hop between the server and a python instance's process (issue 33, "every request gets
an answer"): a frame that cannot be encoded or decoded on either side, an instance that dies or stalls
in the middle of a frame or dies with a child holding its pipe, a pipe that closes, bytes on the pipe
that are no message, an output the shared memory cannot grow for, a call or an answer that does not
unpickle. Each fault is injected for real, in the instance process (the model patches the pipe's
writer or the frame encoder there) or in the server (its batch encoder, its shared memory, its
answers), and each fails exactly the requests its frame carried, with one line naming the model, the
instance and the cause (INTERNAL); the instance restarts where its stream can no longer be trusted,
and the model and the server serve on. A decoupled stream ends with its error. The same holds with
no event loop (a worker thread reading the process), and an instance outlives its zygote. Every wait
has a deadline (the clients' timeouts): a hang fails the test.
"""

from __future__ import annotations

import errno
import queue
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.backends.base import ModelContext
from server.backends.python import hop_frames, process_host, shm
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.repository.manager import ControlMode
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats
from tests.integration.conftest import REPO
from tests.waiting import wait_until

DEADLINE = 30.0  # every answer comes well within it; a hang fails the test here
STALL_SECONDS = 2.0  # the server's bound on a half-written message, shortened for the test

MODEL = """
import json
import os
import select
import time

import numpy as np
import triton_python_backend_utils as pb_utils
from server.backends.python import hop_frames, process_worker

# the fault the next result frame (DONE or SEND) of this process gets; a negative input arms it
FAULT = {"next": None}
PIPE_FAULTS = ("garbage_length", "dies_mid_frame", "stalls_mid_frame", "closes_pipe", "dies_leaving_child")
ENCODE_FAULTS = ("torn_frame", "short_head", "unknown_batch", "unencodable", "unencodable_always")
_write_message = process_worker.write_message
_encode_results = hop_frames.encode_results


def faulty_write(fd, data):  # the instance's frame writer, with the armed fault on the next result frame
    fault = FAULT["next"]
    if fault not in PIPE_FAULTS or bytes(data[:1]) not in (b"\\x02", b"\\x03"):
        return _write_message(fd, data)
    FAULT["next"] = None
    if fault == "garbage_length":  # four bytes that are no message's length, then the frame
        os.write(fd, (-2).to_bytes(4, "big", signed=True))
        return _write_message(fd, data)
    if fault == "dies_leaving_child":  # a child of it keeps its end of the pipe open
        if os.fork() == 0:
            waiting = select.poll()  # until the server closes its end (a minute at most)
            waiting.register(fd, select.POLLERR)
            waiting.poll(60_000)
            os._exit(0)
        os._exit(5)
    if fault == "closes_pipe":  # the server reads the end of the stream; the process goes on
        os.close(fd)
    else:
        message = len(data).to_bytes(4, "big") + bytes(data)
        os.write(fd, message[: len(message) // 2])
        if fault == "dies_mid_frame":
            os._exit(3)
    time.sleep(3600)  # the server ends the process


def faulty_encode(kind, batch_id, index, final, results, placement):
    fault = FAULT["next"]
    if fault not in ENCODE_FAULTS:
        return _encode_results(kind, batch_id, index, final, results, placement)
    if fault != "unencodable_always":
        FAULT["next"] = None
    if fault.startswith("unencodable"):
        raise RuntimeError("injected")
    frame = _encode_results(kind, batch_id, index, final, results, placement)
    if fault == "torn_frame":
        return frame[:-2]
    if fault == "short_head":
        return frame[:3]
    return frame[:1] + (2**32 - 1).to_bytes(4, "little") + frame[5:]  # unknown_batch


def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(value, np.int32))])


class OwnTensor(pb_utils.Tensor):  # a class only the model knows: the server cannot unpickle it
    pass


def unpicklable_call():
    inputs = [OwnTensor(name, np.ones(4, np.float32)) for name in ("INPUT0", "INPUT1")]
    pb_utils.InferenceRequest(model_name="add_sub", inputs=inputs, requested_output_names=["OUTPUT0"]).exec()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.fault = config["parameters"]["FAULT"]["string_value"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        process_worker.write_message = faulty_write
        hop_frames.encode_results = faulty_encode

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                sender = request.get_response_sender()
                sender.send(answer(value))
                if value[0] < 0:
                    FAULT["next"] = self.fault
                sender.send(answer(value * 2))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0 and self.fault == "unpicklable_call":
                unpicklable_call()  # raises what the server answers
            if value[0] < 0:
                FAULT["next"] = self.fault
            # a large value asks for that many elements: an output for the shared memory
            responses.append(answer(np.full(value[0], 7) if value[0] > 1000 else value))
        return responses
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "FAULT" value: {{ string_value: "{fault}" }} }}
{extra}
"""
DECOUPLED = "model_transaction_policy { decoupled: true }"
FAULTS = (
    "none",
    "torn_frame",
    "short_head",
    "unknown_batch",
    "garbage_length",
    "dies_mid_frame",
    "dies_leaving_child",
    "stalls_mid_frame",
    "closes_pipe",
    "unencodable",
    "unencodable_always",
    "unpicklable_call",
)
STREAM_FAULTS = ("torn_frame", "dies_mid_frame", "stalls_mid_frame")
RESTARTS = "; its process was ended and the instance restarts for later requests"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """HTTP and gRPC on port 0, explicit control mode: each test loads the model of its fault (an
    instance that keeps dying is given up on, so faults do not share one)."""
    repository = tmp_path_factory.mktemp("repo") / "models"
    shutil.copytree(REPO / "add_sub", repository / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    models = [(f"faulty_{f}", f, "") for f in FAULTS] + [(f"stream_{f}", f, DECOUPLED) for f in STREAM_FAULTS]
    for name, fault, extra in models:
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(MODEL)
        (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name, fault=fault, extra=extra))
    settings = ServerSettings(
        [repository],
        ControlMode.EXPLICIT,
        load_models=["add_sub"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        exit_timeout_secs=10,
    )
    running = Server(settings).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(
        f"127.0.0.1:{server.http_port}", connection_timeout=DEADLINE, network_timeout=DEADLINE
    )
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(autouse=True)
def short_stall_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_host, "PARTIAL_MESSAGE_SECONDS", STALL_SECONDS)


def _loaded(http: httpclient.InferenceServerClient, name: str) -> Iterator[str]:
    http.load_model(name)
    try:
        yield name
    finally:
        http.unload_model(name)


@pytest.fixture
def faulty(request: pytest.FixtureRequest, http: httpclient.InferenceServerClient) -> Iterator[str]:
    yield from _loaded(http, f"faulty_{request.param}")


@pytest.fixture
def stream_model(request: pytest.FixtureRequest, http: httpclient.InferenceServerClient) -> Iterator[str]:
    yield from _loaded(http, f"stream_{request.param}")


def _inputs(module: Any, value: int) -> list[Any]:
    tensor = module.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


def _infer(http: httpclient.InferenceServerClient, model: str, value: int, request_id: str = "") -> Any:
    """OUT's values, or (status, message) of the error."""
    try:
        result = http.infer(model, _inputs(httpclient, value), request_id=request_id)
    except InferenceServerException as error:
        return error.status(), error.message()
    return result.as_numpy("OUT").tolist()


def _serves_on(http: httpclient.InferenceServerClient, model: str) -> None:
    """The model (its instance restarted if it had to) and another model answer as before."""
    assert _infer(http, model, 4) == [4]
    assert _infer(http, model, 5) == [5]
    four = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(four)
    assert http.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist() == (four * 2).tolist()


def _failed(model: str, cause: str) -> tuple[str, str]:
    return "500", f"python model '{model}' instance '{model}_0_0': {cause}"


@pytest.mark.parametrize("faulty", ["torn_frame"], indirect=True)
def test_results_that_do_not_decode_fail_their_request_only(
    http: httpclient.InferenceServerClient, faulty: str
) -> None:
    status, message = _infer(http, faulty, -1)
    assert (status, message.split(" (")[0]) == _failed(faulty, "its results do not decode")
    assert "frame cut short" in message
    _serves_on(http, faulty)


@pytest.mark.parametrize(
    ("faulty", "cause"),
    [
        ("short_head", "it sent a frame that does not decode (frame cut short: 18 bytes wanted at 0 of 3)"),
        ("unknown_batch", "it answered batch 4294967295, which it was not running"),
        ("garbage_length", "bad message length -2 on the instance pipe"),
        ("stalls_mid_frame", f"it stopped in the middle of a message: no more bytes for {STALL_SECONDS:g} s"),
        ("closes_pipe", "its pipe to the server closed while it still ran"),
        (
            "unencodable_always",
            "results it could not encode, nor their errors (RuntimeError: injected)",
        ),
    ],
    indirect=["faulty"],
)
def test_a_stream_that_cannot_be_trusted_ends_the_process_and_fails_its_requests(
    http: httpclient.InferenceServerClient, faulty: str, cause: str
) -> None:
    assert _infer(http, faulty, -1) == _failed(faulty, cause + RESTARTS)
    _serves_on(http, faulty)


@pytest.mark.parametrize(
    ("faulty", "code"), [("dies_mid_frame", 3), ("dies_leaving_child", 5)], indirect=["faulty"]
)
def test_an_instance_dying_fails_its_request_even_in_the_middle_of_a_frame_or_with_a_child_on_its_pipe(
    http: httpclient.InferenceServerClient, faulty: str, code: int
) -> None:
    cause = f"its process exited unexpectedly (exit code {code}); the instance restarts for later requests"
    assert _infer(http, faulty, -1) == _failed(faulty, cause)
    _serves_on(http, faulty)


@pytest.mark.parametrize("faulty", ["unencodable"], indirect=True)
def test_results_that_cannot_be_encoded_fail_their_request_only(
    http: httpclient.InferenceServerClient, faulty: str
) -> None:
    cause = (
        "internal error: a bug in tcli, not in the model (RuntimeError: injected); the server log has "
        "the traceback"
    )
    assert _infer(http, faulty, -1) == _failed(faulty, cause)
    _serves_on(http, faulty)


@pytest.mark.parametrize("faulty", ["none"], indirect=True)
def test_a_batch_that_cannot_be_sent_or_does_not_decode_in_the_instance_fails_its_request(
    http: httpclient.InferenceServerClient, faulty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    encode_exec = hop_frames.encode_exec

    def torn(batch_id: int, requests: list[InferenceRequest], senders: bool, placement: Any) -> bytes:
        if requests[0].id == "unsendable":
            raise RuntimeError("injected")
        frame = encode_exec(batch_id, requests, senders, placement)
        if requests[0].id == "torn":
            return frame[:-2]
        return frame[:3] if requests[0].id == "headless" else frame

    monkeypatch.setattr(hop_frames, "encode_exec", torn)
    status, message = _infer(http, faulty, 1, "unsendable")
    cause = (
        "internal error: a bug in tcli, not in the model (RuntimeError: injected); the server log has "
        "the traceback"
    )
    assert (status, message) == _failed(faulty, cause)
    status, message = _infer(http, faulty, 1, "torn")
    assert (status, message.split(" (")[0]) == _failed(faulty, "a batch it was sent does not decode")
    assert "frame cut short" in message
    assert _infer(http, faulty, 1) == [1]  # the same process: nothing else was lost
    status, message = _infer(http, faulty, 1, "headless")
    assert (status, message.split(" (")[0]) == _failed(faulty, "a batch it was sent does not decode")
    assert message.endswith(RESTARTS)
    _serves_on(http, faulty)


@pytest.mark.parametrize("faulty", ["none"], indirect=True)
def test_an_output_the_shared_memory_cannot_grow_for_fails_its_request_only(
    http: httpclient.InferenceServerClient, faulty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    new_segment = shm._new_segment

    def full(size: int, *rest: Any) -> Any:  # /dev/shm has no room for a segment over 2 MiB
        if size > 2 * 2**20:
            raise OSError(errno.ENOSPC, "No space left on device")
        return new_segment(size, *rest)

    monkeypatch.setattr(shm, "_new_segment", full)
    status, message = _infer(http, faulty, 2**20)  # 4 MiB of INT32
    # Triton's words (its qa's growth_error looks for them), with the system's reason
    assert status == "500" and "Failed to increase the shared memory pool size" in message, message
    assert "No space left on device" in message
    assert _infer(http, faulty, 2000) == [7] * 2000  # the ring it had still carries what fits
    monkeypatch.setattr(shm, "_new_segment", new_segment)  # room again: it grows
    assert _infer(http, faulty, 2**20) == [7] * 2**20
    _serves_on(http, faulty)


@pytest.mark.parametrize("faulty", ["none"], indirect=True)
def test_an_answer_the_instance_cannot_read_fails_the_request_waiting_for_it(
    http: httpclient.InferenceServerClient, faulty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    send_answer = process_host._Process._send_answer

    def garbled(self: Any, message: tuple[Any, ...]) -> None:  # the answer to a larger ring, garbled
        if message[0] == "answer" and isinstance(message[3], str):
            self._answers.send_bytes(b"\x80garbage")
            return
        send_answer(self, message)

    monkeypatch.setattr(process_host._Process, "_send_answer", garbled)
    status, message = _infer(http, faulty, 2**20)  # its output needs a larger ring
    assert (status, message.split(" (")[0]) == _failed(faulty, "an answer from the server does not unpickle")
    monkeypatch.setattr(process_host._Process, "_send_answer", send_answer)
    assert _infer(http, faulty, 2**20) == [7] * 2**20
    _serves_on(http, faulty)


@pytest.mark.parametrize("faulty", ["unpicklable_call"], indirect=True)
def test_a_call_the_server_cannot_unpickle_is_answered(
    http: httpclient.InferenceServerClient, faulty: str
) -> None:
    status, message = _infer(http, faulty, -1)
    assert status == "500"
    called = (
        f"python model '{faulty}' instance '{faulty}_0_0': its call 'bls' does not unpickle in the server ("
    )
    assert called in message, message
    _serves_on(http, faulty)


@pytest.mark.parametrize(
    ("stream_model", "cause"),
    [
        ("torn_frame", "a response it sent does not decode (frame cut short"),
        ("dies_mid_frame", "its process exited unexpectedly (exit code 3)"),
        ("stalls_mid_frame", "it stopped in the middle of a message"),
    ],
    indirect=["stream_model"],
)
def test_a_decoupled_stream_ends_with_the_error(server: Server, stream_model: str, cause: str) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    client.start_stream(callback=lambda result, error: answers.put((result, error)))

    def streamed(value: int) -> list[Any]:
        """OUT values, then "final" or the error's message."""
        client.async_stream_infer(stream_model, _inputs(grpcclient, value), enable_empty_final_response=True)
        seen: list[Any] = []
        while True:
            result, error = answers.get(timeout=DEADLINE)
            if error is not None:  # ends the request, as in Triton
                return [*seen, error.message()]
            response = result.get_response()
            if response.outputs:
                seen += result.as_numpy("OUT").tolist()
            if response.parameters["triton_final_response"].bool_param:
                return [*seen, "final"]

    try:
        first, *rest = streamed(-1)
        assert first == -1
        (error,) = rest
        assert error.startswith(f"python model '{stream_model}' instance '{stream_model}_0_0': {cause}")
        assert streamed(4) == [4, 8, "final"]
    finally:
        client.stop_stream(cancel_requests=True)  # a request left open would block a plain stop
        client.close()


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("torn_frame", "its results do not decode (frame cut short"),
        ("garbage_length", "bad message length -2 on the instance pipe" + RESTARTS),
        ("stalls_mid_frame", "it stopped in the middle of a message"),
    ],
)
def test_faults_are_answered_when_a_worker_thread_reads_the_process(
    tmp_path: Path, fault: str, cause: str
) -> None:
    # below the front ends (no event loop: the instance's own reader thread reads its process)
    name = f"faulty_{fault}"
    (tmp_path / name / "1").mkdir(parents=True)
    (tmp_path / name / "1" / "model.py").write_text(MODEL)
    text = CONFIG.format(name=name, fault=fault, extra='default_model_filename: "model.py"')
    config = text_format.Parse(text, mc.ModelConfig())
    config.instance_group[0].name = name  # as the repository completes it: instance '<name>_0'
    runner = ModelRunner(ModelContext(config, tmp_path / name, 1, tmp_path), ModelStats(name, "1"))
    runner.load()

    def result(value: int) -> InferenceResponse | TritonError:
        data = np.array([value], np.int32)
        done = threading.Event()
        answers: list[InferenceResponse | TritonError] = []
        request = InferenceRequest(name, "", "", [Tensor("IN", "INT32", data.shape, data)], [], {})
        runner.submit(request, lambda answer: (answers.append(answer), done.set()))
        assert done.wait(DEADLINE), "no answer"
        return answers[0]

    try:
        failed = result(-1)
        assert isinstance(failed, TritonError) and failed.code == ErrorCode.INTERNAL
        assert failed.message.startswith(f"python model '{name}' instance '{name}_0': {cause}")
        for value in (4, 5):
            served = result(value)
            assert isinstance(served, InferenceResponse) and served.outputs[0].data.tolist() == [value]
    finally:  # bounded: a runner whose batch was never answered would wait on it
        stopping = threading.Thread(target=runner.stop, args=(10,), daemon=True)
        stopping.start()
        stopping.join(DEADLINE)


@pytest.mark.parametrize("faulty", ["none"], indirect=True)
def test_an_instance_outlives_its_zygote(http: httpclient.InferenceServerClient, faulty: str) -> None:
    # a group's SIGTERM ends the zygote (multiprocessing's forkserver) first: the instances it forked
    # still run, and are not taken for dead (their exit is watched, not the zygote's word on it)
    assert _infer(http, faulty, 4) == [4]
    (zygote,) = [p for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())]
    zygote.terminate()
    wait_until(lambda: zygote.status() == psutil.STATUS_ZOMBIE, "the zygote's end")
    assert _infer(http, faulty, 5) == [5]
    assert _infer(http, faulty, -1) == [-1]
