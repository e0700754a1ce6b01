"""Decoupled python models below the front ends: the runner's response channels and the python host
(what reaches a request's stream, when it completes, what the statistics count), the service's
infer_stream, and the stream message builders of the gRPC codec. Real models in temporary folders,
no server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.backends.base import ModelContext
from server.protocol import grpc_codec as codec
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats
from server.scheduling.work import ResponseStream

WAIT = 30.0

CONFIG = """
name: "{name}"
backend: "python"
default_model_filename: "model.py"
max_batch_size: 0
{policy}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

# IN = [n, mode]: n responses, then by mode: 0 final flag alone, 1 final on the last response,
# 2 raise, 3 an error response then the final flag; a request with IN = [-1] waits for a gate
# (a file) so that a test can hold execute() open
DECOUPLED = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n, mode = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().tolist()
            sender = request.get_response_sender()
            for i in range(n):
                sender.send(out(i), flags=FINAL if (mode == 1 and i == n - 1) else 0)
            if mode == 0:
                sender.send(flags=FINAL)
            elif mode == 2:
                raise ValueError("broken")
            elif mode == 3:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("nope", pb_utils.TritonError.UNAVAILABLE)))
                sender.send(flags=FINAL)
        return None
"""

DEFAULT_RETURNS_NONE = """
class TritonPythonModel:
    def execute(self, requests):
        return None
"""


def make_runner(tmp_path: Path, name: str, model: str, decoupled: bool) -> tuple[ModelRunner, ModelStats]:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(model)
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    config = text_format.Parse(CONFIG.format(name=name, policy=policy), mc.ModelConfig())
    config.instance_group.add(name=name, kind=mc.ModelInstanceGroup.KIND_CPU, count=1)  # named as completed
    stats = ModelStats(name, "1")
    runner = ModelRunner(ModelContext(config, model_dir, 1, tmp_path), stats)
    runner.load()
    return runner, stats


@pytest.fixture()
def decoupled(tmp_path: Path) -> Iterator[tuple[ModelRunner, ModelStats]]:
    runner, stats = make_runner(tmp_path, "dec", DECOUPLED, True)
    try:
        yield runner, stats
    finally:
        runner.stop(10)


def request(values: list[int], model: str = "dec") -> InferenceRequest:
    data = np.array(values, dtype=np.int32)
    return InferenceRequest(model, "", "r", [Tensor("IN", "INT32", data.shape, data)])


class Collector:
    """A stream plus the completion of one request, recorded in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, bool]] = []
        self.done = threading.Event()
        self.stream = ResponseStream(self._deliver)

    def _deliver(self, result: InferenceResponse | TritonError | None, final: bool) -> None:
        self.events.append(("stream", result, final))

    def complete(self, result: InferenceResponse | TritonError) -> None:
        self.stream.deliver(result, True)  # as InferenceService does: a no-op after the final response
        self.events.append(("complete", result, True))
        self.done.set()

    def values(self) -> list[Any]:
        shown: list[Any] = []
        for kind, result, final in self.events:
            if kind == "complete":
                shown.append("complete")
            elif result is None:
                shown.append(("final", final))
            elif isinstance(result, TritonError):
                shown.append((result.code.name, result.message, final))
            else:
                shown.append((int(result.outputs[0].data[0]), final))
        return shown


def counted(stats: ModelStats, requests: int) -> tuple[int, int]:
    """Successes and failures once all `requests` are recorded: a response sender's final response can
    reach the client before execute() returns and the request is counted (as in Triton)."""
    deadline = time.monotonic() + WAIT
    while True:
        counts = stats.as_dict()["inference_stats"]
        recorded = counts["success"]["count"], counts["fail"]["count"]
        if sum(recorded) >= requests or time.monotonic() > deadline:
            return recorded
        time.sleep(0.01)


def run(runner: ModelRunner, values: list[int]) -> Collector:
    collector = Collector()
    runner.submit(request(values), collector.complete, collector.stream)
    assert collector.done.wait(WAIT)
    return collector


def test_responses_then_a_flags_only_final(decoupled: tuple[ModelRunner, ModelStats]) -> None:
    runner, stats = decoupled
    assert run(runner, [3, 0]).values() == [(0, False), (1, False), (2, False), ("final", True), "complete"]
    assert run(runner, [0, 0]).values() == [("final", True), "complete"]
    assert run(runner, [2, 1]).values() == [(0, False), (1, True), "complete"]
    assert counted(stats, 3) == (3, 0)


def test_error_response_in_the_middle(decoupled: tuple[ModelRunner, ModelStats]) -> None:
    runner, stats = decoupled
    assert run(runner, [1, 3]).values() == [
        (0, False),
        ("UNAVAILABLE", "nope", False),
        ("final", True),
        "complete",
    ]
    assert counted(stats, 1) == (1, 0)  # the model answered: a success


def test_raising_execute_fails_the_open_request(decoupled: tuple[ModelRunner, ModelStats]) -> None:
    runner, stats = decoupled
    events = run(runner, [1, 2]).values()
    line = DECOUPLED.splitlines().index('                raise ValueError("broken")') + 1
    model_file = runner.context.version_dir / "model.py"
    assert events == [
        (0, False),
        (
            "INTERNAL",
            "Failed to process the request(s) for model 'dec_0', message: ValueError: broken\n\n"
            f"At:\n  {model_file}({line}): execute\n",
            True,
        ),
        "complete",
    ]
    assert counted(stats, 1) == (0, 1)


def test_stream_takes_nothing_after_its_final() -> None:
    seen: list[Any] = []
    stream = ResponseStream(lambda result, final: seen.append((result, final)))
    stream.deliver(None, True)
    stream.deliver(TritonError(ErrorCode.INTERNAL, "late"), True)
    assert seen == [(None, True)] and stream.finished and not stream.cancelled


def test_default_model_returning_none_without_senders(tmp_path: Path) -> None:
    """Only requests with a response sender may be answered through it: the host's plain execute()
    (no channels) reports the missing responses."""
    from server.backends.base import InstanceSpec
    from server.backends.python.host import PythonModel

    model_dir = tmp_path / "none"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(DEFAULT_RETURNS_NONE)
    config = text_format.Parse(CONFIG.format(name="none", policy=""), mc.ModelConfig())
    model = PythonModel(ModelContext(config, model_dir, 1, tmp_path), InstanceSpec("none_0", "KIND_CPU"))
    try:
        (result,) = model.execute([request([1, 0], "none")])
    finally:
        model.unload()
    assert (
        isinstance(result, TritonError) and "must return one InferenceResponse per request" in result.message
    )


def test_infer_stream_and_cancellation(tmp_path: Path) -> None:
    """infer_stream over a real model manager: items as sent, the final marked; closing the
    iterator early marks the request cancelled for the model."""
    from server.repository.manager import ControlMode, ModelManager
    from server.service import InferenceService

    model_dir = tmp_path / "repo" / "dec"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(DECOUPLED)
    (model_dir / "config.pbtxt").write_text(
        CONFIG.format(name="dec", policy="model_transaction_policy { decoupled: true }")
    )
    manager = ModelManager([tmp_path / "repo"], ControlMode.NONE)
    manager.load_startup(None)
    service = InferenceService(manager)

    async def scenario() -> list[Any]:
        shown = []
        async for item in service.infer_stream(request([2, 0])):
            shown.append(
                (
                    None if item.response is None else int(item.response.outputs[0].data[0]),
                    item.error,
                    item.final,
                )
            )
        with pytest.raises(TritonError, match="is decoupled"):
            await service.infer(request([1, 0]))
        with pytest.raises(TritonError, match="unknown model"):
            async for _ in service.infer_stream(request([1, 0], "nope")):
                pass
        return shown

    try:
        assert asyncio.run(scenario()) == [(0, None, False), (1, None, False), (None, None, True)]
    finally:
        manager.shutdown(10)


def test_stream_message_builders() -> None:
    response = codec.stream_response(codec.encode_infer_response(InferenceResponse("m", "1", id="a")), False)
    assert response.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is False
    error = codec.stream_error("boom", "a", "m", "2", True)
    assert (error.error_message, error.infer_response.model_name, error.infer_response.model_version) == (
        "boom",
        "m",
        "2",
    )
    assert error.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True
    assert not codec.stream_error("early", "a").infer_response.parameters  # never reached the model
    empty = codec.stream_empty_final("a", "m", "")
    assert (empty.infer_response.id, list(empty.infer_response.outputs)) == ("a", [])
    assert empty.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True
