"""A batch that fails, below the front ends: the real ModelRunner over real model files. A model's own
exception (a python model's execute(), an error onnxruntime raises running the graph) fails only its
batch, is answered with the model's message as Triton words it, and is logged once with its
traceback, the model, version, instance and request ids; the instance then serves the next request.
An exception of tcli's own (injected here into a step of the runner, the dispatcher or the python
host, an ensemble) is answered as a tcli bug pointing to the log, and logged once with its traceback."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.backends.base import ModelContext
from server.backends.python.host import PythonModel
from server.backends.python.process_host import ProcessModel
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.ensemble import EnsembleSchedule
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats
from tests.unit.test_python_process import make_runner, submit
from tests.unit.test_python_process_dispatch import Loop

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"

# execute() raises for a negative first input, from a helper (so the traceback has the model's frames)
RAISER = """
import numpy as np
import triton_python_backend_utils as pb_utils


def check(value):
    if value < 0:
        raise ValueError("negative input")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            check(data[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data * 2)]))
        return responses
"""
# as real Triton 2.51 answers it: the instance's name, the exception, the model's frames innermost first
MODEL_ERROR = (
    "Failed to process the request(s) for model 'raiser_0', message: ValueError: negative input\n\nAt:\n"
    "  {file}(8): check\n"
    "  {file}(16): execute\n"
)


def python_request(value: int, request_id: str) -> InferenceRequest:
    data = np.array([value], dtype=np.int32)
    return InferenceRequest("raiser", "", request_id, [Tensor("IN", "INT32", data.shape, data)])


def error_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


def logged_text(record: logging.LogRecord) -> str:
    """The record as the server's log writes it: its message and, when it carries one, its traceback."""
    return logging.Formatter().format(record)


def answer(runner: ModelRunner, request: InferenceRequest) -> InferenceResponse | TritonError:
    return submit(runner, request).wait()


@pytest.fixture(params=["false", "true"], ids=["in-thread", "own-process"])
def raiser(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ModelRunner]:
    runner = make_runner(tmp_path, "raiser", RAISER, count=1, parameter=request.param)
    yield runner
    runner.stop(10)


def test_python_model_exception_fails_its_batch_logged_once(
    raiser: ModelRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    failed = answer(raiser, python_request(-1, "req-neg"))
    assert isinstance(failed, TritonError) and failed.code == ErrorCode.INTERNAL
    assert failed.message == MODEL_ERROR.format(
        file=raiser.context.version_dir / "model.py"
    )  # not a tcli bug
    (record,) = error_records(caplog)
    text = logged_text(record)
    assert "model 'raiser' version 1 instance 'raiser_0' failed request(s) 'req-neg'" in text
    assert "Traceback (most recent call last)" in text
    assert str(raiser.context.version_dir / "model.py") in text and "in check" in text
    assert text.count("ValueError: negative input") == 2  # the answer it gave, and the traceback's end
    # the instance goes on serving
    served = answer(raiser, python_request(4, "req-next"))
    assert isinstance(served, InferenceResponse)
    assert [t.data.tolist() for t in served.outputs] == [[8]]
    assert len(error_records(caplog)) == 1
    assert (raiser.stats.success.count, raiser.stats.fail.count) == (1, 1)


BATCHED = """
name: "raiser"
backend: "python"
max_batch_size: 4
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 30000000 }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "%s" } }
"""


@pytest.mark.parametrize("process", ["false", "true"], ids=["in-thread", "own-process"])
def test_one_exception_failing_a_batch_is_logged_once(
    process: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "raiser" / "1").mkdir(parents=True)
    (tmp_path / "raiser" / "1" / "model.py").write_text(RAISER)
    config = text_format.Parse(BATCHED % process, mc.ModelConfig())
    config.default_model_filename = "model.py"
    config.instance_group.add(name="raiser", kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    runner = ModelRunner(ModelContext(config, tmp_path / "raiser", 1, tmp_path), ModelStats("raiser", "1"))
    runner.load()
    try:
        # three requests make the preferred batch at once (the queue delay is far longer than any test)
        waiters = []
        for number in range(3):
            data = np.array([[-1]], dtype=np.int32)
            request = InferenceRequest(
                "raiser", "", f"req-{number}", [Tensor("IN", "INT32", data.shape, data)]
            )
            waiters.append(submit(runner, request))
        answers = [waiter.wait() for waiter in waiters]
        assert all(isinstance(a, TritonError) and "ValueError: negative input" in a.message for a in answers)
        assert runner.stats.execution_count == 1
        (record,) = error_records(caplog)
        assert "failed request(s) 'req-0', 'req-1', 'req-2'" in logged_text(record)
    finally:
        runner.stop(10)


def test_decoupled_coroutine_failure_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        raise RuntimeError("async failure")
"""
    runner = make_runner(
        tmp_path, "raiser", source, 1, "false", "model_transaction_policy { decoupled: true }"
    )
    try:
        waiter = submit(runner, python_request(1, "req-async"), streamed=True)
        failed = waiter.wait()
        assert isinstance(failed, TritonError)
        assert failed.message == (
            "Failed to process the request(s) for model 'raiser_0', message: RuntimeError: async failure\n\n"
            f"At:\n  {runner.context.version_dir / 'model.py'}(7): execute\n"
        )
        (record,) = error_records(caplog)
        text = logged_text(record)
        assert "instance 'raiser_0' failed request(s) 'req-async'" in text and "in execute" in text
    finally:
        runner.stop(10)


@pytest.fixture
def simple(tmp_path: Path) -> Iterator[ModelRunner]:
    """model_repository/simple (INT32 add/sub, onnxruntime) with one CPU instance."""
    model_dir = tmp_path / "simple"
    shutil.copytree(REPOSITORY / "simple", model_dir)
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())
    config.backend, config.default_model_filename = "onnxruntime", "model.onnx"  # as completion sets them
    config.instance_group.add(name="simple", kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    runner = ModelRunner(ModelContext(config, model_dir, 1, tmp_path), ModelStats("simple", "1"))
    runner.load()
    yield runner
    runner.stop(10)


def simple_request(request_id: str, dtype: type = np.int32) -> InferenceRequest:
    data = np.arange(16, dtype=dtype).reshape(1, 16)
    wire = "INT32" if dtype is np.int32 else "FP32"
    inputs = [Tensor(name, wire, data.shape, data) for name in ("INPUT0", "INPUT1")]
    return InferenceRequest("simple", "", request_id, inputs)


def test_onnxruntime_run_error_is_the_models(simple: ModelRunner, caplog: pytest.LogCaptureFixture) -> None:
    # float inputs to an INT32 graph: onnxruntime refuses them while running (the request checks that
    # would stop them first are above the runner)
    failed = answer(simple, simple_request("req-float", np.float32))
    assert isinstance(failed, TritonError) and failed.code == ErrorCode.INTERNAL
    assert failed.message.startswith("onnxruntime execute failure: ")
    (record,) = error_records(caplog)
    text = logged_text(record)
    assert "model 'simple' version 1 instance 'simple_0' failed request(s) 'req-float'" in text
    assert "Traceback (most recent call last)" in text and "onnxruntime" in text
    served = answer(simple, simple_request("req-next"))
    assert isinstance(served, InferenceResponse)
    assert served.outputs[0].data.tolist() == [list(range(0, 32, 2))]


def assert_tcli_bug(
    answered: InferenceResponse | TritonError, records: list[logging.LogRecord], *where: str
) -> None:
    """Answered as a bug of tcli's, and logged once with the traceback of the injected exception."""
    assert isinstance(answered, TritonError) and answered.code == ErrorCode.INTERNAL
    assert answered.message == (
        "internal error: a bug in tcli, not in the model (RuntimeError: injected); "
        "the server log has the traceback"
    )
    (record,) = records
    text = logged_text(record)
    assert record.exc_info is not None and "Traceback (most recent call last)" in text
    assert "RuntimeError: injected" in text and "tcli bug" in text
    for part in where:
        assert part in text


def injected(*args: object, **kwargs: object) -> None:
    raise RuntimeError("injected")


def test_tcli_bug_in_a_runner_step(
    simple: ModelRunner, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(simple, "_reshape_outputs", injected)
        failed = answer(simple, simple_request("req-bug"))
    assert_tcli_bug(
        failed,
        error_records(caplog),
        "model 'simple' version 1 instance 'simple_0'",
        "'req-bug'",
        "_run_tensor_batch",
    )
    assert isinstance(answer(simple, simple_request("req-next")), InferenceResponse)  # the worker goes on


def test_tcli_bug_in_the_python_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = make_runner(tmp_path, "raiser", RAISER, count=1, parameter="false")
    try:
        assert isinstance(runner._instances[0], PythonModel)
        with monkeypatch.context() as patch:
            patch.setattr(PythonModel, "_to_pb", injected)  # tcli's conversion of a request for the model
            failed = answer(runner, python_request(1, "req-bug"))
        assert_tcli_bug(failed, error_records(caplog), "instance 'raiser_0'", "'req-bug'", "_to_pb")
        assert isinstance(answer(runner, python_request(1, "req-next")), InferenceResponse)
    finally:
        runner.stop(10)


def test_tcli_bug_in_the_loop_dispatcher(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = make_runner(tmp_path, "raiser", RAISER, count=1, parameter="true")
    loop = Loop()
    try:
        assert isinstance(runner._instances[0], ProcessModel)
        with monkeypatch.context() as patch:
            patch.setattr(ProcessModel, "start_batch", injected)
            ((failed, on_loop),) = loop.infer(runner, [python_request(1, "req-bug")])
        assert on_loop
        assert_tcli_bug(failed, error_records(caplog), "instance 'raiser_0'", "'req-bug'", "start_batch")
        ((served, _),) = loop.infer(runner, [python_request(1, "req-next")])
        assert isinstance(served, InferenceResponse)
    finally:
        loop.stop()
        runner.stop(10)


ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [ {
  model_name: "double" model_version: -1 input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" }
} ] }
"""


def test_tcli_bug_in_an_ensemble(caplog: pytest.LogCaptureFixture) -> None:
    schedule = EnsembleSchedule(text_format.Parse(ENSEMBLE, mc.ModelConfig()), ModelStats("pipeline", "1"))
    data = np.zeros(2, dtype=np.float32)
    request = InferenceRequest("pipeline", "", "req-bug", [Tensor("X", "FP32", data.shape, data)])

    async def step(_: InferenceRequest) -> InferenceResponse:  # the service's infer, broken
        raise RuntimeError("injected")

    with pytest.raises(TritonError) as caught:
        asyncio.run(schedule.infer(request, step, "1"))
    assert_tcli_bug(
        caught.value, error_records(caplog), "ensemble 'pipeline' version 1", "'req-bug'", "in step"
    )
    assert schedule.stats.fail.count == 1
