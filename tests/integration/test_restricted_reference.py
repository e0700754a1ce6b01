"""Restricted APIs side by side with real Triton 2.51: the same --http-restricted-api and
--grpc-restricted-protocol flags, every endpoint and RPC of every group called without, with a wrong
and with the right header; status, content type and body (HTTP), code and details (gRPC) must be
Triton's. And the flag errors: tcli's line says what tritonserver says."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.protocol.restricted import parse_grpc_restricted_protocol, parse_http_restricted_api
from server.repository.manager import ControlMode
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
from tests.integration.serve_process import TCLI
from tests.reference import RealTriton, require_reference_triton

pytestmark = pytest.mark.reference
ADD_SUB = Path(__file__).resolve().parents[2] / "model_repository" / "add_sub"


def http_header(group: str) -> str:
    return "X-Infer-Key" if group == "inference" else f"{group}-key"  # capitals: matched in any case


HTTP_SPECS = [f"{group}:{http_header(group)}={group}-value" for group in GROUPS]
GRPC_SPECS = [f"{group}:{group}-key={group}-value" for group in GROUPS]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealTriton, Server]]:
    binary = require_reference_triton()
    repository = tmp_path_factory.mktemp("restricted")
    shutil.copytree(ADD_SUB, repository / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    args = [
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        *(f"--http-restricted-api={spec}" for spec in HTTP_SPECS),
        *(f"--grpc-restricted-protocol={spec}" for spec in GRPC_SPECS),
    ]
    settings = ServerSettings(
        [repository],
        ControlMode.EXPLICIT,
        load_models=["add_sub"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        allow_client_shm=True,  # Triton 2.51's default
        exit_timeout_secs=10,
        http_restricted_api=parse_http_restricted_api(HTTP_SPECS),
        grpc_restricted_protocol=parse_grpc_restricted_protocol(GRPC_SPECS),
    )
    with RealTriton(binary, repository, args, probe_headers={"health-key": "health-value"}) as triton:
        tcli = Server(settings).start()
        try:
            yield triton, tcli
        finally:
            tcli.stop()


@pytest.mark.parametrize("call", HTTP_CALLS + HTTP_WRONG_METHOD, ids=lambda c: f"{c.method} {c.path}")
def test_http_answers_as_triton(servers: tuple[RealTriton, Server], call: HttpCall) -> None:
    triton, tcli = servers
    tcli_address = f"127.0.0.1:{tcli.http_port}"
    header = http_header(call.group)
    for headers in ({}, {header: "wrong"}, {header: f"{call.group}-VALUE"}):
        theirs, ours = http_call(triton.http_address, call, headers), http_call(tcli_address, call, headers)
        assert ours == theirs  # status, content type and body
    right = {header.lower(): f"{call.group}-value"}
    theirs, ours = http_call(triton.http_address, call, right), http_call(tcli_address, call, right)
    assert theirs.status != 403
    assert ours.status == theirs.status, (ours, theirs)


@pytest.mark.parametrize("call", GRPC_CALLS, ids=lambda c: c.rpc)
def test_grpc_answers_as_triton(servers: tuple[RealTriton, Server], call: GrpcCall) -> None:
    triton, tcli = servers
    tcli_address = f"127.0.0.1:{tcli.grpc_port}"
    key = f"triton-grpc-protocol-{call.group}-key"
    for metadata in ({}, {key: "wrong"}, {f"{call.group}-key": f"{call.group}-value"}):
        theirs, ours = grpc_call(triton.grpc_address, call, metadata), grpc_call(tcli_address, call, metadata)
        assert ours == theirs
        assert theirs.code == "UNAVAILABLE"
    right = {key: f"{call.group}-value"}
    theirs, ours = grpc_call(triton.grpc_address, call, right), grpc_call(tcli_address, call, right)
    assert theirs.code != "UNAVAILABLE"
    assert ours.code == theirs.code, (ours, theirs)


@pytest.mark.parametrize(
    "flags",
    [
        ["--http-restricted-api=model-reposit,health:k1=v1"],
        ["--http-restricted-api=health"],
        ["--http-restricted-api=health:k1"],
        ["--http-restricted-api=health:k1="],
        ["--http-restricted-api=health,,metadata:k=v"],
        [
            "--http-restricted-api=model-repository,health:k1=v1",
            "--http-restricted-api=metadata,health:k2=v2",
        ],
        ["--grpc-restricted-protocol=model-reposit:k1=v1"],
        ["--grpc-restricted-protocol=health:k1=v1", "--grpc-restricted-protocol=health:k2=v2"],
        ["--grpc-restricted-protocol=:k=v"],
    ],
)
def test_flag_errors_say_what_tritonserver_says(tmp_path: Path, flags: list[str]) -> None:
    binary = require_reference_triton()
    theirs = subprocess.run(
        [str(binary), f"--model-repository={tmp_path}", *flags], capture_output=True, text=True, timeout=60
    )
    # tritonserver prints its usage, then 'Bad option: "--flag".' and the reason on the next line
    reason = theirs.stderr.strip().splitlines()[-1].strip()
    ours = subprocess.run(
        [str(TCLI), "serve", str(tmp_path), *flags], capture_output=True, text=True, timeout=60
    )
    assert theirs.returncode == ours.returncode == 1
    assert reason in ours.stderr, (reason, ours.stderr)
    assert len(ours.stderr.strip().splitlines()) == 1 and "Traceback" not in ours.stderr
