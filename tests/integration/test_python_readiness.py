"""A python model's own readiness: Triton's python backend (releases after 2.51; qa
L0_backend_python/model_readiness) calls the model's optional `is_model_ready(self)` when a client asks
whether the model is ready. True: ready; False, an exception or anything but a bool: not ready (HTTP
400); a coroutine is awaited. Inference goes on either way, the server stays ready, and a model
without the method is ready. In the server's thread and in an instance process, over real
tritonclient HTTP and raw HTTP; tests wait on answers, never on fixed sleeps."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from server.repository.manager import ControlMode
from tests.integration.conftest import RunningServer, start_server

PROCESS = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "true" } }\n'
IO = """
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
# IN is echoed; it also sets what is_model_ready() answers next (1: ready, 0: not), so a probe is
# seen to ask the model each time
TOGGLE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready = True

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            self.ready = bool(value[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
%s"""
ANSWERS = {
    "toggles": "\n    def is_model_ready(self):\n        return self.ready\n",
    "raises": "\n    def is_model_ready(self):\n        raise RuntimeError('the database is away')\n",
    "says_yes_in_words": "\n    def is_model_ready(self):\n        return 'ready'\n",
    "awaits": "\n    async def is_model_ready(self):\n        return self.ready\n",
    "has_none": "",
}
MODELS = {
    **{name: (body, "") for name, body in ANSWERS.items()},
    "toggles_process": (ANSWERS["toggles"], PROCESS),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("readiness")
    for name, (method, extra) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(TOGGLE % method)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{IO}{extra}')
    running = start_server(Path(root), ControlMode.EXPLICIT, list(MODELS))
    try:
        yield running
    finally:
        running.stop()


def infer(client: httpclient.InferenceServerClient, model: str, value: int) -> int:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return int(client.infer(model, [tensor]).as_numpy("OUT")[0])


def status(server: RunningServer, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize("model", ["toggles", "toggles_process", "awaits"])
def test_the_model_says_whether_it_is_ready(server: RunningServer, model: str) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert client.is_model_ready(model)
    assert infer(client, model, 0) == 0  # is_model_ready() answers False from now on
    assert not client.is_model_ready(model)
    assert status(server, f"/v2/models/{model}/ready") == 400
    assert status(server, f"/v2/models/{model}/versions/1/ready") == 400
    assert client.is_server_ready()  # the server's own readiness is not the model's
    assert infer(client, model, 1) == 1  # inference goes on while it says not ready
    assert client.is_model_ready(model)
    assert status(server, f"/v2/models/{model}/ready") == 200


@pytest.mark.parametrize("model", ["raises", "says_yes_in_words"])
def test_an_exception_or_a_non_bool_means_not_ready(server: RunningServer, model: str) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert not client.is_model_ready(model)
    assert infer(client, model, 5) == 5
    assert client.is_model_ready("has_none")  # a model without is_model_ready() is ready


def test_a_model_without_the_method_is_ready(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert infer(client, "has_none", 0) == 0
    assert client.is_model_ready("has_none")
