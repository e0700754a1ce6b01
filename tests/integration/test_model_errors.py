"""A python model whose execute() raises, served by `tcli serve` as a user runs it and, beside it, by
real Triton 2.51 over the same repository: the client gets the model's error in Triton's words (the
instance's name, the exception, the model's frames), over HTTP and gRPC alike; the server's log holds
its traceback once, naming the model, the instance and the request id; and the next request is
served."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.serve_process import ServeProcess
from tests.reference import RealTriton, find_reference_triton

CONFIG = """
name: "raiser"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

MODEL = """
import triton_python_backend_utils as pb_utils


def check(value):
    if value < 0:
        raise ValueError("negative input\\nsecond line")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            check(data[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data * 2)]))
        return responses
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    (root / "raiser" / "1").mkdir(parents=True)
    (root / "raiser" / "config.pbtxt").write_text(CONFIG)
    (root / "raiser" / "1" / "model.py").write_text(MODEL)
    return root


@pytest.fixture(scope="module")
def tcli(repository: Path) -> Iterator[ServeProcess]:
    served = ServeProcess(str(repository))
    yield served
    served.stop()


def post_infer(address: str, value: float, request_id: str) -> tuple[int, dict[str, object]]:
    body = {
        "id": request_id,
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [2], "data": [value, 2]}],
    }
    request = urllib.request.Request(
        f"http://{address}/v2/models/raiser/infer",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def grpc_error(address: str, request_id: str) -> tuple[str, str]:
    client = grpcclient.InferenceServerClient(address)
    tensor = grpcclient.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.array([-1, 2], np.float32))
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("raiser", [tensor], request_id=request_id)
    finally:
        client.close()
    return str(caught.value.status()), str(caught.value.message())


def expected_error(repository: Path) -> str:
    model_file = repository / "raiser" / "1" / "model.py"
    lines = MODEL.splitlines()
    raise_line = lines.index('        raise ValueError("negative input\\nsecond line")') + 1
    check_line = lines.index("            check(data[0])") + 1
    return (
        "Failed to process the request(s) for model 'raiser_0_0', message: ValueError: negative input\n"
        f"second line\n\nAt:\n  {model_file}({raise_line}): check\n  {model_file}({check_line}): execute\n"
    )


def test_model_error_answered_logged_once_and_the_next_request_served(
    tcli: ServeProcess, repository: Path
) -> None:
    status, body = post_infer(tcli.http_url, -1.0, "req-http")
    assert (status, body) == (500, {"error": expected_error(repository)})
    assert grpc_error(tcli.grpc_url, "req-grpc") == ("StatusCode.INTERNAL", expected_error(repository))
    status, body = post_infer(tcli.http_url, 1.0, "req-next")
    assert status == 200 and body["outputs"] == [
        {"name": "OUT", "datatype": "FP32", "shape": [2], "data": [2.0, 4.0]}
    ]
    log = tcli.output()
    for request_id in ("req-http", "req-grpc"):
        (line,) = [line for line in log.splitlines() if f"'{request_id}'" in line]
        assert re.search(
            rf"model 'raiser' version 1 instance 'raiser_0_0' failed request\(s\) '{request_id}'", line
        )
    assert log.count("Traceback (most recent call last)") == 2  # one per failed request, none for the rest
    assert "tcli bug" not in log


def test_real_triton_answers_the_same(tcli: ServeProcess, repository: Path) -> None:
    binary = find_reference_triton()
    if binary is None:
        pytest.skip("real Triton not installed (../shared/reference/setup-triton.sh)")
    with RealTriton(binary, repository) as triton:
        reference = (
            post_infer(triton.http_address, -1.0, "req-http"),
            grpc_error(triton.grpc_address, "req-grpc"),
        )
    assert reference == (
        (500, {"error": expected_error(repository)}),
        ("StatusCode.INTERNAL", expected_error(repository)),
    )
    ours = post_infer(tcli.http_url, -1.0, "req-http"), grpc_error(tcli.grpc_url, "req-grpc")
    assert ours == reference
