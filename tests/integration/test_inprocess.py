"""The in-process API (`tcli.inprocess`, used here under tritonserver's name as code ported from Triton
would): the example repository embedded in the test process, its answers compared with the same
models served by `tcli serve` in a process of its own and asked with tritonclient (HTTP; gRPC
streaming for the decoupled model, which HTTP cannot serve). No socket is opened unless asked; errors
come back as tritonserver's exception classes with the messages the wire answers carry; leaving
`with Server(...)` stops the server, its instances' processes and any request still in flight."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tcli.inprocess as tritonserver
from server.protocol.json_codec import decode_request
from tcli.inprocess._connection import Connection
from tests.integration.conftest import REPO, link_repository
from tests.integration.serve_process import ServeProcess

MODELS = [
    "add_sub",
    "simple",
    "simple_sequence",
    "repeat_int32",
    "digits_onnx",
    "digits_preprocess",
    "digits_ensemble",
]
WAIT = 60.0  # seconds a test waits for an answer before failing


# ports other tests in this pytest process left listening before this module's server started
_OTHERS: set[int] = set()


@pytest.fixture(scope="module")
def embedded() -> Iterator[tritonserver.Server]:
    _OTHERS.update(listening_ports())
    server = tritonserver.Server(
        model_repository=str(REPO),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        startup_models=MODELS,
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def served() -> Iterator[ServeProcess]:
    loads = [flag for model in MODELS for flag in ("--load-model", model)]
    process = ServeProcess("--model-repository", str(REPO), "--model-control-mode", "explicit", *loads)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(served: ServeProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        yield client
    finally:
        client.close()


def over_http(
    client: httpclient.InferenceServerClient,
    model: str,
    inputs: dict[str, np.ndarray[Any, Any]],
    **kwargs: Any,
) -> dict[str, np.ndarray[Any, Any]]:
    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), _wire(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors, **kwargs)
    return {output["name"]: result.as_numpy(output["name"]) for output in result.get_response()["outputs"]}


def in_process(
    server: tritonserver.Server, model: str, inputs: dict[str, np.ndarray[Any, Any]], **kwargs: Any
) -> dict[str, np.ndarray[Any, Any]]:
    responses = list(server.model(model).infer(inputs=inputs, **kwargs))
    assert len(responses) == 1 and responses[0].final
    return {name: np.from_dlpack(tensor) for name, tensor in responses[0].outputs.items()}


def _wire(array: np.ndarray[Any, Any]) -> str:
    return {"float32": "FP32", "int32": "INT32", "uint8": "UINT8", "uint32": "UINT32"}[array.dtype.name]


def assert_same(ours: dict[str, np.ndarray[Any, Any]], theirs: dict[str, np.ndarray[Any, Any]]) -> None:
    assert sorted(ours) == sorted(theirs)
    for name, array in theirs.items():
        assert ours[name].dtype == array.dtype and ours[name].shape == array.shape, name
        np.testing.assert_array_equal(ours[name], array)


# answers ---------------------------------------------------------------------------------------------
def test_add_sub_as_over_http(embedded: tritonserver.Server, http: httpclient.InferenceServerClient) -> None:
    inputs = {"INPUT0": np.arange(4, dtype=np.float32), "INPUT1": np.full(4, 0.5, np.float32)}
    ours = in_process(embedded, "add_sub", inputs, request_id="r1")
    assert_same(ours, over_http(http, "add_sub", inputs, request_id="r1"))
    np.testing.assert_array_equal(ours["OUTPUT0"], [0.5, 1.5, 2.5, 3.5])


def test_onnx_batch_and_ensemble_as_over_http(
    embedded: tritonserver.Server, http: httpclient.InferenceServerClient
) -> None:
    batch = {"INPUT0": np.arange(32, dtype=np.int32).reshape(2, 16), "INPUT1": np.ones((2, 16), np.int32)}
    assert_same(in_process(embedded, "simple", batch), over_http(http, "simple", batch))
    image = {"RAW_IMAGE": np.random.default_rng(7).integers(0, 255, (3, 8, 8), dtype=np.uint8)}
    assert_same(in_process(embedded, "digits_ensemble", image), over_http(http, "digits_ensemble", image))


def test_a_sequence_as_over_http(
    embedded: tritonserver.Server, http: httpclient.InferenceServerClient
) -> None:
    values = [0, 11, 7, 5]
    ours, theirs = [], []
    for step, value in enumerate(values):
        inputs = {"INPUT": np.full((1, 1), value, np.int32)}
        first, last = step == 0, step == len(values) - 1
        # Triton's in-process names: correlation_id and flags (1 starts, 2 ends)
        flags = (tritonserver.RequestFlag.SEQUENCE_START if first else 0) | (
            tritonserver.RequestFlag.SEQUENCE_END if last else 0
        )
        ours.append(in_process(embedded, "simple_sequence", inputs, correlation_id=71, flags=flags)["OUTPUT"])
        answer = over_http(
            http, "simple_sequence", inputs, sequence_id=71, sequence_start=first, sequence_end=last
        )
        theirs.append(answer["OUTPUT"])
    assert [int(a[0][0]) for a in ours] == [int(a[0][0]) for a in theirs] == [0, 11, 18, 23]
    # tritonclient's names work too, with a string id
    for step, value in enumerate(values):
        inputs = {"INPUT": np.full((1, 1), value, np.int32)}
        answer = in_process(
            embedded,
            "simple_sequence",
            inputs,
            sequence_id="seq-a",
            sequence_start=step == 0,
            sequence_end=step == len(values) - 1,
        )
        assert int(answer["OUTPUT"][0][0]) == [0, 11, 18, 23][step]


def repeat_inputs(values: list[int], delays: list[int] | None = None) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "IN": np.array(values, np.int32),
        "DELAY": np.array(delays or [0] * len(values), np.uint32),
        "WAIT": np.zeros(1, np.uint32),
    }


def over_grpc_stream(
    url: str, inputs: dict[str, np.ndarray[Any, Any]]
) -> list[dict[str, np.ndarray[Any, Any]]]:
    """A decoupled model's responses over gRPC ModelStreamInfer, through the flags-only final one."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), _wire(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    received = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer("repeat_int32", tensors, enable_empty_final_response=True)
            while True:
                result, error = answers.get(timeout=WAIT)
                assert error is None, error
                response = result.get_response()
                received.append({o.name: result.as_numpy(o.name) for o in response.outputs})
                if response.parameters["triton_final_response"].bool_param:
                    break
        finally:
            client.stop_stream()
    return received


def test_a_decoupled_stream_as_over_grpc(embedded: tritonserver.Server, served: ServeProcess) -> None:
    inputs = repeat_inputs([4, 5, 6])
    responses = list(embedded.model("repeat_int32").infer(inputs=inputs))
    assert [r.final for r in responses] == [False, False, False, True]
    ours = [{name: np.from_dlpack(t) for name, t in r.outputs.items()} for r in responses]
    theirs = over_grpc_stream(served.grpc_url, inputs)
    assert len(ours) == len(theirs) == 4
    for mine, other in zip(ours, theirs, strict=True):
        assert_same(mine, other)
    assert [int(r["OUT"][0]) for r in ours[:3]] == [4, 5, 6]


def test_async_infer_streams_a_decoupled_model(embedded: tritonserver.Server) -> None:
    async def collect() -> list[tritonserver.InferenceResponse]:
        extra: asyncio.Queue[tritonserver.InferenceResponse] = asyncio.Queue()
        model = embedded.model("repeat_int32")
        responses = [r async for r in model.async_infer(inputs=repeat_inputs([1, 2]), response_queue=extra)]
        assert extra.qsize() == len(responses)  # tritonserver's response_queue gets each one too
        return responses

    responses = asyncio.run(asyncio.wait_for(collect(), WAIT))
    assert [int(np.from_dlpack(r.outputs["OUT"])[0]) for r in responses if r.outputs] == [1, 2]
    assert responses[-1].final and not responses[-1].outputs


def test_async_infer_of_many_requests_at_once(embedded: tritonserver.Server) -> None:
    async def one(model: tritonserver.Model, i: int) -> float:
        inputs = {"INPUT0": np.full(4, i, np.float32), "INPUT1": np.ones(4, np.float32)}
        async for response in model.async_infer(inputs=inputs):
            return float(np.from_dlpack(response.outputs["OUTPUT0"])[0])
        raise AssertionError("no response")

    async def many() -> list[float]:
        model = embedded.model("add_sub")
        return list(await asyncio.gather(*(one(model, i) for i in range(16))))

    assert asyncio.run(asyncio.wait_for(many(), WAIT)) == [i + 1.0 for i in range(16)]


def test_bytes_in_and_out(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["simple_identity"])
    with tritonserver.Server(model_repository=repository) as server:
        (response,) = server.model("simple_identity").infer(inputs={"INPUT0": np.array([["héllo", "x"]])})
        assert response.outputs["OUTPUT0"].to_bytes_array().tolist() == [["héllo".encode(), b"x"]]
        assert response.outputs["OUTPUT0"].to_string_array().tolist() == [["héllo", "x"]]
        with pytest.raises(tritonserver.InvalidArgumentError, match="to_bytes_array"):  # as tritonserver
            np.from_dlpack(response.outputs["OUTPUT0"])


# what the model says of itself ---------------------------------------------------------------------
def test_metadata_config_and_statistics_as_over_http(
    embedded: tritonserver.Server, http: httpclient.InferenceServerClient
) -> None:
    model = embedded.model("simple")
    assert model.ready() and embedded.ready() and embedded.live()
    assert model.metadata() == http.get_model_metadata("simple")
    assert model.config() == http.get_model_config("simple")
    assert embedded.metadata()["name"] == http.get_server_metadata()["name"]
    assert model.batch_properties() == tritonserver.ModelBatchFlag.FIRST_DIM
    assert (
        embedded.model("repeat_int32").transaction_properties() == tritonserver.ModelTxnPropertyFlag.DECOUPLED
    )
    before = model.statistics()["model_stats"][0]["inference_count"]
    in_process(
        embedded, "simple", {"INPUT0": np.ones((3, 16), np.int32), "INPUT1": np.ones((3, 16), np.int32)}
    )
    stats = model.statistics()
    assert stats.keys() == http.get_inference_statistics("simple").keys()
    assert stats["model_stats"][0]["inference_count"] == before + 3
    assert 'nv_inference_count{model="simple",version="1"}' in embedded.metrics()  # as /metrics says it
    assert ("add_sub", 1) in embedded.models(exclude_not_ready=True)
    assert embedded.models()["densenet_onnx"].version == -1  # in the repository, not loaded


def test_custom_metrics_are_reported_with_the_servers(embedded: tritonserver.Server) -> None:
    family = tritonserver.MetricFamily(tritonserver.MetricKind.COUNTER, "app_requests", "requests seen")
    counter = tritonserver.Metric(family, labels={"route": "chat"})
    counter.increment(3)
    gauge = tritonserver.Metric(tritonserver.MetricFamily(tritonserver.MetricKind.GAUGE, "app_load", "load"))
    gauge.set_value(0.5)  # the series keeps its family alive, as tritonserver's does
    assert counter.value == 3 and counter.kind == tritonserver.MetricKind.COUNTER and gauge.value == 0.5
    text = embedded.metrics()
    assert 'app_requests{route="chat"} 3' in text and "app_load 0.5" in text
    assert "# HELP app_requests requests seen" in text
    with pytest.raises(tritonserver.UnsupportedError, match="COUNTER does not support Set"):
        counter.set_value(1)
    with pytest.raises(tritonserver.InvalidArgumentError, match="monotonically by non-negative values"):
        counter.increment(-1)
    with pytest.raises(tritonserver.InvalidArgumentError, match="different type"):
        tritonserver.MetricFamily(tritonserver.MetricKind.GAUGE, "app_requests", "same name, other kind")
    del counter, family, gauge
    assert "app_requests" not in embedded.metrics()  # gone with its last holder


def test_unload_and_load(embedded: tritonserver.Server) -> None:
    embedded.unload("digits_onnx", wait_until_unloaded=True, timeout=WAIT)
    assert not embedded.model("digits_onnx").ready()
    assert embedded.models()[("digits_onnx", 1)].state == "UNAVAILABLE"
    with pytest.raises(tritonserver.NotFoundError, match="has no available versions"):
        list(embedded.model("digits_onnx").infer(inputs={"input": np.zeros((1, 1, 8, 8), np.float32)}))
    model = embedded.load("digits_onnx")
    assert model.ready()
    (response,) = model.infer(inputs={"input": np.zeros((1, 1, 8, 8), np.float32)})
    assert np.from_dlpack(response.outputs["probabilities"]).shape == (1, 10)


# errors ----------------------------------------------------------------------------------------------
def http_error(call: Any) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return str(caught.value.message())


def test_errors_are_tritonserver_classes_with_the_wire_messages(
    embedded: tritonserver.Server, http: httpclient.InferenceServerClient
) -> None:
    with pytest.raises(tritonserver.NotFoundError) as unknown:
        list(embedded.model("no_such_model").infer(inputs={"X": np.zeros(1, np.float32)}))
    assert str(unknown.value) == http_error(
        lambda: over_http(http, "no_such_model", {"X": np.zeros(1, np.float32)})
    )

    wrong = {"INPUT0": np.zeros(4, np.int32), "INPUT1": np.zeros(4, np.float32)}
    with pytest.raises(tritonserver.InvalidArgumentError) as bad_type:
        list(embedded.model("add_sub").infer(inputs=wrong))
    assert str(bad_type.value) == http_error(lambda: over_http(http, "add_sub", wrong))
    assert isinstance(bad_type.value, tritonserver.TritonError)

    # a model's own error, in a decoupled stream: raised, or handed back with raise_on_error=False
    mismatched = {**repeat_inputs([1, 2]), "DELAY": np.zeros(1, np.uint32)}
    with pytest.raises(tritonserver.InvalidArgumentError, match="DELAY must have the shape of IN"):
        list(embedded.model("repeat_int32").infer(inputs=mismatched))
    responses = list(embedded.model("repeat_int32").infer(inputs=mismatched, raise_on_error=False))
    assert isinstance(responses[0].error, tritonserver.InvalidArgumentError)
    assert responses[-1].final

    with pytest.raises(tritonserver.InvalidArgumentError, match="input 'INPUT0': dict is not supported"):
        embedded.model("add_sub").infer(inputs={"INPUT0": {}})
    with pytest.raises(tritonserver.UnavailableError, match="POLL"):
        embedded.poll_model_repository()


def test_a_sequence_error_as_over_http(
    embedded: tritonserver.Server, http: httpclient.InferenceServerClient
) -> None:
    # the sequence batcher's own check: a new sequence must start with the START flag (the two
    # servers are separate processes, so the same id is new to each)
    inputs = {"INPUT": np.ones((1, 1), np.int32)}
    with pytest.raises(tritonserver.InvalidArgumentError) as caught:
        in_process(embedded, "simple_sequence", inputs, correlation_id=9001)
    assert str(caught.value) == http_error(
        lambda: over_http(http, "simple_sequence", inputs, sequence_id=9001)
    )


def test_a_request_reads_as_the_same_request_over_http() -> None:
    """What the server receives: tritonclient's HTTP body decoded by the server's JSON codec, against
    the in-process request with the same id, inputs, controls and parameters."""
    data = np.arange(4, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [4], "FP32")
    tensor.set_data_from_numpy(data)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        [tensor],
        request_id="r7",
        sequence_id=5,
        sequence_start=True,
        priority=2,
        timeout=1000,
        parameters={"k": "v"},
    )
    wire, _ = decode_request(body, "add_sub", header_length=json_size)
    ours = tritonserver.InferenceRequest(
        model=tritonserver.Model(Connection(), "add_sub"),
        request_id="r7",
        correlation_id=5,
        flags=tritonserver.RequestFlag.SEQUENCE_START,
        priority=2,
        timeout=1000,
        inputs={"INPUT0": data},
        parameters={"k": "v"},
    ).to_server()
    assert (ours.model_name, ours.model_version, ours.id) == (wire.model_name, wire.model_version, wire.id)
    assert ours.parameters == wire.parameters
    assert [(t.name, t.datatype, t.shape) for t in ours.inputs] == [
        (t.name, t.datatype, t.shape) for t in wire.inputs
    ]
    np.testing.assert_array_equal(ours.inputs[0].data, wire.inputs[0].data)
    assert not ours.inputs[0].data.flags.writeable  # a model cannot write into the caller's array


def test_options_mistakes_name_the_fix() -> None:
    with pytest.raises(tritonserver.InvalidArgumentError, match="Model repository must be specified"):
        tritonserver.Server().start()
    with pytest.raises(
        tritonserver.InvalidArgumentError, match="'no_such_flag' is not a setting of tcli serve"
    ):
        tritonserver.Server(model_repository="x", server_settings={"no_such_flag": 1}).start()
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        tritonserver.Server(model_repository="x").models()


def test_cancel_ends_a_stream_with_a_cancelled_error(embedded: tritonserver.Server) -> None:
    # the second response is 60 s away: the request is surely still running when it is cancelled
    responses = embedded.model("repeat_int32").infer(inputs=repeat_inputs([1, 2], [0, 60000]))
    first = next(responses)
    assert int(np.from_dlpack(first.outputs["OUT"])[0]) == 1
    responses.cancel()
    with pytest.raises(tritonserver.CancelledError) as cancelled:
        next(responses)
    assert isinstance(cancelled.value, tritonserver.UnknownError)  # what tritonserver raises for it
    assert list(responses) == []


# sockets and life ------------------------------------------------------------------------------------
def listening_ports() -> set[int]:
    """This process's listening ports, less those other tests had open before this module began."""
    ports = {c.laddr.port for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN}
    return ports - _OTHERS


def test_no_socket_unless_asked(embedded: tritonserver.Server, tmp_path: Path) -> None:
    assert listening_ports() == set()  # the embedded server serves the whole module without one
    repository = link_repository(tmp_path / "models", ["add_sub"])
    with tritonserver.Server(model_repository=repository, http_port=0, grpc_port=0) as server:
        assert server.http_port is not None and server.grpc_port is not None
        assert listening_ports() == {server.http_port, server.grpc_port}
        inputs = {"INPUT0": np.arange(4, dtype=np.float32), "INPUT1": np.ones(4, np.float32)}
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            assert_same(in_process(server, "add_sub", inputs), over_http(client, "add_sub", inputs))
        finally:
            client.close()
    assert listening_ports() == set()


def test_with_stops_the_server_its_processes_and_requests_in_flight(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["add_sub", "repeat_int32"])
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    threads_before = {t.ident for t in threading.enumerate()}
    server = tritonserver.Server(model_repository=repository, exit_timeout=1)
    with server:
        assert server.model("add_sub").ready()
        started = {p.pid for p in me.children(recursive=True)} - children_before
        assert started, "python instances run in processes of their own by default"
        pending = server.model("repeat_int32").infer(inputs=repeat_inputs([1, 2], [0, 60000]))
        assert int(np.from_dlpack(next(pending).outputs["OUT"])[0]) == 1
    # the request still in flight was ended, not left waiting
    with pytest.raises(tritonserver.UnavailableError, match="stopped before the request finished"):
        next(pending)
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        server.ready()
    alive = [p for p in psutil.Process().children(recursive=True) if p.pid in started]
    assert not alive, alive
    assert not [
        t for t in threading.enumerate() if t.ident not in threads_before and t.name == "tcli-server-loop"
    ]


def test_start_fails_on_a_model_that_does_not_load(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["add_sub"])
    broken = repository / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 0\n')
    (broken / "1" / "model.py").write_text("raise RuntimeError('cannot import me')\n")
    with pytest.raises(tritonserver.InternalError, match="failed to load all models"):
        tritonserver.Server(model_repository=repository).start()
    # exit_on_error=False: it serves what loaded, as `tcli serve --exit-on-error=false`
    with tritonserver.Server(model_repository=repository, exit_on_error=False) as server:
        assert server.model("add_sub").ready() and not server.model("broken").ready()
        with pytest.raises(
            tritonserver.UnavailableError, match="explicit model load / unload is not allowed"
        ):
            server.load("add_sub")
