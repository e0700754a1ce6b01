"""`tcli.frontend`, tcli's `tritonfrontend`: the KServe HTTP and gRPC front ends and the metrics server
started on an in-process server as Triton's package starts them, answering tritonclient and a
Prometheus scrape; its Options checked when made; a second start, a taken port and options of the
wrong kind refused with tritonserver's classes and Triton's texts; the server stopping the front ends
still running on it; Triton 2.51's way to make one (`KServeHttp.Server(server=..., options=...)`) beside
the later one; stop() ending a gRPC call in flight CANCELLED, as tritonfrontend's does; a model
answering numpy bytes_ through both front ends, within a deadline (it once left the call waiting
forever); headers the forward patterns match reaching the model over both."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tcli.inprocess as tritonserver
from tcli.frontend import KServeGrpc, KServeHttp, Metrics, OptionsError
from tests.integration.conftest import link_repository
from tests.repo_builder import add_model
from tests.waiting import wait_until

WAIT = 30.0  # seconds a client waits for an answer before the test fails


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tritonserver.Server]:
    repository = link_repository(tmp_path_factory.mktemp("frontend") / "models", ["add_sub"])
    with tritonserver.Server(model_repository=str(repository)) as started:
        yield started


def _inputs(module: object) -> list[object]:
    tensors = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]  # type: ignore[attr-defined]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    return tensors


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_http_grpc_and_metrics_on_an_in_process_server(server: tritonserver.Server) -> None:
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=0))
    grpc = KServeGrpc(server, KServeGrpc.Options(address="127.0.0.1", port=0))
    metrics = Metrics(server, Metrics.Options(address="127.0.0.1", port=0))
    with http, grpc, metrics:
        assert http.port and grpc.port and metrics.port
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http.port}")
        assert client.is_server_ready()
        result = client.infer("add_sub", _inputs(httpclient))  # type: ignore[arg-type]
        assert result.as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]
        client.close()
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
        assert gclient.infer("add_sub", _inputs(grpcclient)).as_numpy("OUTPUT1").tolist() == [0, 0, 0, 0]  # type: ignore[arg-type]
        gclient.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=30) as answer:
            text = answer.read().decode()
        assert 'nv_inference_count{model="add_sub",version="1"} 2' in text
        ports = [http.port, grpc.port, metrics.port]
    assert not any(_listening(port) for port in ports)  # leaving `with` stopped each
    with pytest.raises(tritonserver.UnavailableError, match=r"HTTP server is not running\."):
        http.stop()


def test_a_second_start_and_a_taken_port_are_refused_with_tritons_texts(server: tritonserver.Server) -> None:
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=0))
    http.start()
    try:
        with pytest.raises(tritonserver.AlreadyExistsError, match=r"HTTP server is already running\."):
            http.start()
        taken = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=http.port or 0))
        with pytest.raises(
            tritonserver.UnavailableError, match=f"Socket '127.0.0.1:{http.port}' already in use"
        ):
            taken.start()
    finally:
        http.stop()


def test_options_are_checked_when_made(server: tritonserver.Server) -> None:
    for make in (
        lambda: KServeHttp.Options(port=-15),
        lambda: KServeHttp.Options(thread_count=0),
        lambda: KServeHttp.Options(header_forward_pattern=10),  # type: ignore[arg-type]
        lambda: KServeGrpc.Options(keepalive_time_ms=-1),
        lambda: KServeGrpc.Options(infer_allocation_pool_size="big pool"),  # type: ignore[arg-type]
        lambda: KServeGrpc.Options(server_key=10),  # type: ignore[arg-type]
        lambda: Metrics.Options(thread_count="ten"),  # type: ignore[arg-type]
    ):
        with pytest.raises(OptionsError):
            make()
    assert isinstance(OptionsError("x"), ValueError)  # what tritonfrontend's (pydantic) options raise
    KServeGrpc.Options(infer_compression_level=KServeGrpc.Grpc_compression_level.HIGH, reuse_port=True)
    with pytest.raises(
        tritonserver.InvalidArgumentError, match="options argument must be of type KServeHttp"
    ):
        KServeHttp(server, {"port": 8001})  # type: ignore[arg-type]


def test_grpc_over_tls(server: tritonserver.Server, tmp_path: Path) -> None:
    from tests.integration.certificates import make_certificates

    files = make_certificates(tmp_path)
    options = KServeGrpc.Options(
        address="127.0.0.1",
        port=0,
        use_ssl=True,
        server_cert=str(files.server_cert),
        server_key=str(files.server_key),
    )
    with KServeGrpc(server, options) as grpc:
        client = grpcclient.InferenceServerClient(
            f"localhost:{grpc.port}", ssl=True, root_certificates=str(files.ca)
        )
        assert client.is_server_live()
        client.close()
    missing = KServeGrpc.Options(
        address="127.0.0.1", port=0, use_ssl=True, server_cert=str(tmp_path / "nope")
    )
    with pytest.raises(tritonserver.InvalidArgumentError, match="nope"):
        KServeGrpc(server, missing).start()


def test_stopping_the_server_stops_its_front_ends(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["add_sub"])
    server = tritonserver.Server(model_repository=str(repository)).start(wait_until_ready=True)
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=0))
    http.start()
    port = http.port
    assert port is not None and _listening(port)
    server.stop()
    assert not _listening(port)
    http.stop()  # after its server, as Triton's tests stop them: nothing left to do


def test_triton_251s_server_shape_makes_the_same_front_ends(server: tritonserver.Server) -> None:
    # tritonfrontend 2.51 (r24.10): KServeHttp.Server(server=..., options=...); r24.11 on: KServeHttp(...)
    for frontend in (KServeHttp, KServeGrpc, Metrics):
        assert frontend.Server is frontend
        with pytest.raises(tritonserver.InvalidArgumentError, match="options argument must be of type"):
            frontend.Server(server, {"port": 8001})
    http = KServeHttp.Server(server=server, options=KServeHttp.Options(address="127.0.0.1", port=0))
    grpc = KServeGrpc.Server(server=server, options=KServeGrpc.Options(address="127.0.0.1", port=0))
    with http, grpc:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http.port}")
        assert client.infer("add_sub", _inputs(httpclient)).as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]  # type: ignore[arg-type]
        client.close()
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
        assert gclient.is_server_ready()
        gclient.close()


SLOW_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = os.environ["TCLI_TEST_MARKER"]

    def execute(self, requests):
        open(self.marker, "w").close()  # the test stops the front end once a call is in here
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(r.is_cancelled() for r in requests):
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(1, np.float32))]) for _ in requests]
"""

BYTES_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            # numpy's fixed-width bytes_, as Triton's qa identity model answers
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data.astype(np.bytes_))]))
        return responses
"""


ECHO_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("PARAMETERS", np.array([r.parameters().encode()], dtype=object))]
            )
            for r in requests
        ]
"""


def _config(name: str, dtype: str, inp: str, out: str, out_type: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\n'
        f'input [{{ name: "{inp}" data_type: {dtype} dims: [ 1 ] }}]\n'
        f'output [{{ name: "{out}" data_type: {out_type or dtype} dims: [ 1 ] }}]\n'
    )


@pytest.fixture(scope="module")
def own_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[tritonserver.Server, Path]]:
    import os

    root = tmp_path_factory.mktemp("frontend_models")
    marker = root / "in_execute"
    add_model(root / "models", "slow", _config("slow", "TYPE_FP32", "IN", "OUT"), {"1/model.py": SLOW_MODEL})
    add_model(
        root / "models",
        "bytes_identity",
        _config("bytes_identity", "TYPE_STRING", "INPUT0", "OUTPUT0"),
        {"1/model.py": BYTES_MODEL},
    )
    echo = _config("echo", "TYPE_FP32", "X", "PARAMETERS", out_type="TYPE_STRING")
    add_model(root / "models", "echo", echo, {"1/model.py": ECHO_MODEL})
    os.environ["TCLI_TEST_MARKER"] = str(marker)  # instance processes inherit it
    try:
        with tritonserver.Server(model_repository=str(root / "models"), exit_timeout=5) as started:
            yield started, marker
    finally:
        del os.environ["TCLI_TEST_MARKER"]


def test_grpc_stop_ends_a_call_in_flight_cancelled(own_models: tuple[tritonserver.Server, Path]) -> None:
    server, marker = own_models
    grpc = KServeGrpc(server, KServeGrpc.Options(address="127.0.0.1", port=0))
    grpc.start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
    answers: list[object] = []
    done = threading.Event()

    def callback(result: object, error: object) -> None:
        answers.append(error or result)
        done.set()

    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    client.async_infer("slow", [tensor], callback, client_timeout=WAIT)
    wait_until(marker.exists, "the call to reach the model")
    grpc.stop()
    assert done.wait(WAIT), "the call in flight was never answered"
    (answer,) = answers
    assert isinstance(answer, InferenceServerException)
    assert "[StatusCode.CANCELLED] CANCELLED" in str(answer)  # what Triton's qa expects of tritonfrontend
    client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bytes_answer_through_the_front_ends(
    own_models: tuple[tritonserver.Server, Path], protocol: str
) -> None:
    server, _ = own_models
    frontend = KServeHttp if protocol == "http" else KServeGrpc
    module: Any = httpclient if protocol == "http" else grpcclient
    with frontend(server, frontend.Options(address="127.0.0.1", port=0)) as service:
        url = f"127.0.0.1:{service.port}"
        if protocol == "http":
            client = module.InferenceServerClient(url, network_timeout=WAIT)
            deadline: dict[str, float] = {}
        else:
            client, deadline = module.InferenceServerClient(url), {"client_timeout": WAIT}
        tensor = module.InferInput("INPUT0", [1], "BYTES")
        tensor.set_data_from_numpy(np.array(["testing"], dtype=object))
        result = client.infer("bytes_identity", [tensor], **deadline)
        assert result.as_numpy("OUTPUT0").tolist() == [b"testing"]
        client.close()


def test_matching_headers_reach_the_model_through_both_front_ends(
    own_models: tuple[tritonserver.Server, Path],
) -> None:
    server, _ = own_models
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=0, header_forward_pattern="^my-"))
    grpc = KServeGrpc(
        server, KServeGrpc.Options(address="127.0.0.1", port=0, forward_header_pattern="tenant")
    )
    with http, grpc:
        for module, port, headers, forwarded in (
            (httpclient, http.port, {"my-team": "a", "other": "b"}, {"my-team": "a"}),
            (grpcclient, grpc.port, {"x-tenant-id": "t1", "other": "b"}, {"x-tenant-id": "t1"}),
        ):
            client: Any = module.InferenceServerClient(f"127.0.0.1:{port}")
            tensor = module.InferInput("X", [1], "FP32")
            tensor.set_data_from_numpy(np.zeros(1, np.float32))
            result = client.infer("echo", [tensor], headers=headers)
            assert json.loads(result.as_numpy("PARAMETERS")[0]) == forwarded
            client.close()
    with pytest.raises(tritonserver.InvalidArgumentError, match="forward_header_pattern: not a regular"):
        KServeGrpc(server, KServeGrpc.Options(forward_header_pattern="("))
