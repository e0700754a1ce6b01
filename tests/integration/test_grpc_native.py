"""The native gRPC transport (server/frontends/grpc_native) as tritonclient's users meet it: compressed
requests, deadlines, many calls at once on one connection, error messages that need escaping,
unknown methods, a client that speaks no HTTP/2. Every test runs against both gRPC implementations
(native and grpcio), so grpcio shows what the right answer is.

Raw HTTP/2 (flow control, CONTINUATION, split messages, PING, GOAWAY) is in test_grpc_native_h2.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
from tritonclient.utils import InferenceServerException

from server.frontends.grpc import GRPC_IMPLEMENTATIONS
from server.repository.manager import ControlMode
from tests.integration.conftest import link_repository
from tests.integration.grpc_fixtures import RunningGrpcServer, start_grpc_server

WAIT = 30.0  # failure timeout; never reached when things work

# A default python model that answers once the file named by its input exists: calls that stay in
# flight exactly as long as a test needs, without sleeps.
GATE_CONFIG = """
name: "gate"
backend: "python"
max_batch_size: 0
input [ { name: "PATH" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OPENED" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
GATE_MODEL = """
import asyncio
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            path = pb_utils.get_input_tensor_by_name(request, "PATH").as_numpy().reshape(-1)[0].decode()
            for _ in range(6000):  # a minute at most, so that a test that fails to open it still ends
                if os.path.exists(path):
                    break
                await asyncio.sleep(0.01)
            opened = np.array([path.encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OPENED", opened)]))
        return responses
"""


def gate_repository(root: Path) -> Path:
    """add_sub, simple_identity and the `gate` model."""
    repository = link_repository(root, ["add_sub", "simple_identity"])
    (repository / "gate" / "1").mkdir(parents=True)
    (repository / "gate" / "config.pbtxt").write_text(GATE_CONFIG)
    (repository / "gate" / "1" / "model.py").write_text(GATE_MODEL)
    return repository


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def native_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGrpcServer]:
    repository = gate_repository(tmp_path_factory.mktemp("repo") / "models")
    server = start_grpc_server(repository, ControlMode.NONE, implementation=request.param)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def client(native_server: RunningGrpcServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(native_server.url) as client:
        yield client


def add_sub_inputs(a: np.ndarray, b: np.ndarray, module: object = grpcclient) -> list[object]:
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]  # type: ignore[attr-defined]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def gate_input(path: Path) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("PATH", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([str(path).encode()], dtype=object))
    return [tensor]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([4, 3, 2, 1], dtype=np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, b), compression_algorithm=algorithm)
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    big = np.array([b"z" * (3 * 2**20)], dtype=object)  # compresses to almost nothing, inflates to 3 MB
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    tensor.set_data_from_numpy(big.reshape(1, 1))
    echoed = client.infer("simple_identity", [tensor], compression_algorithm=algorithm)
    assert echoed.as_numpy("OUTPUT0")[0][0] == big[0]


def test_streaming_with_compression(native_server: RunningGrpcServer) -> None:
    answers: list[object] = []
    with grpcclient.InferenceServerClient(native_server.url) as client:
        client.start_stream(
            callback=lambda result, error: answers.append(error or result), compression_algorithm="gzip"
        )
        try:
            for value in range(3):
                a = np.full(4, value, dtype=np.float32)
                client.async_stream_infer("add_sub", add_sub_inputs(a, a), request_id=str(value))
        finally:
            client.stop_stream()  # waits for the answers of every request sent
    assert [answer.get_response().id for answer in answers] == ["0", "1", "2"]  # type: ignore[attr-defined]


def test_deadline_exceeded(
    client: grpcclient.InferenceServerClient, native_server: RunningGrpcServer, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("gate", gate_input(gate), client_timeout=0.3)
        assert str(caught.value.status()) == "StatusCode.DEADLINE_EXCEEDED"
    finally:
        gate.touch()
    assert client.infer("gate", gate_input(gate)).as_numpy("OPENED")[0] == str(gate).encode()


def test_many_calls_at_once_on_one_connection(native_server: RunningGrpcServer) -> None:
    async def run() -> list[list[float]]:
        async with grpcclient_aio.InferenceServerClient(native_server.url) as client:
            calls = []
            for value in range(64):
                a = np.full(4, value, dtype=np.float32)
                inputs = add_sub_inputs(a, np.ones(4, dtype=np.float32), grpcclient_aio)
                calls.append(client.infer("add_sub", inputs))
            results = await asyncio.gather(*calls)
            return [result.as_numpy("OUTPUT0").tolist() for result in results]

    assert asyncio.run(run()) == [[value + 1.0] * 4 for value in range(64)]


def test_error_messages_are_escaped_on_the_wire(client: grpcclient.InferenceServerClient) -> None:
    name = "nöpe 100%\n\t😀"
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata(name)
    assert str(caught.value.status()) == "StatusCode.NOT_FOUND"
    assert caught.value.message() == f"Request for unknown model: '{name}' is not found"


def test_unknown_methods_are_unimplemented(native_server: RunningGrpcServer) -> None:
    with grpc.insecure_channel(native_server.url) as channel:
        for method in (
            "/inference.GRPCInferenceService/Nope",
            "/other.Service/Call",
            "/grpc.health.v1.Health/Watch",
        ):
            with pytest.raises(grpc.RpcError) as caught:
                channel.unary_unary(method)(b"", timeout=WAIT)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=WAIT) == b"\x08\x01"


def test_a_client_speaking_http1_is_turned_away(
    native_server: RunningGrpcServer, client: grpcclient.InferenceServerClient
) -> None:
    with socket.create_connection(("127.0.0.1", native_server.port), timeout=WAIT) as raw:
        raw.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        while raw.recv(65536):  # whatever the server says, it closes the connection
            pass
    assert client.is_server_live()


def test_metadata_reaches_handlers_as_grpc_aio_gives_it(native_server: RunningGrpcServer) -> None:
    """The same handler on a native server and on a grpc.aio server sees the same invocation_metadata
    (custom keys, -bin values decoded, user-agent; no transport headers such as grpc-timeout)."""
    if native_server.server.settings.grpc_implementation != "native":
        pytest.skip("compares the native transport with grpc.aio directly")
    from server.frontends.grpc_native import serve_native

    async def echo(request: bytes, context: object) -> bytes:
        pairs = [(key, value) for key, value in context.invocation_metadata()]  # type: ignore[attr-defined]
        return repr(sorted(pairs)).encode()

    handlers = [
        grpc.method_handlers_generic_handler(
            "t.Echo", {"Metadata": grpc.unary_unary_rpc_method_handler(echo)}
        )
    ]

    async def start() -> tuple[object, object, int, int]:
        native = await serve_native(
            lambda table: None, _Frontend(), "127.0.0.1", 0, max_message_size=2**20, generic_handlers=handlers
        )
        reference = grpc.aio.server()
        reference.add_generic_rpc_handlers(handlers)
        port = reference.add_insecure_port("127.0.0.1:0")
        await reference.start()
        return native, reference, native.port, port

    def on_server_loop(coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, native_server.loop).result(WAIT)  # type: ignore[arg-type]

    native, reference, native_port, reference_port = on_server_loop(start())  # type: ignore[misc]
    metadata = [("x-plain", "some value"), ("x-raw-bin", b"\x00\xff\x10"), ("triton_grpc_error", "true")]
    try:
        seen = []
        for port in (native_port, reference_port):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/t.Echo/Metadata")
                seen.append(call(b"", metadata=metadata, timeout=WAIT, compression=grpc.Compression.Gzip))
        assert seen[0] == seen[1]
        assert b"'x-raw-bin', b'\\x00\\xff\\x10'" in seen[0] and b"grpc-timeout" not in seen[0]
    finally:
        on_server_loop(native.shutdown())  # type: ignore[attr-defined]
        on_server_loop(reference.stop(None))  # type: ignore[attr-defined]


class _Frontend:
    def close(self) -> None:
        pass
