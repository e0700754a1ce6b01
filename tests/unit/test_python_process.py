"""Python model instances in their own processes (server/backends/python/process_host.py), below the
front ends: the real ModelRunner over real model files in temporary folders, real instance processes
and real shared memory. What the model sees (inputs, parameters, config, requested outputs), what
comes back (responses, error responses, raised errors, decoupled streams), BLS through the server's
hook, logging, a crash and the restart after it, and that unloading leaves no process or shared
memory behind."""

from __future__ import annotations

import json
import logging
import os
import sys
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
from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.host import PythonModel
from server.backends.python.process_host import ProcessModel
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats
from server.scheduling.work import ResponseStream

WAIT = 60.0

CONFIG = """
name: "{name}"
backend: "python"
default_model_filename: "model.py"
max_batch_size: 0
{extra}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""

# what execute() does follows the request parameter "mode"
MODEL = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def meet(folder):
    # a cross-process rendezvous in pure Python: arrive, then spin until the other execute() arrives
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 30
    while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
        sum(range(1000))
    return len(os.listdir(folder))


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            parameters = json.loads(request.parameters())
            mode = parameters.get("mode", "echo")
            if mode == "raise":
                raise ValueError("broken on purpose")
            if mode == "exit":
                os._exit(3)
            if mode == "error":
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("not today", pb_utils.TritonError.UNAVAILABLE)))
                continue
            if mode == "meet":
                data = np.array([meet(parameters["folder"])], dtype=np.int32)
            elif mode == "log":
                pb_utils.Logger.log_warn(f"hello from {self.instance}")
            elif mode == "big":
                data = np.arange(parameters["n"], dtype=np.int32)
            elif mode == "bls":
                bls = pb_utils.InferenceRequest(
                    model_name="other", inputs=[pb_utils.Tensor("X", data)], requested_output_names=["Y"])
                reply = bls.exec()
                if reply.has_error():
                    raise pb_utils.TritonModelException(reply.error().message())
                data = pb_utils.get_output_tensor_by_name(reply, "Y").as_numpy()
            elif mode == "bls_stream":
                bls = pb_utils.InferenceRequest(
                    model_name="other", inputs=[pb_utils.Tensor("X", data)], requested_output_names=["Y"])
                data = np.concatenate(
                    [pb_utils.get_output_tensor_by_name(r, "Y").as_numpy() for r in bls.exec(decoupled=True)])
            text = json.dumps({"parameters": parameters, "instance": self.instance,
                               "config_name": self.config["name"]})
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", (data * 2).astype(np.int32)),
                pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
                pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=object)),
            ]))
        return responses
"""

# decoupled: IN = [n] sends n responses from a thread after execute() returns, then the final flag;
# IN = [-1] sends "1" while the client is there, then "0" once it sees the request cancelled
DECOUPLED = """
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(value):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
        pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
    ])


def stream(request, n):
    sender = request.get_response_sender()
    if n < 0:
        sender.send(out(1))
        deadline = time.monotonic() + 30
        while not sender.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        sender.send(out(0), flags=FINAL)
        return
    for i in range(n):
        sender.send(out(i))
    sender.send(flags=FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=stream, args=(request, n)).start()
        return None
"""


def make_runner(
    tmp_path: Path, name: str, model: str, count: int, parameter: str | None = None, extra: str = ""
) -> ModelRunner:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(model)
    if parameter is not None:
        extra += f' parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "{parameter}" }} }}'
    config = text_format.Parse(CONFIG.format(name=name, extra=extra), mc.ModelConfig())
    config.instance_group.add(name=name, kind=mc.ModelInstanceGroup.KIND_CPU, count=count)
    runner = ModelRunner(ModelContext(config, model_dir, 1, tmp_path), ModelStats(name, "1"))
    runner.load()
    return runner


def request(
    values: list[int], outputs: list[str] | None = None, model: str = "pp", **parameters: Any
) -> InferenceRequest:
    data = np.array(values, dtype=np.int32)
    return InferenceRequest(
        model,
        "",
        "req-1",
        [Tensor("IN", "INT32", data.shape, data)],
        [RequestedOutput(n) for n in outputs or []],
        dict(parameters),
    )


class Waiter:
    """The completion of one request (and, when streamed, every response before it)."""

    def __init__(self, streamed: bool = False) -> None:
        self.done = threading.Event()
        self.result: InferenceResponse | TritonError | None = None
        self.responses: list[tuple[InferenceResponse | TritonError | None, bool]] = []
        self.stream = ResponseStream(lambda r, final: self.responses.append((r, final))) if streamed else None

    def complete(self, result: InferenceResponse | TritonError) -> None:
        self.result = result
        self.done.set()

    def wait(self) -> InferenceResponse | TritonError:
        assert self.done.wait(WAIT), "the request never completed"
        assert self.result is not None
        return self.result


def submit(runner: ModelRunner, req: InferenceRequest, streamed: bool = False) -> Waiter:
    waiter = Waiter(streamed)
    runner.submit(req, waiter.complete, waiter.stream)
    return waiter


def infer(runner: ModelRunner, req: InferenceRequest) -> InferenceResponse:
    result = submit(runner, req).wait()
    assert isinstance(result, InferenceResponse), result
    return result


def outputs(response: InferenceResponse | TritonError | None) -> dict[str, Any]:
    assert isinstance(response, InferenceResponse), response
    return {t.name: t.data for t in response.outputs}


def shm_exists(name: str) -> bool:
    return Path("/dev/shm", name.lstrip("/")).exists()


def own_segments() -> set[str]:
    """This process's segments in /dev/shm (process_host names them tcli<pid>_<n>)."""
    return {p.name for p in Path("/dev/shm").glob(f"tcli{os.getpid()}_*")}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelRunner]:
    """The kitchen-sink model with two instances: each in its own process by default."""
    runner = make_runner(tmp_path_factory.mktemp("repo"), "pp", MODEL, count=2)
    try:
        yield runner
    finally:
        runner.stop(10)


def test_two_instances_run_in_two_processes_at_the_same_time(pair: ModelRunner, tmp_path: Path) -> None:
    assert all(isinstance(i, ProcessModel) for i in pair._instances)
    folder = tmp_path / "meet"
    folder.mkdir()
    waiters = [submit(pair, request([0], mode="meet", folder=str(folder))) for _ in range(2)]
    results = [w.wait() for w in waiters]
    # each execute() saw the other arrive while it was still running: they overlapped
    assert [int(outputs(r)["OUT"][0]) for r in results] == [4, 4]
    pids = {int(outputs(r)["PID"][0]) for r in results}
    assert len(pids) == 2 and os.getpid() not in pids
    assert {p.name for p in folder.iterdir()} == {str(p) for p in pids}


def test_inputs_parameters_config_and_every_output(pair: ModelRunner) -> None:
    response = infer(pair, request([1, 2, 3], tag="x", count=7))
    out = outputs(response)
    assert out["OUT"].tolist() == [2, 4, 6] and out["OUT"].dtype == np.int32
    text = json.loads(out["TEXT"][0])
    assert text["parameters"] == {"tag": "x", "count": 7}
    assert text["config_name"] == "pp" and text["instance"] in {"pp_0", "pp_1"}
    assert (response.model_name, response.model_version, response.id) == ("pp", "1", "req-1")
    assert [t.datatype for t in response.outputs] == ["INT32", "INT64", "BYTES"]


def test_requested_outputs_only(pair: ModelRunner) -> None:
    response = infer(pair, request([5], outputs=["OUT"]))
    assert list(outputs(response)) == ["OUT"]


def test_empty_tensors(pair: ModelRunner) -> None:
    out = outputs(infer(pair, request([])))
    assert out["OUT"].shape == (0,) and out["OUT"].dtype == np.int32


def test_large_tensors_grow_the_shared_memory(pair: ModelRunner) -> None:
    n = 3_000_000  # 12 MB each way: more than the first arena and ring
    values = np.arange(n, dtype=np.int32)
    response = infer(pair, InferenceRequest("pp", "", "big", [Tensor("IN", "INT32", (n,), values)]))
    assert np.array_equal(outputs(response)["OUT"], values * 2)
    response = infer(pair, request([0], mode="big", n=n))
    assert np.array_equal(outputs(response)["OUT"], values * 2)
    assert infer(pair, request([4])).outputs[0].data.tolist() == [8]  # and small ones after that


def test_error_response_keeps_its_code(pair: ModelRunner) -> None:
    result = submit(pair, request([1], mode="error")).wait()
    assert isinstance(result, TritonError)
    assert (result.code, result.message) == (ErrorCode.UNAVAILABLE, "not today")


def test_raised_error_fails_the_request_and_the_instance_keeps_serving(pair: ModelRunner) -> None:
    result = submit(pair, request([1], mode="raise")).wait()
    assert isinstance(result, TritonError) and result.code == ErrorCode.INTERNAL
    raised, at = result.message.split("\n\nAt:\n")  # the model's frames, as Triton adds them
    # either of the pair's two instances may have taken it; Triton names the instance
    assert raised in [
        f"Failed to process the request(s) for model 'pp_{i}', message: ValueError: broken on purpose"
        for i in (0, 1)
    ]
    line = MODEL.splitlines().index('                raise ValueError("broken on purpose")') + 1
    assert at.endswith(f"/pp/1/model.py({line}): execute\n"), at
    for _ in range(4):
        assert outputs(infer(pair, request([3])))["OUT"].tolist() == [6]


def test_logger_reaches_the_server_log(pair: ModelRunner, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    infer(pair, request([1], mode="log"))
    records = [r for r in caplog.records if r.name == "tcli.python_model"]
    assert records and records[-1].getMessage() in {"hello from pp_0", "hello from pp_1"}
    assert records[-1].levelno == logging.WARNING and records[-1].model_name == "pp"  # type: ignore[attr-defined]


def test_bls_runs_through_the_server_hook(pair: ModelRunner) -> None:
    seen: list[tuple[str, int, bool]] = []

    def hook(bls: Any, model_name: str, model_version: int, decoupled: bool) -> Any:
        seen.append((model_name, model_version, decoupled))
        tensor = pb_utils.get_input_tensor_by_name(bls, "X")
        assert tensor is not None
        x = tensor.as_numpy()
        if decoupled:
            return pb_utils.ResponseIterator(
                [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + i)]) for i in range(3)]
            )
        return pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 100)])

    pb_utils.set_bls_executor(hook)
    try:
        assert outputs(infer(pair, request([1, 2], mode="bls")))["OUT"].tolist() == [202, 204]
        assert outputs(infer(pair, request([1], mode="bls_stream")))["OUT"].tolist() == [2, 4, 6]
    finally:
        pb_utils.set_bls_executor(None)
    assert seen == [("other", -1, False), ("other", -1, True)]
    result = submit(pair, request([1], mode="bls")).wait()  # no hook: the model sees why
    assert isinstance(result, TritonError)
    assert "no BLS executor is installed" in result.message


def test_decoupled_streams_from_model_threads(tmp_path: Path) -> None:
    extra = "model_transaction_policy { decoupled: true }"
    runner = make_runner(tmp_path, "dec", DECOUPLED, count=1, parameter="true", extra=extra)
    try:
        assert isinstance(runner._instances[0], ProcessModel)
        waiter = submit(runner, request([3], model="dec"), streamed=True)
        waiter.wait()
        values = [(None if r is None else int(outputs(r)["OUT"][0]), f) for r, f in waiter.responses]
        assert values == [(0, False), (1, False), (2, False), (None, True)]
        pid = int(outputs(waiter.responses[0][0])["PID"][0])
        assert pid != os.getpid()

        cancelled = request([-1], model="dec")
        waiter = submit(runner, cancelled, streamed=True)
        while not waiter.responses:  # the first response: the model now polls is_cancelled()
            assert not waiter.done.wait(0.01)
        assert waiter.stream is not None
        waiter.stream.cancelled = True
        cancelled.cancel()  # what a front end does when the client goes: the process hears of it
        began = time.monotonic()
        waiter.wait()
        assert time.monotonic() - began < 20  # the model's own give-up is 30 s
        assert [int(outputs(r)["OUT"][0]) for r, _ in waiter.responses] == [1, 0]
    finally:
        runner.stop(10)


ASYNC_DECOUPLED = """
import asyncio
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                await asyncio.sleep(0)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_coroutine_execute_in_its_process(tmp_path: Path) -> None:
    extra = "model_transaction_policy { decoupled: true }"
    runner = make_runner(tmp_path, "adec", ASYNC_DECOUPLED, count=2, extra=extra)
    try:
        assert all(isinstance(i, ProcessModel) for i in runner._instances)
        waiter = submit(runner, request([2], model="adec"), streamed=True)
        waiter.wait()
        values = [(None if r is None else int(outputs(r)["OUT"][0]), f) for r, f in waiter.responses]
        assert values == [(0, False), (1, False), (None, True)]
    finally:
        runner.stop(10)


SELF_IMPORT = """
import os
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils

MARK = 41


class Check(unittest.TestCase):
    def test_mark(self):
        self.assertEqual(MARK, 41)


class TritonPythonModel:
    def execute(self, requests):
        import model  # Triton's stub imports model.py as `model`

        # as Triton's own qa models do: run the model file's tests by module name
        result = unittest.main("model", argv=["model"], exit=False).result
        value = model.MARK + int(result.wasSuccessful())
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
            pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
        ]) for _ in requests]
"""


def test_model_py_is_importable_as_model_in_its_process(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "selfie", SELF_IMPORT, count=1, parameter="true")
    try:
        answer = outputs(infer(runner, request([0], model="selfie")))
        assert int(answer["OUT"][0]) == 42 and int(answer["PID"][0]) != os.getpid()
        assert "model" not in sys.modules  # only the instance's own process has it
    finally:
        runner.stop(10)


def test_crash_fails_in_flight_requests_and_the_instance_restarts(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "pp", MODEL, count=1, parameter="true")
    try:
        instance = runner._instances[0]
        assert isinstance(instance, ProcessModel)
        first = int(outputs(infer(runner, request([1])))["PID"][0])
        segments = instance.segments()
        result = submit(runner, request([1], mode="exit")).wait()
        assert isinstance(result, TritonError) and result.code == ErrorCode.INTERNAL
        assert result.message == (
            "python model 'pp' instance 'pp_0': its process exited unexpectedly (exit code 3); "
            "the instance restarts for later requests"
        )
        second = int(outputs(infer(runner, request([2])))["PID"][0])
        assert second not in (first, os.getpid())
        assert not any(shm_exists(s) for s in set(segments) - set(instance.segments()))
    finally:
        runner.stop(10)


def test_unload_ends_the_processes_and_frees_shared_memory(tmp_path: Path) -> None:
    before = own_segments()
    runner = make_runner(tmp_path, "pp", MODEL, count=2)
    instances = [i for i in runner._instances if isinstance(i, ProcessModel)]
    assert len(instances) == 2
    n = 2_000_000  # grow both regions once
    values = np.arange(n, dtype=np.int32)
    for _ in range(2):
        infer(runner, InferenceRequest("pp", "", "big", [Tensor("IN", "INT32", (n,), values)]))
    pids = [i.pid for i in instances]
    segments = [s for i in instances for s in i.segments()]
    assert segments and all(shm_exists(s) for s in segments)
    runner.stop(10)
    assert not [s for s in segments if shm_exists(s)]
    assert own_segments() <= before  # nor any segment they had before growing
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_override_parameter_both_ways(tmp_path: Path) -> None:
    runner = make_runner(tmp_path, "two_in_threads", MODEL, count=2, parameter="false")
    try:
        assert [type(i) for i in runner._instances] == [PythonModel, PythonModel]
        assert int(outputs(infer(runner, request([1], model="two_in_threads")))["PID"][0]) == os.getpid()
    finally:
        runner.stop(10)
    runner = make_runner(tmp_path, "one", MODEL, count=1)  # by default each instance in a process
    try:
        assert [type(i) for i in runner._instances] == [ProcessModel]
        assert int(outputs(infer(runner, request([1], model="one")))["PID"][0]) != os.getpid()
    finally:
        runner.stop(10)
    with pytest.raises(TritonError) as caught:
        make_runner(tmp_path, "bad", MODEL, count=2, parameter="sometimes")
    assert caught.value.message == (
        'model \'bad\': parameter TCLI_INSTANCE_PROCESS must be "true" or "false", got "sometimes"'
    )


METRICS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.family = pb_utils.MetricFamily("pp_calls", "calls", pb_utils.MetricFamily.COUNTER)

    def execute(self, requests):
        return []
"""


def test_models_with_custom_metrics_run_in_processes_and_their_families_reach_the_server(
    tmp_path: Path,
) -> None:
    runner = make_runner(tmp_path, "metered", METRICS_MODEL, count=2)
    try:
        assert [type(i) for i in runner._instances] == [ProcessModel, ProcessModel]
        assert [f.name for f in pb_utils.METRICS.collect() if f.name == "pp_calls"] == ["pp_calls"]
    finally:
        runner.stop(10)
    assert "pp_calls" not in [f.name for f in pb_utils.METRICS.collect()]  # unloaded: gone


def test_initialize_failure_fails_the_load_as_in_thread(tmp_path: Path) -> None:
    broken = "class TritonPythonModel:\n    def initialize(self, args):\n        raise KeyError('weights')\n"
    before = own_segments()
    with pytest.raises(TritonError) as caught:
        make_runner(tmp_path, "broken", broken, count=2)
    assert caught.value.message == "model 'broken' initialize() failed: KeyError: 'weights'"
    assert own_segments() <= before


BLS_IN_LIFECYCLE = """
import triton_python_backend_utils as pb_utils


def bls():
    request = pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[])
    request.exec()


class TritonPythonModel:
    def initialize(self, args):
        if args["model_name"] == "init_bls":
            bls()

    def execute(self, requests):
        return [None for _ in requests]

    def finalize(self):
        bls()
"""


@pytest.mark.parametrize("count", [1, 2])  # in the server's thread, in processes of their own
def test_bls_in_initialize_fails_the_load_with_tritons_words(tmp_path: Path, count: int) -> None:
    with pytest.raises(TritonError) as caught:
        make_runner(tmp_path, "init_bls", BLS_IN_LIFECYCLE, count=count)
    assert caught.value.message == (
        "model 'init_bls' initialize() failed: TritonModelException: "
        "BLS is only supported during the 'execute' function."
    )


@pytest.mark.parametrize("own_process", ["true", "false"])
def test_bls_in_finalize_is_refused_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, own_process: str
) -> None:
    runner = make_runner(tmp_path, "fin_bls", BLS_IN_LIFECYCLE, count=1, parameter=own_process)
    with caplog.at_level(logging.ERROR, logger="tcli.python_backend"):
        runner.stop(10)
    (record,) = [r for r in caplog.records if r.name == "tcli.python_backend"]
    # a record from an instance process arrives with its traceback already in the text
    text = record.getMessage() + (str(record.exc_info[1]) if record.exc_info else "")
    assert text.startswith("model 'fin_bls' version 1 instance 'fin_bls_0': finalize() failed")
    assert "BLS is only supported during the 'execute' function." in text
