"""Property-based fuzzing of everything a client can send (issue 14): HTTP JSON and binary-data
bodies, gRPC inference messages, model-control requests with config overrides, and config.pbtxt text.

A client's mistake is answered with a client error, never a 5xx; the server never crashes or hangs
(every request has a timeout, and the server must still answer ready afterwards) and its memory does
not grow with the requests. One `tcli serve` process serves every HTTP and gRPC case, so a crash
shows as a dead process and its memory is its own. The budget here is bounded (a few hundred cases
per target, derandomized so a failure reproduces); `python benchmarks/fuzz.py` runs the same
strategies for longer with a seed it prints.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from server.config.model_folder import scan_model
from server.repository.validation import validate_model
from tests.fuzzing import config_overrides, config_text, grpc_infer, http_infer
from tests.integration.conftest import REPO
from tests.integration.serve_process import ServeProcess

EXAMPLES = int(os.environ.get("TCLI_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="TCLI_FUZZ_SEED" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# server errors that are the server's to answer whatever the client sent (none expected here)
GRPC_SERVER_FAULTS = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
GRPC_SERVER_FAULTS |= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS}


# cases tried per target, written as JSON to $TCLI_FUZZ_REPORT for benchmarks/fuzz.py
CASES: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if path := os.environ.get("TCLI_FUZZ_REPORT"):
        Path(path).write_text(json.dumps(CASES))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repository = tmp_path_factory.mktemp("fuzz") / "models"
    repository.mkdir()
    for name in ("simple", "add_sub", "simple_identity"):
        shutil.copytree(REPO / name, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    server = ServeProcess(str(repository), "--model-control-mode", "explicit", "--load-model", "*")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http(served: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{served.http_url}", timeout=30) as client:
        yield client


def _still_serving(served: ServeProcess, http: httpx.Client) -> None:
    assert served.process.poll() is None, "the server died:\n" + served.output()[-3000:]
    assert http.get("/v2/health/ready").status_code == 200


def _client_error(response: httpx.Response) -> None:
    """200, or a 4xx with Triton's JSON error body."""
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        error = response.json()["error"]
        assert isinstance(error, str) and error


def test_http_infer_bodies(served: ServeProcess, http: httpx.Client) -> None:
    before = served.resident_mb()

    @FUZZ
    @given(http_infer())
    def check(case: tuple[str, dict[str, str], bytes]) -> None:
        CASES["http infer bodies"] += 1
        model, headers, body = case
        _client_error(http.post(f"/v2/models/{model}/infer", headers=headers, content=body))

    check()
    _still_serving(served, http)
    # a few hundred rejected requests leave nothing behind (allocator noise aside)
    assert served.resident_mb() < before + 64


def test_grpc_infer_messages(served: ServeProcess, http: httpx.Client) -> None:
    channel = grpc.insecure_channel(served.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

    @FUZZ
    @given(grpc_infer())
    def check(request: pb.ModelInferRequest) -> None:
        CASES["grpc infer messages"] += 1
        try:
            stub.ModelInfer(request, timeout=30)
        except grpc.RpcError as error:
            assert error.code() not in GRPC_SERVER_FAULTS, f"{error.code()}: {error.details()}"
            assert error.details()

    try:
        check()
    finally:
        channel.close()
    _still_serving(served, http)


def test_model_control_with_config_overrides(served: ServeProcess, http: httpx.Client) -> None:
    @FUZZ
    @given(config_overrides, st.sampled_from(["add_sub", "simple"]))
    def check(override: object, model: str) -> None:
        CASES["model control config overrides"] += 1
        body = {"parameters": {"config": json.dumps(override)}}
        response = http.post(f"/v2/repository/models/{model}/load", json=body)
        _client_error(response)

    check()
    # a rejected override leaves the loaded model serving; an accepted one may have replaced it
    for model in ("add_sub", "simple"):
        http.post(f"/v2/repository/models/{model}/load")  # back to the repository's own config
        assert http.get(f"/v2/models/{model}/ready").status_code == 200
    _still_serving(served, http)


@pytest.mark.parametrize("model", ["simple", "add_sub", "simple_sequence", "digits_ensemble"])
def test_config_text_is_checked_never_crashes(tmp_path: Path, model: str) -> None:
    """`tcli repo validate`'s check of any config text ends in a report, never an exception."""
    base = (REPO / model / "config.pbtxt").read_text()
    folder = tmp_path / model
    shutil.copytree(REPO / model, folder, ignore=shutil.ignore_patterns("__pycache__"))

    @settings(FUZZ, max_examples=max(EXAMPLES // 3, 10))
    @given(config_text(base))
    def check(text: str) -> None:
        CASES["config.pbtxt text"] += 1
        (folder / "config.pbtxt").write_text(text)
        report = validate_model(scan_model(folder, tmp_path))
        for problem in report.problems:
            assert problem.message  # every finding says what is wrong

    check()
