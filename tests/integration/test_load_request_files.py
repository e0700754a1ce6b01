"""A model uploaded with its load request (`file:<path>` parameters and a `config`), as Triton's
model repository extension allows in explicit mode: served from a fresh temporary folder that is
removed when the model is unloaded or loaded again from the repository; paths stay inside that
folder; the same through tritonclient's HTTP and gRPC `load_model(..., files=...)` and through
`pb_utils.load_model(..., files=...)` from a python model, in the server and in an instance process.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.repository.manager import ControlMode
from tests.integration.conftest import REPO, RunningServer, start_server

ADD_SUB_SOURCE = (REPO / "add_sub" / "1" / "model.py").read_bytes()
ADD_SUB_CONFIG = json.dumps(
    {
        "backend": "python",
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ],
    }
)
# a python model that uploads `add_sub`'s files as the model its input names, and answers whether
# that model is ready afterwards
LOADER_SOURCE = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.files = json.loads(args["model_config"])["parameters"]

    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            source = self.files["SOURCE"]["string_value"].encode()
            config = self.files["CONFIG"]["string_value"]
            pb_utils.load_model(name, config=config, files={"file:1/model.py": source})
            ready = np.array([pb_utils.is_model_ready(name)], dtype=np.bool_)
            pb_utils.unload_model(name)
            gone = np.array([not pb_utils.is_model_ready(name)], dtype=np.bool_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("READY", ready), pb_utils.Tensor("GONE", gone),
            ]))
        return responses
"""


def _loader_config(name: str, in_process: bool) -> str:
    escaped = {
        k: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        for k, v in {"SOURCE": ADD_SUB_SOURCE.decode(), "CONFIG": ADD_SUB_CONFIG}.items()
    }
    return f"""
name: "{name}"
backend: "python"
input [ {{ name: "NAME" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "READY" data_type: TYPE_BOOL dims: [ 1 ] }}, {{ name: "GONE" data_type: TYPE_BOOL dims: [ 1 ] }} ]
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "{"false" if in_process else "true"}" }} }}
parameters {{ key: "SOURCE" value {{ string_value: "{escaped["SOURCE"]}" }} }}
parameters {{ key: "CONFIG" value {{ string_value: "{escaped["CONFIG"]}" }} }}
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("load_files")
    repository = root / "repository"
    shutil.copytree(REPO / "add_sub", repository / "add_sub", ignore=shutil.ignore_patterns("__pycache__"))
    for name, in_process in (("loader_thread", True), ("loader_process", False)):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(LOADER_SOURCE)
        (repository / name / "config.pbtxt").write_text(_loader_config(name, in_process))
    return repository


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(repository, ControlMode.EXPLICIT, ["add_sub", "loader_thread", "loader_process"])
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def grpc_server(repository: Path) -> Iterator[RunningServer]:
    running = start_server(repository, ControlMode.EXPLICIT, protocol="grpc")
    try:
        yield running
    finally:
        running.stop()


def _add_sub(client: httpclient.InferenceServerClient, model: str) -> np.ndarray:
    a = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer(model, inputs)
    return result.as_numpy("OUTPUT0")


def _served_from(server: RunningServer, model: str) -> Path:
    return server.manager.models()[model].path


def test_a_model_uploaded_with_its_load_request_is_served_then_removed(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    client.load_model("uploaded", config=ADD_SUB_CONFIG, files={"file:1/model.py": ADD_SUB_SOURCE})
    assert client.is_model_ready("uploaded")
    np.testing.assert_array_equal(_add_sub(client, "uploaded"), np.arange(4, dtype=np.float32) * 2)
    folder = _served_from(server, "uploaded")
    assert (folder / "1" / "model.py").read_bytes() == ADD_SUB_SOURCE
    assert not folder.is_relative_to(server.repository)  # the repository itself is left alone

    client.unload_model("uploaded")
    assert not folder.exists()
    assert not client.is_model_ready("uploaded")
    assert "uploaded" not in [row["name"] for row in client.get_model_repository_index()]


def test_files_replace_the_repository_folder_until_a_plain_load(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    client.load_model("add_sub", config=ADD_SUB_CONFIG, files={"file:2/model.py": ADD_SUB_SOURCE})
    assert client.is_model_ready("add_sub", "2") and not client.is_model_ready("add_sub", "1")
    uploaded = _served_from(server, "add_sub")

    client.load_model("add_sub")  # from the repository again: the uploaded folder goes
    assert client.is_model_ready("add_sub", "1")
    assert _served_from(server, "add_sub") == server.repository / "add_sub"
    assert not uploaded.exists()


@pytest.mark.parametrize(
    "key", ["file:../evil.py", "file:/tmp/tcli-evil.py", "file:1/../../evil.py", "file:"]
)
def test_a_path_outside_the_model_folder_is_refused(server: RunningServer, key: str) -> None:
    body = {"parameters": {"config": ADD_SUB_CONFIG, "file:1/model.py": "", key: "cHJpbnQoMSk="}}
    before = sorted(p.name for p in server.repository.parent.iterdir())
    answer = httpx.post(f"{server.base_url}/v2/repository/models/climber/load", json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert f"load parameter '{key}': the path must stay inside the model's folder" in error
    assert error.startswith(
        "failed to load 'climber', failed to poll from model repository"
    )  # Triton's words
    assert sorted(p.name for p in server.repository.parent.iterdir()) == before
    assert not Path("/tmp/tcli-evil.py").exists()
    assert httpclient.InferenceServerClient(server.url).is_server_live()


def test_files_without_a_config_or_not_in_base64_are_refused(server: RunningServer) -> None:
    url = f"{server.base_url}/v2/repository/models/half/load"
    encoded = base64.b64encode(ADD_SUB_SOURCE).decode()
    answer = httpx.post(url, json={"parameters": {"file:1/model.py": encoded}})
    assert answer.status_code == 400
    assert "'file:' parameters need a 'config' parameter" in answer.json()["error"]

    answer = httpx.post(
        url, json={"parameters": {"config": ADD_SUB_CONFIG, "file:1/model.py": "not base64!"}}
    )
    assert answer.status_code == 400
    assert (
        answer.json()["error"]
        == "Unable to parse 'file:1/model.py': the file's content must be base64-encoded"
    )


def test_upload_over_grpc(grpc_server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(grpc_server.url)
    client.load_model("uploaded_grpc", config=ADD_SUB_CONFIG, files={"file:1/model.py": ADD_SUB_SOURCE})
    assert client.is_model_ready("uploaded_grpc")
    folder = _served_from(grpc_server, "uploaded_grpc")
    client.unload_model("uploaded_grpc")
    assert not folder.exists()
    with pytest.raises(InferenceServerException, match="path must stay inside"):
        client.load_model("x", config=ADD_SUB_CONFIG, files={"file:../x.py": b""})


@pytest.mark.parametrize("loader", ["loader_thread", "loader_process"])
def test_a_python_model_uploads_a_model(server: RunningServer, loader: str) -> None:
    client = httpclient.InferenceServerClient(server.url)
    name = httpclient.InferInput("NAME", [1], "BYTES")
    name.set_data_from_numpy(np.array([f"made_by_{loader}".encode()], dtype=np.object_))
    result = client.infer(loader, [name])
    assert result.as_numpy("READY").tolist() == [True]
    assert result.as_numpy("GONE").tolist() == [True]
