"""A runner starts its worker threads with the first request queued to it, not at load: a repository
of 10,000 models served inline, or never asked, needs no 10,000 threads. Requests still run on the
instance's worker, and stopping a runner still answers what was queued. Real models, no server."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.backends.base import ModelContext
from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats

WAIT = 30.0

CONFIG = """
name: "{name}"
backend: "python"
default_model_filename: "model.py"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "false" }} }}
"""

# answers with the name of the thread execute() ran on
MODEL = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        name = np.array([threading.current_thread().name.encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", name)]) for _ in requests]
"""


def make_runner(tmp_path: Path, name: str) -> ModelRunner:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(MODEL)
    config = text_format.Parse(CONFIG.format(name=name), mc.ModelConfig())
    config.instance_group.add(name=name, kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    runner = ModelRunner(ModelContext(config, model_dir, 1, tmp_path), ModelStats(name, "1"))
    runner.load()
    return runner


def thread_names() -> set[str]:
    return {thread.name for thread in threading.enumerate()}


class Answer:
    def __init__(self) -> None:
        self.result: InferenceResponse | TritonError | None = None
        self.done = threading.Event()

    def complete(self, result: InferenceResponse | TritonError) -> None:
        self.result = result
        self.done.set()

    def thread(self) -> str:
        assert self.done.wait(WAIT), "the request was never answered"
        assert isinstance(self.result, InferenceResponse), self.result
        return str(self.result.outputs[0].data[0].decode())


def submit(runner: ModelRunner) -> Answer:
    data = np.ones(1, np.float32)
    answer = Answer()
    runner.submit(
        InferenceRequest(runner.name, "", "r", [Tensor("IN", "FP32", data.shape, data)]), answer.complete
    )
    return answer


def test_a_loaded_model_has_no_worker_thread_until_a_request_is_queued(tmp_path: Path) -> None:
    asked, idle = make_runner(tmp_path, "asked"), make_runner(tmp_path, "idle")
    try:
        assert not {"asked_1_0", "idle_1_0"} & thread_names()
        assert submit(asked).thread() == "asked_1_0"  # the instance's own worker runs it
        assert submit(asked).thread() == "asked_1_0"  # one worker, started once
        assert [n for n in thread_names() if n.startswith("asked_1_")] == ["asked_1_0"]
        assert "idle_1_0" not in thread_names()
    finally:
        asked.stop(10)
        idle.stop(10)


def test_requests_queued_before_stop_are_answered(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "stopping")
    answers = [submit(runner) for _ in range(5)]
    runner.stop(WAIT)
    assert [a.thread() for a in answers] == ["stopping_1_0"] * 5
    assert runner.instance_count == 0


def test_a_runner_never_asked_stops_without_a_thread(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "unasked")
    runner.stop(10)
    assert runner.instance_count == 0
    assert "unasked_1_0" not in thread_names()
