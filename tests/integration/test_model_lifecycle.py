"""Model lifecycle cases of Triton's qa/L0_lifecycle that tcli answered otherwise: a version policy
naming a version folder that is not there still serves the versions that are (Triton logs the
missing one), and a model's ensembles go when it is unloaded."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from server.repository.manager import ControlMode, ModelManager
from server.repository.models import ModelState

ROOT = Path(__file__).resolve().parents[2]

ENSEMBLE = """
name: "pair"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" }
} ] }
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "model_repository" / "add_sub", tmp_path / "add_sub")
    return tmp_path


@pytest.fixture
def manager(repo: Path) -> Iterator[ModelManager]:
    manager = ModelManager([repo], ControlMode.EXPLICIT)
    try:
        yield manager
    finally:
        manager.shutdown()


def _states(manager: ModelManager, name: str) -> dict[str, str]:
    return {
        row["version"]: row["state"] for row in manager.index() if row["name"] == name and "version" in row
    }


def test_a_policy_naming_a_missing_version_serves_the_versions_present(
    repo: Path, manager: ModelManager, caplog: pytest.LogCaptureFixture
) -> None:
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { specific { versions: [ 1, 3 ] } }\n")
    with caplog.at_level(logging.WARNING, logger="tcli"):
        manager.load("add_sub")
    assert _states(manager, "add_sub") == {"1": ModelState.READY}
    assert (
        "version 3 is specified for model 'add_sub', but the version directory is not present" in caplog.text
    )


def test_unloading_a_model_unloads_the_ensembles_that_use_it(repo: Path, manager: ModelManager) -> None:
    (repo / "pair" / "1").mkdir(parents=True)
    (repo / "pair" / "config.pbtxt").write_text(ENSEMBLE)
    manager.load("pair")  # loads add_sub with it
    assert _states(manager, "pair") == {"1": ModelState.READY}
    manager.unload("add_sub")
    assert _states(manager, "pair") == {"1": ModelState.UNAVAILABLE}
    assert _states(manager, "add_sub") == {"1": ModelState.UNAVAILABLE}


def test_an_override_may_give_a_repeated_field_as_one_object(repo: Path) -> None:
    import json

    import tritonclient.http as httpclient

    from server.app import Server, ServerSettings

    settings = ServerSettings([repo], ControlMode.EXPLICIT, host="127.0.0.1", http_port=0, allow_grpc=False)
    with Server(settings) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        config = {
            "backend": "python",
            "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("OUTPUT0", "OUTPUT1")],
            "instance_group": {"count": 2, "kind": "KIND_CPU"},  # an object, not a list: Triton takes it
        }
        client.load_model("add_sub", config=json.dumps(config))
        assert client.get_model_config("add_sub")["instance_group"][0]["count"] == 2


# each instance marks its arrival, then waits for the other's: loaded one after the other, the first
# never sees the second and its initialize fails
RENDEZVOUS = """
import os
import time


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], "arrivals")
        open(os.path.join(folder, args["model_instance_name"]), "w").close()
        deadline = time.monotonic() + 20
        while len(os.listdir(folder)) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the other instance never began its initialize")
            time.sleep(0.05)

    def execute(self, requests):
        return []
"""


def test_the_instances_of_a_python_model_initialize_side_by_side(tmp_path: Path) -> None:
    import json

    import tritonclient.http as httpclient

    from server.app import Server, ServerSettings

    model = tmp_path / "rendezvous"
    (model / "1").mkdir(parents=True)
    (model / "arrivals").mkdir()
    (model / "1" / "model.py").write_text(RENDEZVOUS)
    settings = ServerSettings(
        [tmp_path], ControlMode.EXPLICIT, host="127.0.0.1", http_port=0, allow_grpc=False
    )
    with Server(settings) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        # a config given with the load and no config.pbtxt: as Triton's qa loads it
        client.load_model(
            "rendezvous", config=json.dumps({"instance_group": [{"kind": "KIND_CPU", "count": 2}]})
        )
        assert client.is_model_ready("rendezvous")
    assert sorted(path.name for path in (model / "arrivals").iterdir()) == [
        "rendezvous_0_0",
        "rendezvous_0_1",
    ]


def test_after_ctrl_c_an_open_http_connection_is_served_until_it_closes(repo: Path) -> None:
    import os
    import signal
    import socket

    import numpy as np
    import tritonclient.http as httpclient

    from tests.integration.serve_process import ServeProcess

    served = ServeProcess("--model-repository", str(repo), program="tritonserver")
    try:
        client = httpclient.InferenceServerClient(served.http_url)  # one kept-alive connection
        inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        client.infer("add_sub", inputs)
        os.kill(served.process.pid, signal.SIGINT)
        served.wait_for_output("Found 1 HTTP service connections")
        # the open connection is served on (Triton's exit timeout) ...
        result = client.infer("add_sub", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [0.0, 2.0, 4.0, 6.0]
        # ... a new one is refused
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", served.http_port), timeout=10).close()
        client.close()
        assert served.process.wait(60) == 0
        assert "Waiting for in-flight requests to complete." in served.output()
    finally:
        served.stop()


# each initialize() appends its version to a file outside the model folder
COUNTED = """
class TritonPythonModel:
    def initialize(self, args):
        with open({log!r}, "a") as log:
            log.write(args["model_version"] + "\\n")

    def execute(self, requests):
        return []
"""


def test_a_reload_loads_again_only_the_versions_that_changed(tmp_path: Path) -> None:
    repo, log = tmp_path / "repo", tmp_path / "initialized.log"
    model = repo / "counted"
    for version in (1, 2, 3):
        (model / str(version)).mkdir(parents=True)
        (model / str(version) / "model.py").write_text(COUNTED.format(log=str(log)))
    config = model / "config.pbtxt"
    config.write_text('backend: "python"\nversion_policy: { specific: { versions: [1, 2] } }\n')
    manager = ModelManager([repo], ControlMode.EXPLICIT)
    try:
        manager.load("counted")
        manager.load("counted")  # nothing changed: nothing loads again
        assert sorted(log.read_text().split()) == ["1", "2"]
        (model / "2" / "model.py").write_text(COUNTED.format(log=str(log)) + "\n# changed\n")
        config.write_text(config.read_text().replace("[1, 2]", "[1, 2, 3]"))
        manager.load("counted")  # version 1 stays as it is, 2 changed, 3 is new
        assert sorted(log.read_text().split()) == ["1", "2", "2", "3"]
        assert _states(manager, "counted") == {"1": "READY", "2": "READY", "3": "READY"}
    finally:
        manager.shutdown()


# answers once a file exists beside the model (the test's release), so a request is in flight at will
HELD = """
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.release = os.path.join(args["model_repository"], "..", "released")
        self.executing = os.path.join(args["model_repository"], "..", "executing")

    def execute(self, requests):
        open(self.executing, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


def test_a_stopping_server_answers_new_requests_as_triton_and_finishes_those_in_flight(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import time

    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from tests.integration.serve_process import ServeProcess

    repo = tmp_path / "repo"
    (repo / "held" / "1").mkdir(parents=True)
    (repo / "held" / "1" / "model.py").write_text(HELD)
    (repo / "held" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    served = ServeProcess("--model-repository", str(repo), program="tritonserver")
    try:
        client = grpcclient.InferenceServerClient(served.grpc_url)
        tensor = grpcclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, np.float32))
        answers: list[object] = []
        client.async_infer("held", [tensor], lambda result, error: answers.append(error or result))
        deadline = time.monotonic() + 60
        while not (repo / "executing").exists():
            assert time.monotonic() < deadline, "the request never reached the model"
            time.sleep(0.02)  # polling interval
        os.kill(served.process.pid, signal.SIGINT)
        served.wait_for_output("Waiting for in-flight requests to complete.")
        with pytest.raises(
            InferenceServerException, match="Server is stopping, scheduler for model has stopped"
        ):
            client.infer("held", [tensor])
        (repo / "released").touch()
        assert served.process.wait(60) == 0
        assert len(answers) == 1 and answers[0].as_numpy("OUT").tolist() == [1.0]  # type: ignore[attr-defined]
    finally:
        served.stop()


def test_a_config_given_with_a_load_is_completed_from_the_version_it_serves(tmp_path: Path) -> None:
    from server.protocol.config_json import parse_override

    model = tmp_path / "simple"
    shutil.copytree(ROOT / "model_repository" / "simple" / "1", model / "1")
    (model / "3").mkdir()  # a newer version folder without a model file, not served by the policy
    manager = ModelManager([tmp_path], ControlMode.EXPLICIT)
    try:
        override = '{"backend": "onnxruntime", "version_policy": {"specific": {"versions": [1]}}}'
        manager.load("simple", parse_override(override))
        assert _states(manager, "simple") == {"1": ModelState.READY}
        config = manager.models()["simple"].config
        assert config is not None and [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    finally:
        manager.shutdown()


def test_a_new_version_folder_without_files_is_a_change(tmp_path: Path) -> None:
    """A Python-based backend's version folder may be empty: a new one is still a new version."""
    from server.repository.manager import LoadOptions

    backends, repo = tmp_path / "backends", tmp_path / "repo"
    (backends / "plain").mkdir(parents=True)
    (backends / "plain" / "model.py").write_text(COUNTED.format(log=str(tmp_path / "initialized.log")))
    (repo / "versions" / "1").mkdir(parents=True)
    (repo / "versions" / "config.pbtxt").write_text('backend: "plain"\n')
    manager = ModelManager([repo], ControlMode.EXPLICIT, options=LoadOptions(backend_directory=backends))
    try:
        manager.load("versions")
        (repo / "versions" / "2").mkdir()
        manager.load("versions")  # the latest version is served now
        assert _states(manager, "versions") == {"1": ModelState.UNAVAILABLE, "2": ModelState.READY}
    finally:
        manager.shutdown()


# initialize() says it began, then waits for the test's release (file names per model)
GATE = """
import os
import time


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.join(args["model_repository"], "..")
        open(os.path.join(here, "{began}"), "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(here, "{released}")) and time.monotonic() < deadline:
            time.sleep(0.02)

    def execute(self, requests):
        return []
"""
GATED = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "C" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "gate" model_version: -1 input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "B" } },
  { model_name: "late" model_version: -1 input_map { key: "IN" value: "B" } output_map { key: "OUT" value: "C" } }
] }
"""
GATE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def test_unloading_a_model_while_an_ensemble_loads_it_unloads_both_once_loaded(tmp_path: Path) -> None:
    import threading

    repo = tmp_path / "repo"
    for step in ("gate", "late"):
        (repo / step / "1").mkdir(parents=True)
        (repo / step / "1" / "model.py").write_text(
            GATE.format(began=f"{step}.began", released=f"{step}.released")
        )
        (repo / step / "config.pbtxt").write_text(GATE_CONFIG)
    (repo / "gated" / "1").mkdir(parents=True)
    (repo / "gated" / "config.pbtxt").write_text(GATED)
    manager = ModelManager([repo], ControlMode.EXPLICIT)
    errors: list[BaseException] = []

    def run(action: Callable[[str], object], name: str) -> None:
        try:
            action(name)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    def wait_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.02)  # polling interval

    try:
        loading = threading.Thread(target=run, args=(manager.load, "gated"))
        loading.start()
        wait_until((repo / "gate.began").exists)  # the ensemble loads its first step
        unloading = threading.Thread(target=run, args=(manager.unload, "gate"))
        unloading.start()
        (repo / "gate.released").touch()
        wait_until(lambda: _states(manager, "gate") == {"1": ModelState.UNAVAILABLE})  # unloaded
        (repo / "late.released").touch()  # the ensemble's load ends only now
        loading.join(60)
        unloading.join(60)
        assert not errors  # the load succeeded, as in Triton: the unload waited for it
        assert _states(manager, "gated") == {"1": ModelState.UNAVAILABLE}  # then went with its step
    finally:
        manager.shutdown()
