"""Triton's model instance update on `tcli serve --model-control-mode explicit`: loading a model
again whose config changed only in its instance_group initializes just the added instances and
finalizes just the removed ones, while requests keep being answered (as Triton's qa L0_model_update
counts it, with a model that counts its initialize and finalize calls in files)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.serve_process import ServeProcess
from tests.waiting import wait_until

MODEL = """
import os
import fcntl

import triton_python_backend_utils as pb_utils


def _count(kind):
    # beside the model's folder, in the repository: files in the folder would change the model
    repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    with open(os.path.join(repository, kind), "a") as f:  # one line per call: counted by the test
        fcntl.lockf(f, fcntl.LOCK_EX)
        f.write("x\\n")


class TritonPythonModel:
    def initialize(self, args):
        _count("initialize")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]

    def finalize(self):
        _count("finalize")
"""

CONFIG = """
name: "counted"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
{placement}
"""
IN_SERVER = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }'


def _calls(folder: Path, kind: str) -> int:
    path = folder / kind
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("in_server", [False, True], ids=["process", "in-server"])
def test_a_changed_instance_count_starts_and_finalizes_only_the_difference(
    tmp_path: Path, in_server: bool
) -> None:
    folder = tmp_path / "counted"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    placement = IN_SERVER if in_server else ""

    def configure(count: int) -> None:
        (folder / "config.pbtxt").write_text(CONFIG.format(count=count, placement=placement))

    configure(2)
    server = ServeProcess("--model-repository", str(tmp_path), "--model-control-mode", "explicit")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    stop = threading.Event()
    answered: list[int] = []
    errors: list[Exception] = []

    def infer() -> None:
        data = np.arange(4, dtype=np.float32)
        request = grpcclient.InferInput("IN", [4], "FP32")
        request.set_data_from_numpy(data)
        while not stop.is_set():
            try:
                result = client.infer("counted", [request])
                assert np.array_equal(result.as_numpy("OUT"), data)
                answered.append(1)
            except Exception as exc:  # every answer counts: none may fail during the updates
                errors.append(exc)
                return

    sender = threading.Thread(target=infer, daemon=True)
    try:
        client.load_model("counted")
        assert (_calls(tmp_path, "initialize"), _calls(tmp_path, "finalize")) == (2, 0)
        sender.start()
        wait_until(lambda: len(answered) > 0 or bool(errors), "a first answer")

        configure(3)
        client.load_model("counted")
        assert (_calls(tmp_path, "initialize"), _calls(tmp_path, "finalize")) == (3, 0)
        seen = len(answered)
        wait_until(lambda: len(answered) > seen or bool(errors), "answers after the update")

        configure(1)
        client.load_model("counted")
        assert (_calls(tmp_path, "initialize"), _calls(tmp_path, "finalize")) == (3, 2)
        seen = len(answered)
        wait_until(lambda: len(answered) > seen or bool(errors), "answers after the update")
        stop.set()
        sender.join(30)
        assert not errors
        assert client.is_model_ready("counted")
        config = client.get_model_config("counted", as_json=True)["config"]
        assert config["instance_group"][0]["count"] == 1

        client.unload_model("counted")
        wait_until(lambda: _calls(tmp_path, "finalize") == 3, "every instance finalized")
        assert _calls(tmp_path, "initialize") == 3
    finally:
        stop.set()
        client.close()
        server.stop()
