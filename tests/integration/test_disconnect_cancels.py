"""A client that goes away while its request waits in a model's queue cancels it: the request leaves
the queue unexecuted, the request already executing finishes, and the server goes on serving. Over
HTTP (the client closes its connection) and gRPC (the client resets its stream), on both gRPC
transports.

The model executes one request at a time, writes each request's value to a file as it starts, and
holds until the test creates a release file: A runs, B waits behind it, B's client goes, C queues
behind B; released, the model must have executed A and C, never B."""

from __future__ import annotations

import contextlib
import json
import socket
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb

from server.app import Server, ServerSettings
from server.frontends.grpc import GRPC_IMPLEMENTATIONS
from tests.integration.test_grpc_native_h2 import RawGrpc, framed
from tests.waiting import wait_until

WAIT = 30.0  # failure timeout; never reached when things work
INFER = "/inference.GRPCInferenceService/ModelInfer"

CONFIG = """
name: "blocker"
backend: "python"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
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
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            with open(os.path.join(FOLDER, "executed"), "a") as out:
                out.write("%d\\n" % int(value.reshape(-1)[0]))
            for _ in range(6000):  # a minute at most: a test that never releases still ends
                if os.path.exists(os.path.join(FOLDER, "release")):
                    break
                time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""


@dataclass
class Served:
    server: Server
    folder: Path

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.server.http_port}"

    def executed(self) -> list[int]:
        path = self.folder / "executed"
        return [int(line) for line in path.read_text().split()] if path.exists() else []

    def pending(self) -> int:
        model = self.server.manager.models()["blocker"]
        return sum(runner.scheduler.pending() for runner in model.runners())

    @contextlib.contextmanager
    def blocking(self) -> Iterator[None]:
        """The model holds each request until `release`; released anyway when the test ends."""
        for name in ("executed", "release"):
            (self.folder / name).unlink(missing_ok=True)
        try:
            yield
        finally:
            self.release()
            wait_until(lambda: self.pending() == 0, "the queue to empty", timeout=WAIT)

    def release(self) -> None:
        (self.folder / "release").write_text("go")


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("cancel")
    folder = root / "state"
    folder.mkdir()
    model = root / "models" / "blocker"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(textwrap.dedent(MODEL.format(folder=str(folder))))
    settings = ServerSettings(
        [root / "models"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        grpc_implementation=request.param,
        exit_timeout_secs=10,
    )
    server = Server(settings).start()
    try:
        yield Served(server, folder)
    finally:
        (folder / "release").write_text("go")  # nothing stays blocked past the test
        server.stop()


def infer_json(value: int) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "VALUE", "datatype": "INT32", "shape": [1], "data": [value]}]}
    ).encode()


def http_infer_in_thread(served: Served, value: int, results: dict[int, Any]) -> threading.Thread:
    def run() -> None:
        client = httpclient.InferenceServerClient(served.http_url, network_timeout=WAIT)
        try:
            tensor = httpclient.InferInput("VALUE", [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
            results[value] = int(client.infer("blocker", [tensor]).as_numpy("OUT")[0])
        except Exception as exc:  # reported by the test's assertion on `results`
            results[value] = exc
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def execution_count(served: Served) -> int:
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        stats = client.get_inference_statistics("blocker")["model_stats"][0]
    finally:
        client.close()
    return int(stats["execution_count"])


def server_side_open(port: int, client_port: int) -> bool:
    """Whether the server still holds its end of the connection from `client_port`."""
    for connection in psutil.Process().net_connections("tcp"):
        remote = connection.raddr
        if connection.laddr and connection.laddr.port == port and remote and remote.port == client_port:
            return True
    return False


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_http_client_that_disconnects_cancels_its_queued_request(served: Served, framing: str) -> None:
    """Both ways an inference request is answered: the fast path (a Content-Length body) and ASGI
    (a chunked one)."""
    with served.blocking():
        before = execution_count(served)
        results: dict[int, Any] = {}
        running = http_infer_in_thread(served, 1, results)  # A
        wait_until(lambda: served.executed() == [1], "A to start executing", timeout=WAIT)
        port = served.server.http_port
        assert port is not None
        b = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        body = infer_json(2)
        head = b"POST /v2/models/blocker/infer HTTP/1.1\r\nHost: tcli\r\nContent-Type: application/json\r\n"
        if framing == "chunked":
            b.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        else:
            b.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: served.pending() == 1, "B to wait in the queue", timeout=WAIT)
        b_port = b.getsockname()[1]
        b.close()  # B's client gives up
        wait_until(
            lambda: not server_side_open(port, b_port), "the server to see B's client go", timeout=WAIT
        )
        queued = http_infer_in_thread(served, 3, results)  # C, behind B in the queue
        wait_until(lambda: served.pending() == 2, "C to wait behind B", timeout=WAIT)
        served.release()
        running.join(WAIT)
        queued.join(WAIT)
        assert results == {1: 1, 3: 3}
        assert served.executed() == [1, 3]  # B never ran
        assert execution_count(served) - before == 2


def grpc_request(value: int) -> bytes:
    request = pb.ModelInferRequest(model_name="blocker")
    request.inputs.add(name="VALUE", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
    return framed(request.SerializeToString())


def test_a_grpc_client_that_resets_its_stream_cancels_its_queued_request(served: Served) -> None:
    with served.blocking():
        before = execution_count(served)
        port = served.server.grpc_port
        assert port is not None
        client = RawGrpc(port)
        try:
            a = client.start(INFER)
            client.send(a, grpc_request(1), end=True)
            wait_until(lambda: served.executed() == [1], "A to start executing", timeout=WAIT)
            b = client.start(INFER)
            client.send(b, grpc_request(2), end=True)
            wait_until(lambda: served.pending() == 1, "B to wait in the queue", timeout=WAIT)
            client.conn.reset_stream(b)  # B's client cancels its call
            client.flush()
            client.sync()  # the server has read the reset
            c = client.start(INFER)
            client.send(c, grpc_request(3), end=True)
            wait_until(lambda: served.pending() == 2, "C to wait behind B", timeout=WAIT)
            served.release()
            answers = {value: client.wait(stream) for value, stream in ((1, a), (3, c))}
        finally:
            client.close()
        for value, answer in answers.items():
            assert answer.status == 0, answer.details
            reply = pb.ModelInferResponse.FromString(answer.messages()[0])
            assert np.frombuffer(reply.raw_output_contents[0], dtype=np.int32).tolist() == [value]
        assert served.executed() == [1, 3]  # B never ran
        assert execution_count(served) - before == 2
