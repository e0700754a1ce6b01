"""Backends users add, served by a real `tcli serve` to real tritonclient clients: a Python-based
backend in --backend-directory serving two models (one instance in its own process, one in the server
process) with the args Triton gives such a backend, `runtime` choosing the backend's Python file, a
backend an installed package announces through a `tcli.backends` entry point, and a backend found
nowhere, whose load fails naming every place searched, in the same words `tcli repo validate` uses."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.serve_process import TCLI, ServeProcess
from tests.waiting import wait_until

# A Python-based backend: one model.py for every model that names it. It fills in its tensors
# (auto_complete_config, as Triton runs it for such backends) and answers X * FACTOR, with what
# initialize() was given and where it ran.
SCALER = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if not config.as_dict()["input"]:
            config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [-1]})
            config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]})
            config.add_output({"name": "SEEN", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = float(config["parameters"]["FACTOR"]["string_value"])
        seen = {key: args[key] for key in args if key != "model_config"}
        seen.update(file=__file__, pid=os.getpid(), runtime=config["runtime"])
        self.seen = json.dumps(seen)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            seen = np.array([self.seen.encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", x * self.factor), pb_utils.Tensor("SEEN", seen)]
                )
            )
        return responses
"""

# An installed package's backend: the interface of server/backends/base.py, loaded per instance,
# executed per batch, unloaded once (it leaves a file behind to show it was)
NEGATE = """
from pathlib import Path

from server.backends.base import TensorModel


class NegateModel(TensorModel):
    def __init__(self, context, instance):
        self.unloaded = Path(context.config.parameters["UNLOADED"].string_value) / instance.name

    def execute(self, inputs, output_names):
        return {"Y": -inputs["X"]}

    def unload(self):
        self.unloaded.touch()
"""

SCALED = 'backend: "{backend}"\n{runtime}max_batch_size: 0\nparameters {{ key: "FACTOR" value {{ string_value: "{factor}" }} }}\n'
IN_SERVER = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }\n'
TENSORS = """max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
LOADED = ["double", "triple", "torch_runtime", "second_file", "negated"]


def write_model(repo: Path, name: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)  # a Python-based backend needs no file in the version
    (repo / name / "config.pbtxt").write_text(config)


def install_package(site: Path) -> None:
    """What `pip install` of a package declaring [project.entry-points."tcli.backends"] leaves on the
    path: its module and a dist-info folder naming the entry point."""
    (site / "acme_backends").mkdir(parents=True)
    (site / "acme_backends" / "__init__.py").write_text(NEGATE)
    dist = site / "acme_backends-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-backends\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tcli.backends]\nnegate = acme_backends:NegateModel\n")


class Setup:
    def __init__(self, root: Path) -> None:
        self.backends = root / "backends"
        self.repo = root / "repo"
        self.site = root / "site"
        self.unloaded = root / "unloaded"
        self.unloaded.mkdir()
        (self.backends / "scaler").mkdir(parents=True)
        (self.backends / "scaler" / "model.py").write_text(SCALER)
        (self.backends / "scaler" / "second.py").write_text(
            SCALER.replace("x * self.factor", "x * self.factor + 1")
        )
        (self.backends / "pytorch").mkdir()  # Triton's PyTorch 2 runtime lives so: backends/pytorch/model.py
        (self.backends / "pytorch" / "model.py").write_text(SCALER)
        write_model(self.repo, "double", SCALED.format(backend="scaler", runtime="", factor=2))
        write_model(self.repo, "triple", SCALED.format(backend="scaler", runtime="", factor=3) + IN_SERVER)
        runtime = 'runtime: "model.py"\n'
        write_model(self.repo, "torch_runtime", SCALED.format(backend="pytorch", runtime=runtime, factor=5))
        runtime = 'runtime: "second.py"\n'
        write_model(self.repo, "second_file", SCALED.format(backend="scaler", runtime=runtime, factor=2))
        unloaded = f'parameters {{ key: "UNLOADED" value {{ string_value: "{self.unloaded}" }} }}\n'
        write_model(self.repo, "negated", 'backend: "negate"\n' + TENSORS + unloaded)
        write_model(self.repo, "mystery", 'backend: "mystery"\n' + TENSORS)
        write_model(self.repo, "escaping", 'backend: "scaler"\nruntime: "../scaler/model.py"\n' + TENSORS)
        install_package(self.site)
        self.env = {"PYTHONPATH": os.pathsep.join([str(self.site), os.environ.get("PYTHONPATH", "")])}

    def missing(self, backend: str, model: str) -> str:
        return (
            f"unable to find backend library for backend '{backend}', try specifying runtime on the model "
            "configuration. tcli searched: "
            f"built-in backends (onnxruntime, pytorch, python, tensorrt), {self.backends / backend / 'model.py'}, "
            "entry points in group 'tcli.backends'"
        )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    return Setup(tmp_path_factory.mktemp("added"))


@pytest.fixture(scope="module")
def served(setup: Setup) -> Iterator[ServeProcess]:
    flags = ["--model-repository", str(setup.repo), "--backend-directory", str(setup.backends)]
    flags += ["--model-control-mode", "explicit", *(f"--load-model={name}" for name in LOADED)]
    server = ServeProcess(*flags, env=setup.env)
    try:
        yield server
    finally:
        server.stop()


def infer(server: ServeProcess, model: str, x: list[float], protocol: str = "http") -> dict[str, Any]:
    client: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    tensor = client.InferInput("X", [len(x)], "FP32")
    tensor.set_data_from_numpy(np.array(x, np.float32))
    result = client.InferenceServerClient(url).infer(model, [tensor])
    answer: dict[str, Any] = {"Y": result.as_numpy("Y").tolist()}
    seen = result.as_numpy("SEEN")
    if seen is not None:
        answer["seen"] = json.loads(seen[0])
    return answer


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_python_based_backend_serves_two_models_in_a_process_and_in_the_server(
    setup: Setup, served: ServeProcess, protocol: str
) -> None:
    double = infer(served, "double", [1.0, 2.5], protocol)
    triple = infer(served, "triple", [1.0, 2.5], protocol)
    assert double["Y"] == [2.0, 5.0] and triple["Y"] == [3.0, 7.5]
    file = str(setup.backends / "scaler" / "model.py")
    for name, answer in (("double", double), ("triple", triple)):
        seen = answer["seen"]
        # the args Triton's python backend gives a Python-based backend: the model's own folder
        assert {k: v for k, v in seen.items() if k != "pid"} == {
            "model_instance_kind": "CPU",
            "model_instance_name": f"{name}_0",
            "model_instance_device_id": "0",
            "model_repository": str(setup.repo / name),
            "model_version": "1",
            "model_name": name,
            "file": file,
            "runtime": "model.py",
        }
    server = psutil.Process(served.process.pid)
    assert double["seen"]["pid"] in [p.pid for p in server.children(recursive=True)]  # its own process
    assert triple["seen"]["pid"] == served.process.pid  # TCLI_INSTANCE_PROCESS "false": the server's

    # the backend's auto_complete_config filled in the tensors, and the config says runtime as Triton's
    config = httpclient.InferenceServerClient(served.http_url).get_model_config("double")
    assert [t["name"] for t in config["input"] + config["output"]] == ["X", "Y", "SEEN"]
    assert (config["runtime"], config["default_model_filename"]) == ("model.py", "")


def test_runtime_chooses_the_python_file_of_the_backend_folder(setup: Setup, served: ServeProcess) -> None:
    # runtime: "model.py" asks for backends/pytorch/model.py instead of the built-in pytorch backend
    torch_runtime = infer(served, "torch_runtime", [1.0])
    assert torch_runtime["Y"] == [5.0]
    assert torch_runtime["seen"]["file"] == str(setup.backends / "pytorch" / "model.py")
    # another file of the backend's folder (tcli's; Triton takes only model.py)
    second = infer(served, "second_file", [1.0], "grpc")
    assert second["Y"] == [3.0]
    assert (second["seen"]["file"], second["seen"]["runtime"]) == (
        str(setup.backends / "scaler" / "second.py"),
        "second.py",
    )


def test_an_installed_package_serves_a_model_through_its_entry_point(
    setup: Setup, served: ServeProcess
) -> None:
    assert infer(served, "negated", [1.0, -2.0])["Y"] == [-1.0, 2.0]
    assert infer(served, "negated", [4.0], "grpc")["Y"] == [-4.0]
    client = httpclient.InferenceServerClient(served.http_url)
    client.unload_model("negated")
    wait_until(lambda: (setup.unloaded / "negated_0").exists(), "the backend's unload()")
    client.load_model("negated")
    assert infer(served, "negated", [3.0])["Y"] == [-3.0]


def test_a_backend_found_nowhere_fails_its_load_naming_every_place_searched(
    setup: Setup, served: ServeProcess
) -> None:
    reason = setup.missing("mystery", "mystery")
    expected = (
        f"load failed for model 'mystery': version 1 is at UNAVAILABLE state: Invalid argument: {reason};"
    )
    with pytest.raises(InferenceServerException) as http_error:
        httpclient.InferenceServerClient(served.http_url).load_model("mystery")
    assert http_error.value.message().strip() == expected
    assert http_error.value.status() == "400"
    with pytest.raises(InferenceServerException) as grpc_error:
        grpcclient.InferenceServerClient(served.grpc_url).load_model("mystery")
    assert grpc_error.value.message().strip() == expected
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    index = httpclient.InferenceServerClient(served.http_url).get_model_repository_index()
    [row] = [row for row in index if row["name"] == "mystery"]
    assert row["reason"] == f"Invalid argument: {reason}"

    # a runtime naming a file outside the backend's folder is refused in Triton's words
    with pytest.raises(InferenceServerException, match="escapes backend directory"):
        httpclient.InferenceServerClient(served.http_url).load_model("escaping")


def test_repo_validate_looks_in_the_same_places_and_says_the_same(setup: Setup) -> None:
    env = {**os.environ, **setup.env}
    command = [str(TCLI), "repo", "validate", str(setup.repo), "--format", "json"]
    result = subprocess.run(
        [*command, "--backend-directory", str(setup.backends)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr
    report = {m["name"]: m for m in json.loads(result.stdout)["models"]}
    assert {name: report[name]["status"] for name in LOADED} == dict.fromkeys(LOADED, "ok")
    [problem] = report["mystery"]["problems"]
    assert problem["message"] == setup.missing("mystery", "mystery")
    assert "entry point group 'tcli.backends'" in problem["fix"]
    assert problem["line"] == 1  # backend: "mystery"
    [problem] = report["escaping"]["problems"]
    assert "escapes backend directory" in problem["message"] and problem["line"] == 2

    # without the flag tcli looks where tritonserver does, and finds no scaler there
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    report = {m["name"]: m for m in json.loads(result.stdout)["models"]}
    [problem] = report["double"]["problems"]
    assert problem["message"] == setup.missing("scaler", "double").replace(
        str(setup.backends), "/opt/tritonserver/backends"
    )
