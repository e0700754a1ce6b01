"""`tcli.frontend`, tcli's `tritonfrontend`: the KServe HTTP and gRPC front ends and the metrics server
started on an in-process server as Triton's package starts them, answering tritonclient and a
Prometheus scrape; its Options checked when made; a second start, a taken port and options of the
wrong kind refused with tritonserver's classes and Triton's texts; the server stopping the front ends
still running on it."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import tcli.inprocess as tritonserver
from tcli.frontend import KServeGrpc, KServeHttp, Metrics, OptionsError
from tests.integration.conftest import link_repository


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
