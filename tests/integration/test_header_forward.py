"""--http-header-forward-pattern and --grpc-header-forward-pattern, as Triton's qa/L0_parameters uses
them: headers (gRPC metadata) whose name the pattern matches anywhere reach the model as string
request parameters; others do not; without a pattern none do. Real tritonclient over both protocols,
the server started as a user starts it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.cli.conftest import run_tcli
from tests.integration.serve_process import ServeProcess

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# answers with the request's parameters, as JSON
MODEL = """
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


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("forward") / "models"
    (root / "echo" / "1").mkdir(parents=True)
    (root / "echo" / "config.pbtxt").write_text(CONFIG)
    (root / "echo" / "1" / "model.py").write_text(MODEL)
    return root


@pytest.fixture(scope="module")
def served(repository: Path) -> Iterator[ServeProcess]:
    server = ServeProcess(
        str(repository), "--http-header-forward-pattern", "^my-", "--grpc-header-forward-pattern", "tenant"
    )
    try:
        yield server
    finally:
        server.stop()


def _http(url: str, headers: dict[str, str]) -> dict[str, object]:
    client = httpclient.InferenceServerClient(url)
    x = httpclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.zeros(1, np.float32))
    (text,) = client.infer("echo", [x], headers=headers).as_numpy("PARAMETERS").tolist()
    return json.loads(text)  # type: ignore[no-any-return]


def _grpc(url: str, headers: dict[str, str]) -> dict[str, object]:
    client = grpcclient.InferenceServerClient(url)
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.zeros(1, np.float32))
    (text,) = client.infer("echo", [x], headers=headers).as_numpy("PARAMETERS").tolist()
    return json.loads(text)  # type: ignore[no-any-return]


def test_matching_http_headers_reach_the_model(served: ServeProcess) -> None:
    parameters = _http(served.http_url, {"my-tenant": "acme", "my-user": "ada", "other": "no"})
    assert parameters.get("my-tenant") == "acme" and parameters.get("my-user") == "ada"
    assert "other" not in parameters


def test_matching_grpc_metadata_reaches_the_model(served: ServeProcess) -> None:
    parameters = _grpc(served.grpc_url, {"x-tenant-id": "acme", "my-user": "ada"})
    assert parameters.get("x-tenant-id") == "acme"  # the pattern matches anywhere in the key
    assert "my-user" not in parameters  # the HTTP pattern is not gRPC's


def test_without_a_pattern_no_header_is_forwarded(repository: Path) -> None:
    server = ServeProcess(str(repository))
    try:
        assert "my-tenant" not in _http(server.http_url, {"my-tenant": "acme"})
        assert "tenant" not in _grpc(server.grpc_url, {"tenant": "acme"})
    finally:
        server.stop()


def test_a_pattern_that_is_not_a_regular_expression_is_one_line(repository: Path) -> None:
    done = run_tcli("serve", str(repository), "--http-header-forward-pattern", "(", "--http-port", "0")
    assert done.returncode == 1
    assert (
        done.stderr.count("\n") == 1
        and "--http-header-forward-pattern '(' is not a regular expression" in done.stderr
    )


def test_command_line_patterns_ignore_case_unless_turned_off(repository: Path) -> None:
    # as Triton's command line: header names are case-insensitive, `(?-i)` makes a pattern exact
    server = ServeProcess(
        str(repository),
        "--http-header-forward-pattern",
        "^MY-",
        "--grpc-header-forward-pattern",
        "(?-i)TENANT",
    )
    try:
        assert _http(server.http_url, {"my-user": "ada"}).get("my-user") == "ada"
        assert "tenant" not in _grpc(server.grpc_url, {"tenant": "acme"})  # gRPC sends names lowercased
    finally:
        server.stop()
