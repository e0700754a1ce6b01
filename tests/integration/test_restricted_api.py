"""Restricted APIs (tritonserver --http-restricted-api / --grpc-restricted-protocol) on a real tcli
server, both gRPC implementations: every endpoint and RPC of a restricted group answers Triton's 403
(HTTP) or UNAVAILABLE (gRPC) without its header and serves with it, as tritonclient sees it with
`headers=`; an open group and the metrics port serve without; the flags work and fail on the
`tcli serve` command line. Texts and codes checked against real Triton 2.51 in
test_restricted_reference.py."""

from __future__ import annotations

import contextlib
import json
import queue
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.protocol.restricted import parse_grpc_restricted_protocol, parse_http_restricted_api
from server.repository.manager import ControlMode
from tests.cli.conftest import run_tcli
from tests.integration.conftest import link_repository
from tests.integration.restricted_calls import (
    GROUPS,
    GRPC_CALLS,
    HTTP_CALLS,
    HTTP_WRONG_METHOD,
    GrpcCall,
    HttpCall,
    grpc_call,
    http_call,
)
from tests.integration.serve_process import ServeProcess

OPEN = "logging"  # the one group left open
RESTRICTED = [group for group in GROUPS if group != OPEN]


def header(group: str) -> str:
    return "X-Infer-Key" if group == "inference" else f"{group}-key"


HTTP_SPECS = [f"{group}:{header(group)}={group}-value" for group in RESTRICTED]
GRPC_SPECS = [f"{group}:{group}-key={group}-value" for group in RESTRICTED]


def start(repository: Path, implementation: str, restricted: bool) -> Server:
    settings = ServerSettings(
        [repository],
        ControlMode.EXPLICIT,
        load_models=["add_sub"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        allow_client_shm=True,
        grpc_implementation=implementation,
        exit_timeout_secs=10,
    )
    if restricted:
        settings.http_restricted_api = parse_http_restricted_api(HTTP_SPECS)
        settings.grpc_restricted_protocol = parse_grpc_restricted_protocol(GRPC_SPECS)
    return Server(settings).start()


@pytest.fixture(scope="module", params=["native", "grpcio"])
def servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """(every group but logging restricted, nothing restricted) on the gRPC implementation of the param."""
    repository = link_repository(tmp_path_factory.mktemp("repo") / "models", ["add_sub"])
    restricted = start(repository, request.param, True)
    try:
        unrestricted = start(repository, request.param, False)
        try:
            yield restricted, unrestricted
        finally:
            unrestricted.stop()
    finally:
        restricted.stop()


def http_address(server: Server) -> str:
    return f"127.0.0.1:{server.http_port}"


def grpc_address(server: Server) -> str:
    return f"127.0.0.1:{server.grpc_port}"


# HTTP ------------------------------------------------------------------------------------------------
RESTRICTED_HTTP = [call for call in HTTP_CALLS + HTTP_WRONG_METHOD if call.group != OPEN]


@pytest.mark.parametrize("call", RESTRICTED_HTTP, ids=lambda c: f"{c.method} {c.path}")
def test_an_http_request_without_its_groups_header_is_refused(
    servers: tuple[Server, Server], call: HttpCall
) -> None:
    address = http_address(servers[0])
    other = "health" if call.group != "health" else "metadata"
    for headers in ({}, {header(call.group): "wrong"}, {header(other): f"{other}-value"}):
        answer = http_call(address, call, headers)
        assert answer.status == 403
        assert answer.content_type == "text/plain"
        expected = f"This API is restricted, expecting header '{header(call.group)}'"
        assert json.loads(answer.body) == {"error": expected}


@pytest.mark.parametrize("call", HTTP_CALLS, ids=lambda c: f"{c.method} {c.path}")
def test_an_http_request_with_its_groups_header_is_served(
    servers: tuple[Server, Server], call: HttpCall
) -> None:
    restricted, unrestricted = servers
    headers = {header(call.group).lower(): f"{call.group}-value"}  # the name in any case
    served = http_call(http_address(restricted), call, headers)
    assert served.status == http_call(http_address(unrestricted), call).status
    if call.group == OPEN:  # an open group needs nothing
        assert http_call(http_address(restricted), call).status == served.status


def test_tritonclient_http_infers_with_the_header_on_the_fast_path(servers: tuple[Server, Server]) -> None:
    client = httpclient.InferenceServerClient(http_address(servers[0]))
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    for _ in range(2):  # keep-alive requests: each one is checked
        with pytest.raises(InferenceServerException) as refused:
            client.infer("add_sub", inputs)
        assert refused.value.status() == "403"
        assert refused.value.message() == "This API is restricted, expecting header 'X-Infer-Key'"
        result = client.infer("add_sub", inputs, headers={"x-infer-key": "inference-value"})
        assert result.as_numpy("OUTPUT0").tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(InferenceServerException, match="expecting header 'X-Infer-Key'"):
        client.infer("add_sub", inputs, headers={"X-Infer-Key": "INFERENCE-VALUE"})  # the value is exact
    assert client.get_server_metadata(headers={"metadata-key": "metadata-value"})["name"] == "triton"
    assert client.get_log_settings()["log_info"] in (True, False)  # the open group


def test_the_metrics_port_is_not_restricted(servers: tuple[Server, Server]) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{servers[0].metrics_port}/metrics", timeout=30) as answer:
        assert answer.status == 200


# gRPC ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", GRPC_CALLS, ids=lambda c: c.rpc)
def test_a_grpc_call_needs_its_groups_metadata(servers: tuple[Server, Server], call: GrpcCall) -> None:
    restricted, unrestricted = servers
    key = f"triton-grpc-protocol-{call.group}-key"
    open_answer = grpc_call(grpc_address(unrestricted), call)
    served = grpc_call(grpc_address(restricted), call, {key: f"{call.group}-value"})
    assert served == open_answer
    for metadata in ({}, {key: "wrong"}, {f"{call.group}-key": f"{call.group}-value"}):
        answer = grpc_call(grpc_address(restricted), call, metadata)
        if call.group == OPEN:
            assert answer == open_answer
        else:
            expected = f"This protocol is restricted, expecting header '{key}'"
            assert (answer.code, answer.details) == ("UNAVAILABLE", expected)


def test_tritonclient_grpc_infers_and_streams_with_the_header(servers: tuple[Server, Server]) -> None:
    client = grpcclient.InferenceServerClient(grpc_address(servers[0]))
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
    key = {"triton-grpc-protocol-inference-key": "inference-value"}
    with pytest.raises(InferenceServerException) as refused:
        client.infer("add_sub", inputs)
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert "This protocol is restricted, expecting header 'triton-grpc-protocol-inference-key'" in str(
        refused.value
    )
    assert client.infer("add_sub", inputs, headers=key).as_numpy("OUTPUT1").tolist() == [-1.0, 0.0, 1.0, 2.0]

    for headers, expect_error in ((None, True), (key, False)):
        answers: queue.Queue[Any] = queue.Queue()
        client.start_stream(lambda result, error, to=answers: to.put((result, error)), headers=headers)
        try:
            # a stream without the metadata is refused before any request is read, as in Triton: the
            # error may reach the callback before this request is sent
            with contextlib.suppress(InferenceServerException):
                client.async_stream_infer("add_sub", inputs)
            result, error = answers.get(timeout=30)
        finally:
            client.stop_stream()
        if expect_error:
            assert error is not None and "expecting header 'triton-grpc-protocol-inference-key'" in str(error)
        else:
            assert error is None and result.as_numpy("OUTPUT0").tolist() == [1.0, 2.0, 3.0, 4.0]
    assert client.get_log_settings().settings["log_info"].bool_param in (True, False)  # the open group
    client.close()


# the command line --------------------------------------------------------------------------------------
def test_tcli_serve_takes_the_flags_in_both_forms(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["add_sub"])
    server = ServeProcess(
        str(repository),
        "--http-restricted-api",
        "inference,model-repository:Admin-Key=s3cret",
        "--http-restricted-api=health:probe=1",
        "--grpc-restricted-protocol",
        "inference:Admin-Key=s3cret",
    )
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        with pytest.raises(
            InferenceServerException, match="This API is restricted, expecting header 'Admin-Key'"
        ):
            http.get_model_repository_index()
        assert http.get_model_repository_index(headers={"admin-key": "s3cret"})[0]["name"] == "add_sub"
        assert http.is_server_live(headers={"probe": "1"})
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(
            InferenceServerException, match="expecting header 'triton-grpc-protocol-Admin-Key'"
        ):
            grpc.infer("add_sub", [])
        assert grpc.is_server_live()  # health is restricted on HTTP only
        grpc.close()
        http.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
        # a key with capitals can never arrive over gRPC (Triton refuses every call then): said at start
        assert "write the key in lower case" in server.output()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--http-restricted-api=inference",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got inference",
        ),
        ("--http-restricted-api=infer:k=v", "unknown restricted api 'infer'"),
        ("--grpc-restricted-protocol=healthy:k=v", "unknown restricted protocol 'healthy'"),
    ],
)
def test_a_bad_spec_stops_tcli_serve_with_one_line(tmp_path: Path, flag: str, message: str) -> None:
    result = run_tcli(
        "serve", str(tmp_path), flag, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_group_restricted_twice_stops_tcli_serve(tmp_path: Path) -> None:
    result = run_tcli(
        "serve",
        str(tmp_path),
        "--grpc-restricted-protocol=health,trace:a=1",
        "--grpc-restricted-protocol=trace:b=2",
    )
    assert result.returncode == 1
    assert "restricted protocol 'trace' can not be specified in multiple config groups" in result.stderr
