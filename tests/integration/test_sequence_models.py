"""Sequence models end to end: the example simple_sequence (direct strategy, python), a python model
with the oldest strategy and a CORRID control, a python model with implicit state, an ONNX model
with implicit state (onnxruntime, null rows in a merged batch), idle sequences, the backlog and the
statistics; then the same requests against the REAL Triton 2.51 (skipped when it is not installed).

Slots are checked through the scheduler's own state, never by timing."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from server.repository.manager import ControlMode, ModelManager
from server.scheduling.sequence import SequenceScheduler
from server.service import InferenceService
from tests.integration.conftest import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0  # failure timeout; never reached when things work

CONTROLS = """
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }"""

# oldest strategy, in the style of Triton's simple_dyna_sequence: a running sum per CORRID; the END
# request adds the correlation ID, so a mixed-up sequence shows
DYNA_CONFIG = f"""
name: "dyna_sequence"
backend: "python"
max_batch_size: 4
sequence_batching {{
  oldest {{ max_candidate_sequences: 3 preferred_batch_size: [ 2, 4 ] }}
  control_input [ {CONTROLS} ]
}}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
"""
DYNA_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


def scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = scalar(request, "CORRID")
            if scalar(request, "START"):
                self.sums[corrid] = 0
            total = self.sums.get(corrid, 0) + scalar(request, "INPUT")
            self.sums[corrid] = total
            if scalar(request, "END"):
                total += corrid
                self.sums.pop(corrid, None)
            output = np.array([[total]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
"""

# direct strategy, one instance: every request answers what its execute() call looked like
PROBE_CONFIG = f"""
name: "sequence_probe"
backend: "python"
max_batch_size: 4
sequence_batching {{ control_input [ {CONTROLS} ] }}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT64 dims: [ 7 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
PROBE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


def scalar(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for index, request in enumerate(requests):
            ready = scalar(request, "READY")
            row = [len(requests), index, scalar(request, "START"), scalar(request, "END"), ready,
                   scalar(request, "CORRID"), scalar(request, "INPUT") if ready else 0]
            output = np.array([row], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
"""

# implicit state with the python backend (tcli feeds OUTPUT_STATE back; Triton 2.51 does not)
STATE_CONFIG = """
name: "state_sequence"
backend: "python"
max_batch_size: 2
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred" name: "hundred" } } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
STATE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "INPUT_STATE").as_numpy()
            total = (state + value).astype(np.int32)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("OUTPUT_STATE", total)]))
        return responses
"""


def write_model(repo: Path, name: str, config: str, model: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(model)


def build_repository(repo: Path, *, short_idle: bool) -> Path:
    shutil.copytree(ROOT / "model_repository" / "simple_sequence", repo / "simple_sequence")
    write_model(repo, "dyna_sequence", DYNA_CONFIG, DYNA_MODEL)
    write_model(repo, "sequence_probe", PROBE_CONFIG, PROBE_MODEL)
    if short_idle:
        config = (repo / "simple_sequence" / "config.pbtxt").read_text()
        config = config.replace('name: "simple_sequence"', 'name: "short_idle"').replace(
            "sequence_batching {", "sequence_batching {\n  max_sequence_idle_microseconds: 100000"
        )
        (repo / "short_idle").mkdir()
        shutil.copytree(repo / "simple_sequence" / "1", repo / "short_idle" / "1")
        (repo / "short_idle" / "config.pbtxt").write_text(config)
        write_model(repo, "state_sequence", STATE_CONFIG, STATE_MODEL)
        (repo / "state_sequence" / "initial_state").mkdir()
        (repo / "state_sequence" / "initial_state" / "hundred").write_bytes(
            np.array([100], np.int32).tobytes()
        )
    return repo


# in-process: ModelManager + InferenceService ------------------------------------------------------
@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceService]:
    repo = build_repository(tmp_path_factory.mktemp("sequences"), short_idle=True)
    manager = ModelManager([repo], ControlMode.NONE)
    manager.load_startup()
    try:
        yield InferenceService(manager)
    finally:
        manager.shutdown(10)


def scheduler_of(service: InferenceService, model: str) -> SequenceScheduler:
    runner = service.manager.models()[model].versions[1].runner
    assert runner is not None and isinstance(runner.scheduler, SequenceScheduler)
    return runner.scheduler


def request(
    model: str, cid: int | str, value: int, start: bool = False, end: bool = False
) -> InferenceRequest:
    data = np.array([[value]], np.int32)
    return InferenceRequest(
        model,
        inputs=[Tensor("INPUT", "INT32", data.shape, data)],
        parameters={"sequence_id": cid, "sequence_start": start, "sequence_end": end},
    )


async def step(service: InferenceService, model: str, cid: int | str, value: int, **flags: bool) -> int:
    response = await service.infer(request(model, cid, value, **flags))
    return int(response.outputs[0].data.reshape(-1)[0])


async def sequence(service: InferenceService, model: str, cid: int | str, values: list[int]) -> list[int]:
    return [
        await step(service, model, cid, v, start=i == 0, end=i == len(values) - 1)
        for i, v in enumerate(values)
    ]


async def until(predicate: Callable[[], bool]) -> None:
    """Wait for the scheduler's own state to change (bounded by WAIT)."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)  # polling interval, not an assumed duration


def running_sums(values: list[int]) -> list[int]:
    return [int(v) for v in np.cumsum(values)]


def test_interleaved_sequences_on_simple_sequence(service: InferenceService) -> None:
    """30 concurrent sequences over 8 slots (so most start in the backlog), string and integer IDs."""
    ids: list[int | str] = [*range(1, 21), *(f"session-{n}" for n in range(10))]
    plans = {cid: [n * 10 + k for k in range(2 + n % 5)] for n, cid in enumerate(ids)}

    async def run() -> list[list[int]]:
        return await asyncio.gather(*(sequence(service, "simple_sequence", cid, plans[cid]) for cid in ids))

    results = asyncio.run(run())
    assert results == [running_sums(plans[cid]) for cid in ids]
    s = scheduler_of(service, "simple_sequence")
    assert s.sequences() == {} and s.backlogged() == [] and s.free_slots() == 8 and s.pending() == 0


def test_backlog_waits_for_an_end(service: InferenceService) -> None:
    s = scheduler_of(service, "simple_sequence")

    async def run() -> None:
        for cid in range(101, 109):
            assert await step(service, "simple_sequence", cid, cid, start=True) == cid
        assert s.free_slots() == 0
        waiting = asyncio.ensure_future(sequence(service, "simple_sequence", 200, [1, 2, 3]))
        await until(lambda: bool(s.backlogged()))  # the request reached the scheduler
        assert s.backlogged() == [200] and not waiting.done()
        assert await step(service, "simple_sequence", 104, 1, end=True) == 105
        assert await asyncio.wait_for(waiting, WAIT) == [1, 3, 6]
        for cid in (101, 102, 103, 105, 106, 107, 108):
            assert await step(service, "simple_sequence", cid, 0, end=True) == cid

    asyncio.run(run())
    assert s.sequences() == {} and s.free_slots() == 8


def test_errors_leave_no_slot_and_no_statistics_behind(service: InferenceService) -> None:
    s = scheduler_of(service, "simple_sequence")
    stats = service.manager.stats.get("simple_sequence", 1)
    before = stats.as_dict()

    async def run() -> list[str]:
        messages = []
        for bad in (request("simple_sequence", 0, 1, start=True), request("simple_sequence", 555, 1)):
            try:
                await service.infer(bad)
            except TritonError as exc:
                messages.append(exc.message)
        return messages

    assert asyncio.run(run()) == [
        "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID",
        "inference request for sequence 555 to model 'simple_sequence' must specify the START flag on the first "
        "request of the sequence",
    ]
    after = stats.as_dict()
    assert after["inference_count"] == before["inference_count"]
    assert after["execution_count"] == before["execution_count"]
    assert s.sequences() == {} and s.free_slots() == 8


def test_idle_sequence_is_released(service: InferenceService) -> None:
    s = scheduler_of(service, "short_idle")

    async def run() -> None:
        assert await step(service, "short_idle", 1, 5, start=True) == 5
        assert s.sequences() == {1: (0, 0)}
        await until(lambda: not s.sequences())  # the reaper: 100 ms idle
        await until(lambda: s.free_slots() == 8)  # then the instance releases the slot
        with pytest.raises(TritonError, match="must specify the START flag"):
            await step(service, "short_idle", 1, 6)
        assert await sequence(service, "short_idle", 1, [7, 8]) == [7, 15]

    asyncio.run(run())


def test_oldest_strategy_with_corrid(service: InferenceService) -> None:
    """Two instances x 3 candidate sequences, 12 concurrent sequences: the model keeps its sums by
    CORRID, and each END adds the ID, so every sequence must arrive whole and in order."""
    plans = {cid: [cid % 7 + k for k in range(1 + cid % 4)] for cid in range(1000, 1012)}

    async def run() -> dict[int, list[int]]:
        results = await asyncio.gather(
            *(sequence(service, "dyna_sequence", cid, plans[cid]) for cid in plans)
        )
        return dict(zip(plans, results, strict=True))

    results = asyncio.run(run())
    for cid, values in plans.items():
        expected = running_sums(values)
        expected[-1] += cid
        assert results[cid] == expected
    s = scheduler_of(service, "dyna_sequence")
    assert s.sequences() == {} and s.free_slots() == 6 and s.pending() == 0


def test_python_implicit_state(service: InferenceService) -> None:
    """INPUT_STATE starts from initial_state (a data file holding 100) and then is the previous
    OUTPUT_STATE; the state output (not a declared output) stays inside."""

    async def run() -> None:
        assert await asyncio.gather(
            sequence(service, "state_sequence", 1, [1, 2, 3]),
            sequence(service, "state_sequence", 2, [10, 20]),
        ) == [[101, 103, 106], [110, 130]]
        response = await service.infer(request("state_sequence", 3, 5, start=True, end=True))
        assert [t.name for t in response.outputs] == ["OUTPUT"]

    asyncio.run(run())


# ONNX with implicit state: null rows inside a merged batch ------------------------------------------
ONNX_CONFIG = """
name: "onnx_accumulator"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
default_model_filename: "model.onnx"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { name: "onnx_accumulator" kind: KIND_CPU count: 1 } ]
"""


def build_onnx_accumulator(path: Path) -> None:
    """OUTPUT_STATE = READY ? (START ? INPUT : INPUT_STATE + INPUT) : INPUT_STATE; OUTPUT = OUTPUT_STATE."""
    import onnx
    from onnx import TensorProto, helper

    def io(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])

    nodes = [
        helper.make_node("Add", ["INPUT_STATE", "INPUT"], ["sum"]),
        helper.make_node("Cast", ["START"], ["start"], to=TensorProto.BOOL),
        helper.make_node("Where", ["start", "INPUT", "sum"], ["next"]),
        helper.make_node("Cast", ["READY"], ["ready"], to=TensorProto.BOOL),
        helper.make_node("Where", ["ready", "next", "INPUT_STATE"], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
    ]
    inputs = [io(name) for name in ("INPUT", "START", "READY", "INPUT_STATE")]
    graph = helper.make_graph(nodes, "accumulator", inputs, [io("OUTPUT"), io("OUTPUT_STATE")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def test_onnx_implicit_state_with_null_rows(tmp_path: Path) -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from server.backends.base import ModelContext
    from server.scheduling.runner import ModelRunner
    from server.scheduling.stats import ModelStats

    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    model_dir = tmp_path / "onnx_accumulator"
    (model_dir / "1").mkdir(parents=True)
    build_onnx_accumulator(model_dir / "1" / "model.onnx")
    config = text_format.Parse(ONNX_CONFIG, mc.ModelConfig())
    stats = ModelStats("onnx_accumulator", "1")
    runner = ModelRunner(ModelContext(config, model_dir, 1, tmp_path), stats)
    runner.load()

    def infer(cid: int, value: int, start: bool = False, outputs: tuple[str, ...] = ()) -> dict[str, int]:
        done = threading.Event()
        box: list[InferenceResponse | TritonError] = []
        req = request("onnx_accumulator", cid, value, start=start)
        req.outputs = [RequestedOutput(name) for name in outputs]

        def complete(result: InferenceResponse | TritonError) -> None:
            box.append(result)
            done.set()

        runner.submit(req, complete)
        assert done.wait(WAIT)
        result = box[0]
        assert isinstance(result, InferenceResponse), result
        return {t.name: int(t.data.reshape(-1)[0]) for t in result.outputs}

    try:
        # sequences in slots 0, 1, 2; later requests of only some of them run with null rows around
        assert [infer(cid, cid * 100, start=True) for cid in (1, 2, 3)] == [
            {"OUTPUT": 100},
            {"OUTPUT": 200},
            {"OUTPUT": 300},
        ]
        assert infer(3, 5) == {"OUTPUT": 305}  # batch [null, null, 3]
        assert infer(2, 7, outputs=("OUTPUT", "OUTPUT_STATE")) == {"OUTPUT": 207, "OUTPUT_STATE": 207}
        assert infer(1, 1) == {"OUTPUT": 101}
        assert infer(3, 5) == {"OUTPUT": 310}
        # requests of all three in flight at once: the instance merges them into one batch
        with ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(lambda cid: infer(cid, 1)["OUTPUT"], (1, 2, 3)))
        assert outs == [102, 208, 311]
        got = stats.as_dict()
        assert got["inference_count"] == 10  # null rows are not inferences...
        rows = sum(b["batch_size"] * b["compute_infer"]["count"] for b in got["batch_stats"])
        assert rows > got["inference_count"]  # ...but they count in the executed batch sizes
    finally:
        runner.stop(10)


# against the real Triton 2.51 ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The same repository served by real Triton and by tcli (HTTP); addresses by name."""
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    repo = build_repository(tmp_path_factory.mktemp("sequences-reference"), short_idle=False)
    tcli: RunningServer = start_server(repo)
    try:
        with RealTriton(binary, repo) as triton:
            yield {"triton": triton.http_address, "tcli": tcli.url}
    finally:
        tcli.stop()


class HttpSteps:
    """Sequence steps over HTTP, one tritonclient per thread; `close()` closes them all (an open
    connection keeps a stopping Triton waiting)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._local = threading.local()
        self._clients: list[httpclient.InferenceServerClient] = []
        self._lock = threading.Lock()

    def __call__(self, model: str, cid: int | str, value: int, **flags: bool) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = httpclient.InferenceServerClient(self.address)
            with self._lock:
                self._clients.append(client)
        data = np.array([[value]], np.int32)
        tensor = httpclient.InferInput("INPUT", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        try:
            result = client.infer(model, [tensor], sequence_id=cid, **flags)
        except InferenceServerException as exc:
            return f"{exc.status()}: {exc.message()}"
        return result.as_numpy("OUTPUT").reshape(-1).tolist()

    def close(self) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()


def run_concurrently(call: HttpSteps, model: str, plans: dict[Any, list[int]]) -> dict[Any, list[Any]]:
    def one(cid: Any) -> list[Any]:
        values = plans[cid]
        return [
            call(model, cid, v, sequence_start=i == 0, sequence_end=i == len(values) - 1)
            for i, v in enumerate(values)
        ]

    with ThreadPoolExecutor(len(plans)) as pool:
        return dict(zip(plans, pool.map(one, plans), strict=True))


@pytest.mark.reference
def test_same_answers_as_triton_for_interleaved_sequences(both: dict[str, str]) -> None:
    plans: dict[Any, list[int]] = {cid: [cid, 1, -2, 3, cid % 5][: 2 + cid % 4] for cid in range(1, 13)}
    plans["text-id"] = [4, 4, 4]
    answers = {}
    for name, address in both.items():
        call = HttpSteps(address)
        try:
            answers[name] = (
                run_concurrently(call, "simple_sequence", plans),
                run_concurrently(
                    call, "dyna_sequence", {k: v for k, v in plans.items() if isinstance(k, int)}
                ),
            )
        finally:
            call.close()
    assert answers["tcli"] == answers["triton"]
    simple, dyna = answers["tcli"]
    assert simple == {cid: [[s] for s in running_sums(v)] for cid, v in plans.items()}
    assert dyna[5] == [[s] for s in running_sums(plans[5][:-1])] + [[sum(plans[5]) + 5]]


def settled_statistics(address: str, model: str, successes: int) -> dict[str, Any]:
    """The model's statistics once every success is counted (Triton records a request's statistics
    just after sending its response)."""
    client = httpclient.InferenceServerClient(address)
    deadline = time.monotonic() + WAIT
    try:
        while True:
            stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
            if stats["inference_stats"]["success"]["count"] >= successes or time.monotonic() > deadline:
                return stats
            time.sleep(0.01)  # polling interval, not an assumed duration
    finally:
        client.close()


@pytest.mark.reference
def test_same_batches_and_errors_as_triton(both: dict[str, str]) -> None:
    """Requests one at a time, so every execute() call is deterministic: batch size, position, START,
    END, READY, CORRID and INPUT as the probe model saw them, plus the errors and the statistics."""
    script: list[tuple[Any, int, dict[str, bool]]] = [
        (1, 10, {"sequence_start": True}),
        (2, 20, {"sequence_start": True}),
        (3, 30, {"sequence_start": True}),
        (2, 21, {}),
        (1, 11, {"sequence_end": True}),
        (3, 31, {}),
        (4, 40, {"sequence_start": True}),  # takes the slot sequence 1 freed
        (3, 32, {"sequence_end": True}),
        (4, 41, {}),
        (9, 90, {}),  # never started
        (0, 1, {"sequence_start": True}),  # no correlation ID
        (2, 22, {"sequence_end": True}),
        (4, 42, {"sequence_end": True}),
        (1, 12, {}),  # ended before
        ("text", 5, {"sequence_start": True, "sequence_end": True}),
    ]
    seen = {}
    for name, address in both.items():
        call = HttpSteps(address)
        try:
            answers = [call("sequence_probe", cid, value, **flags) for cid, value, flags in script]
        finally:
            call.close()
        stats = settled_statistics(address, "sequence_probe", sum(isinstance(a, list) for a in answers))
        batch_sizes = sorted((b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"])
        seen[name] = (
            answers,
            stats["inference_count"],
            stats["execution_count"],
            stats["inference_stats"]["success"]["count"],
            batch_sizes,
        )
    assert seen["tcli"] == seen["triton"]
    answers = seen["tcli"][0]
    assert answers[3] == [2, 1, 0, 0, 1, 2, 21]  # batch of 2: a null row for slot 0 first
    assert answers[9].startswith(
        "400: inference request for sequence 9 to model 'sequence_probe' must specify"
    )
