"""gRPC limits (--grpc-max-message-size, --grpc-max-concurrent-streams, --grpc-read-timeout): an
over-size message answered RESOURCE_EXHAUSTED as grpcio answers it (both transports, through
tritonclient); SETTINGS_MAX_CONCURRENT_STREAMS advertised and a stream beyond it refused with
RST_STREAM REFUSED_STREAM (RFC 9113 5.1.2, driven through `h2`); a connection that stalls inside a
frame, or never sends its preface, closed after the timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import h2.events
import h2.settings
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.frontends.grpc import GRPC_IMPLEMENTATIONS
from tests.integration.conftest import link_repository
from tests.integration.test_grpc_native_h2 import RawGrpc

WAIT = 30.0  # failure timeout; never reached when things work
MAX_MESSAGE = 64 * 1024
STREAMS = 4
READ_TIMEOUT = 1.0
SLACK = 10.0
INFER = "/inference.GRPCInferenceService/ModelInfer"
REFUSED_STREAM = 0x7


def start(repository_root: object, implementation: str) -> Server:
    settings = ServerSettings(
        [link_repository(repository_root / "models", ["simple_identity"])],  # type: ignore[operator]
        host="127.0.0.1",
        grpc_port=0,
        allow_http=False,
        allow_metrics=False,
        grpc_implementation=implementation,
        grpc_max_message_size=MAX_MESSAGE,
        grpc_max_concurrent_streams=STREAMS,
        grpc_read_timeout=READ_TIMEOUT,
        exit_timeout_secs=10,
    )
    return Server(settings).start()


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("grpc-limits"), request.param)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("grpc-native-limits"), "native")
    try:
        yield server
    finally:
        server.stop()


def identity_inputs(size: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"x" * size]], dtype=object))
    return [tensor]


def test_a_message_over_the_limit_is_resource_exhausted(served: Server) -> None:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc_port}") as client:
        small = client.infer("simple_identity", identity_inputs(1000))
        assert small.as_numpy("OUTPUT0")[0][0] == b"x" * 1000
        with pytest.raises(InferenceServerException) as raised:
            client.infer("simple_identity", identity_inputs(2 * MAX_MESSAGE))
        assert raised.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert "Received message larger than max (" in raised.value.message()
        assert f"vs. {MAX_MESSAGE})" in raised.value.message()
        # the connection and the server go on
        assert client.infer("simple_identity", identity_inputs(10)).as_numpy("OUTPUT0")[0][0] == b"x" * 10


def test_streams_beyond_the_limit_are_refused(native: Server) -> None:
    assert native.grpc_port is not None
    client = RawGrpc(native.grpc_port)
    try:
        # opened before the server's SETTINGS are read, as a client that ignores them would
        streams = [client.start(INFER) for _ in range(STREAMS + 1)]
        deadline = time.monotonic() + WAIT
        settings: dict[int, int] = {}
        while client.answers[streams[-1]].reset is None and time.monotonic() < deadline:
            client.pump()
            for event in client.events:
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    settings.update({key: value.new_value for key, value in event.changed_settings.items()})
        assert settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == STREAMS
        assert client.answers[streams[-1]].reset == REFUSED_STREAM
        assert all(client.answers[stream].reset is None for stream in streams[:-1])
        client.sync()  # the refused stream left the others alone, and the connection serves on
        assert all(client.answers[stream].reset is None for stream in streams[:-1])
    finally:
        client.close()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (what it sends first, a GOAWAY, is read)."""
    sock.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def test_a_connection_stalled_inside_a_frame_is_closed(native: Server) -> None:
    assert native.grpc_port is not None
    with socket.create_connection(("127.0.0.1", native.grpc_port), timeout=WAIT) as sock:
        sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x06\x04\x00\x00\x00\x00\x00"
        )  # half a SETTINGS
        assert closed_within(sock, READ_TIMEOUT + SLACK)


def test_a_connection_that_never_sends_its_preface_is_closed(native: Server) -> None:
    assert native.grpc_port is not None
    with socket.create_connection(("127.0.0.1", native.grpc_port), timeout=WAIT) as sock:
        began = time.monotonic()
        assert closed_within(sock, READ_TIMEOUT + SLACK)
        assert time.monotonic() - began >= READ_TIMEOUT - 0.1


def test_an_idle_connection_between_frames_stays_open(native: Server) -> None:
    """Only a frame begun and not finished counts: a client with nothing to send keeps its connection."""
    assert native.grpc_port is not None
    client = RawGrpc(native.grpc_port)
    try:
        client.sync()
        assert not closed_within(client.sock, READ_TIMEOUT * 3)
        client.sync()
    finally:
        client.close()
