"""The gRPC front end on a real server (port 0), driven by the real tritonclient.grpc clients (sync,
asyncio and streaming) as Triton users drive Triton, and by the generated stub for what the client
library never sends (typed `contents`, odd version strings). Status codes and messages are the ones
the real Triton 2.51 answers with."""

from __future__ import annotations

import asyncio
import json
import queue
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_fixtures import RunningGrpcServer, grpc_server
from tests.torch_needed import requires_torch

__all__ = ["grpc_server"]  # the fixture, re-exported for pytest


@pytest.fixture(scope="module")
def client(grpc_server: RunningGrpcServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(grpc_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def stub(grpc_server: RunningGrpcServer) -> Iterator[Any]:
    with grpc.insecure_channel(grpc_server.url) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def status_of(error: InferenceServerException) -> str:
    return str(error.status()).removeprefix("StatusCode.")


def simple_inputs(batch: int = 1) -> tuple[list[grpcclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def add_sub_inputs(
    module: Any = grpcclient,
) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([0.5, 0.5, 1, 1], dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def digits(count: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    return (data.images[:count] * 255 / 16), data.target[:count]


# ------------------------------------------------------------------------------------ health, metadata
def test_health(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert client.is_model_ready("simple", "1")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("simple", "7")


def test_standard_health_service(grpc_server: RunningGrpcServer) -> None:
    with grpc.insecure_channel(grpc_server.url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"") == b"\x08\x01"  # status: SERVING
        assert check(b"\x0a\x07unknown") == b"\x08\x01"  # any service name, as Triton answers
        try:
            from grpc_health.v1 import health_pb2, health_pb2_grpc
        except ImportError:
            return
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_standard_health_service_follows_readiness(grpc_server: RunningGrpcServer) -> None:
    service = grpc_server.service
    with grpc.insecure_channel(grpc_server.url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        service.accepting = False
        try:
            assert check(b"") == b"\x08\x02"  # NOT_SERVING
        finally:
            service.accepting = True
        assert check(b"") == b"\x08\x01"


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "triton"
    assert metadata["version"] == "2.51.0"
    assert {"classification", "sequence", "model_repository", "statistics"} <= set(metadata["extensions"])


def test_model_metadata(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple")
    assert (metadata.name, list(metadata.versions), metadata.platform) == (
        "simple",
        ["1"],
        "onnxruntime_onnx",
    )
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert [t.name for t in metadata.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_the_completed_config(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple").config
    assert (config.name, config.max_batch_size, config.backend) == ("simple", 8, "onnxruntime")
    assert [list(i.dims) for i in config.input] == [[16], [16]]
    assert config.instance_group[0].kind == config.instance_group[0].KIND_CPU
    assert config.version_policy.latest.num_versions == 1
    as_json = client.get_model_config("digits_ensemble", as_json=True)["config"]
    assert [step["model_name"] for step in as_json["ensemble_scheduling"]["step"]] == [
        "digits_preprocess",
        "digits_onnx",
    ]


def test_metadata_errors(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_metadata("nope")
    assert status_of(caught.value) == "NOT_FOUND"
    assert caught.value.message() == "Request for unknown model: 'nope' is not found"
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_config("simple", "x")
    assert status_of(caught.value) == "INVALID_ARGUMENT"
    assert caught.value.message() == (
        "failed to get model version from specified version string 'x' (details: stol), version should "
        "be an integral value > 0"
    )


# ------------------------------------------------------------------------------------ inference
def test_infer_simple_onnx(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs(batch=2)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs, request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("simple", "1", "r-1")


def test_infer_only_the_requested_output(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    result = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@requires_torch
def test_infer_torchscript_and_the_ensemble_with_classification(
    client: grpcclient.InferenceServerClient,
) -> None:
    images, truth = digits(8)
    tensor = grpcclient.InferInput("INPUT__0", [8, 1, 8, 8], "FP32")
    tensor.set_data_from_numpy(images.astype(np.float32)[:, np.newaxis])
    probabilities = client.infer("digits_torchscript", [tensor]).as_numpy("OUTPUT__0")
    assert probabilities.shape == (8, 10)
    assert (probabilities.argmax(axis=1) == truth).sum() >= 7

    raw = grpcclient.InferInput("RAW_IMAGE", [8, 8, 8], "UINT8")
    raw.set_data_from_numpy(images.astype(np.uint8))
    result = client.infer(
        "digits_ensemble", [raw], outputs=[grpcclient.InferRequestedOutput("probabilities", class_count=2)]
    )
    top = result.as_numpy("probabilities")
    assert top.shape == (8, 2)
    score, index, label = top[0][0].decode().split(":")
    assert float(score) > 0 and index == label  # digits_labels.txt line i is "i"
    assert sum(int(row[0].decode().split(":")[1]) == t for row, t in zip(top, truth, strict=True)) >= 7


def test_infer_python_models(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = add_sub_inputs()
    result = client.infer("add_sub", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)

    strings = np.array([[b"hello", b"\xff\x00binary", b""]], dtype=object)
    tensor = grpcclient.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(strings)
    echoed = client.infer("simple_identity", [tensor]).as_numpy("OUTPUT0")
    assert echoed.tolist() == strings.tolist()


def test_tensors_larger_than_grpcs_default_4_mib_limit(client: grpcclient.InferenceServerClient) -> None:
    big = np.array([[b"x" * (6 * 2**20)]], dtype=object)
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    tensor.set_data_from_numpy(big)
    echoed = client.infer("simple_identity", [tensor]).as_numpy("OUTPUT0")
    assert len(echoed[0][0]) == 6 * 2**20


def test_typed_contents_as_other_clients_send_them(stub: Any) -> None:
    Input = pb.ModelInferRequest.InferInputTensor
    request = pb.ModelInferRequest(
        model_name="add_sub",
        id="typed",
        inputs=[
            Input(
                name="INPUT0",
                datatype="FP32",
                shape=[4],
                contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]),
            ),
            Input(
                name="INPUT1",
                datatype="FP32",
                shape=[4],
                contents=pb.InferTensorContents(fp32_contents=[1, 1, 1, 1]),
            ),
        ],
    )
    response = stub.ModelInfer(request)
    assert response.id == "typed"
    assert not any(o.HasField("contents") for o in response.outputs)  # data only in raw_output_contents
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [2, 3, 4, 5]


def test_infer_errors(client: grpcclient.InferenceServerClient, stub: Any) -> None:
    inputs, _, _ = simple_inputs()
    with pytest.raises(InferenceServerException) as caught:
        client.infer("nope", inputs)
    assert status_of(caught.value) == "NOT_FOUND"
    assert caught.value.message() == "Request for unknown model: 'nope' is not found"

    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", inputs[:1], request_id="m1")
    assert status_of(caught.value) == "INVALID_ARGUMENT"
    assert caught.value.message() == (
        "[request id: m1] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
    )

    wrong = grpcclient.InferInput("INPUT0", [1, 8], "INT32")
    wrong.set_data_from_numpy(np.zeros((1, 8), np.int32))
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", [wrong, inputs[1]])
    assert status_of(caught.value) == "INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]" in (
        caught.value.message() or ""
    )

    twice = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT0")]
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", inputs, outputs=twice, request_id="m2")
    assert status_of(caught.value) == "INVALID_ARGUMENT"
    assert caught.value.message() == "[request id: m2] output 'OUTPUT0' already exists in request"

    huge = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="INT32", shape=[2**4, 2**60 + 2])
    huge.contents.int_contents.append(1)
    with pytest.raises(grpc.RpcError) as raw_error:
        stub.ModelInfer(pb.ModelInferRequest(model_name="simple", inputs=[huge]))
    assert raw_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "causes total element count to exceed maximum size of 9223372036854775807" in (
        raw_error.value.details() or ""
    )

    request = pb.ModelInferRequest(
        model_name="simple",
        inputs=[pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="INT32", shape=[1, 16])],
    )
    with pytest.raises(grpc.RpcError) as raw_error:
        stub.ModelInfer(request)
    assert raw_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        raw_error.value.details()
        == "unable to find data for input tensor 'INPUT0' for model 'simple' in request."
    )

    # a request for a model that is not there says so, whatever else is wrong with it
    request.model_name = "nope"
    with pytest.raises(grpc.RpcError) as raw_error:
        stub.ModelInfer(request)
    assert raw_error.value.code() == grpc.StatusCode.NOT_FOUND


def test_asyncio_client(grpc_server: RunningGrpcServer) -> None:
    async def run() -> None:
        async with grpcclient_aio.InferenceServerClient(grpc_server.url) as aio_client:
            assert await aio_client.is_server_ready()
            metadata = await aio_client.get_model_metadata("simple", as_json=True)
            assert metadata["name"] == "simple"
            inputs, a, b = simple_inputs()
            aio_inputs = []
            for tensor, array in zip(inputs, (a, b), strict=True):
                aio_tensor = grpcclient_aio.InferInput(tensor.name(), list(array.shape), "INT32")
                aio_tensor.set_data_from_numpy(array)
                aio_inputs.append(aio_tensor)
            results = await asyncio.gather(*(aio_client.infer("simple", aio_inputs) for _ in range(8)))
            for result in results:
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            with pytest.raises(InferenceServerException) as caught:
                await aio_client.infer("nope", aio_inputs)
            assert status_of(caught.value) == "NOT_FOUND"

    asyncio.run(run())


# ------------------------------------------------------------------------------------ streaming
def test_stream_a_sequence_with_start_and_end(client: grpcclient.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        values = [5, 3, 2, 10]
        for sequence_id in (1001, "corr-str"):
            for step, value in enumerate(values):
                tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
                client.async_stream_infer(
                    "simple_sequence",
                    [tensor],
                    request_id=f"{sequence_id}-{step}",
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == len(values) - 1,
                )
        received = [answers.get(timeout=30) for _ in range(2 * len(values))]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in received)
    ids = [result.get_response().id for result, _ in received]
    assert ids == [f"{s}-{i}" for s in (1001, "corr-str") for i in range(4)]  # request order
    sums = [int(result.as_numpy("OUTPUT")[0][0]) for result, _ in received]
    assert sums == [5, 8, 10, 20, 5, 8, 10, 20]
    final = received[0][0].get_response().parameters["triton_final_response"]
    assert final.bool_param is True


def test_stream_errors_do_not_close_the_stream(client: grpcclient.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        inputs, a, b = simple_inputs()
        client.async_stream_infer("nope", inputs, request_id="bad-model")
        client.async_stream_infer("simple", inputs[:1], request_id="missing")
        client.async_stream_infer("simple", inputs, request_id="good")
        received = [answers.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
    (_, first), (_, second), (good, third) = received
    assert isinstance(first, InferenceServerException)
    assert first.message() == "Request for unknown model: 'nope' is not found"
    assert isinstance(second, InferenceServerException)
    assert "missing required input(s) ['INPUT1']" in (second.message() or "")
    assert third is None
    np.testing.assert_array_equal(good.as_numpy("OUTPUT0"), a + b)


def test_an_inference_request_looks_its_model_up_once(
    grpc_server: RunningGrpcServer, client: grpcclient.InferenceServerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ModelInfer and each ModelStreamInfer request take the service's admission and hand it to the
    inference: one lookup of the model per request."""
    manager = grpc_server.manager
    lookups: list[str] = []
    resolve, models = manager.resolve, manager.models
    monkeypatch.setattr(manager, "resolve", lambda *a: lookups.append("resolve") or resolve(*a))
    monkeypatch.setattr(manager, "models", lambda: lookups.append("models") or models())
    inputs, _, _ = simple_inputs()
    client.infer("simple", inputs)
    assert lookups == ["resolve"]
    lookups.clear()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("simple", inputs, request_id="one")
        client.async_stream_infer("simple", inputs, request_id="two")
        received = [answers.get(timeout=30) for _ in range(2)]
    finally:
        client.stop_stream()
    assert [error for _, error in received] == [None, None]
    assert lookups == ["resolve", "resolve"]


def test_stream_with_the_asyncio_client(grpc_server: RunningGrpcServer) -> None:
    inputs, a, b = simple_inputs()

    async def run() -> list[tuple[Any, Any]]:
        async def requests() -> Any:
            for index in range(5):
                yield {"model_name": "simple", "inputs": inputs, "request_id": str(index)}

        async with grpcclient_aio.InferenceServerClient(grpc_server.url) as aio_client:
            return [answer async for answer in aio_client.stream_infer(requests())]

    answers = asyncio.run(run())
    assert all(error is None for _, error in answers)
    assert [result.get_response().id for result, _ in answers] == ["0", "1", "2", "3", "4"]
    for result, _ in answers:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


# ------------------------------------------------------------------------------------ repository, stats
@requires_torch
def test_statistics_count_inferences(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple").model_stats[0].inference_count
    inputs, _, _ = simple_inputs(batch=3)
    client.infer("simple", inputs)
    stats = client.get_inference_statistics("simple", "1").model_stats
    assert [(s.name, s.version) for s in stats] == [("simple", "1")]
    assert stats[0].inference_count == before + 3
    assert stats[0].inference_stats.success.count >= 1
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"simple", "digits_torchscript"} <= {s["name"] for s in every}


@requires_torch
def test_repository_index_load_and_unload(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index().models
    assert ("digits_torchscript", "1", "READY") in {(m.name, m.version, m.state) for m in index}
    client.unload_model("digits_torchscript")
    assert not client.is_model_ready("digits_torchscript")
    ready = client.get_model_repository_index(as_json=True).get("models", [])
    assert all(row.get("state") != "READY" for row in ready if row["name"] == "digits_torchscript")
    client.load_model("digits_torchscript")
    assert client.is_model_ready("digits_torchscript")

    config = client.get_model_config("digits_onnx", as_json=True)["config"]
    # the served config's preferred batch size is its max_batch_size (Triton's completion): a smaller
    # max_batch_size needs a smaller preferred size too, as Triton requires
    batching = {**config["dynamic_batching"], "preferred_batch_size": [16]}
    try:
        client.load_model(
            "digits_onnx", config=json.dumps({**config, "max_batch_size": 16, "dynamic_batching": batching})
        )
        assert client.get_model_config("digits_onnx").config.max_batch_size == 16
        client.load_model("digits_onnx")  # its files unchanged: the override stays, as in Triton
        assert client.get_model_config("digits_onnx").config.max_batch_size == 16
    finally:
        client.unload_model("digits_onnx")  # then a load reads its files again
        client.load_model("digits_onnx")
    assert client.get_model_config("digits_onnx").config.max_batch_size == 64


def test_repository_errors(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.RepositoryIndex(pb.RepositoryIndexRequest(repository_name="other"))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert caught.value.details() == "'repository_name' specification is not supported"
    request = pb.RepositoryModelLoadRequest(model_name="simple")
    request.parameters["config"].int64_param = 1
    with pytest.raises(grpc.RpcError) as caught:
        stub.RepositoryModelLoad(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "invalid value type for load parameter 'config', expected string_param."


# ------------------------------------------------------------------------------------ shared memory
def test_system_shared_memory(client: grpcclient.InferenceServerClient) -> None:
    key = f"/tcli-grpc-{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("io", key, 64)
    try:
        a = np.array([1, 2, 3, 4], dtype=np.float32)
        b = np.array([4, 3, 2, 1], dtype=np.float32)
        shm.set_shared_memory_region(handle, [a, b])
        client.register_system_shared_memory("io", key, 64)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]["io"]
        assert (status["key"], int(status["byte_size"])) == (key, 64)
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_shared_memory("io", 16)
        inputs[1].set_shared_memory("io", 16, offset=16)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("io", 16, offset=32)
        result = client.infer("add_sub", inputs, outputs=[output])
        assert result.get_response().raw_output_contents[0] == b""
        np.testing.assert_allclose(shm.get_contents_as_numpy(handle, np.float32, [4], offset=32), a + b)
        client.unregister_system_shared_memory("io")
        assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
        with pytest.raises(InferenceServerException) as caught:
            client.get_system_shared_memory_status("io")
        assert status_of(caught.value) == "NOT_FOUND"
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(handle)


def test_cuda_shared_memory_without_a_gpu(client: grpcclient.InferenceServerClient) -> None:
    assert client.get_cuda_shared_memory_status(as_json=True).get("regions", {}) == {}
    with pytest.raises(InferenceServerException) as caught:
        client.register_cuda_shared_memory("gpu", b"\x00" * 64, 0, 64)
    assert status_of(caught.value) == "UNIMPLEMENTED"
    assert caught.value.message() == "failed to register CUDA shared memory region: 'gpu', GPUs not supported"
    client.unregister_cuda_shared_memory()


# ------------------------------------------------------------------------------------ logging, trace
def test_log_settings(client: grpcclient.InferenceServerClient, stub: Any) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
    assert updated["log_verbose_level"] == {"uint32_param": 1}
    client.update_log_settings({"log_verbose_level": 0})
    request = pb.LogSettingsRequest()
    request.settings["log_info"].string_param = "yes"
    with pytest.raises(grpc.RpcError) as caught:
        stub.LogSettings(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "expect boolean for 'log_info'"


def test_trace_settings(client: grpcclient.InferenceServerClient) -> None:
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"] == {"value": ["OFF"]}
    updated = client.update_trace_settings("simple", {"trace_count": "7"}, as_json=True)["settings"]
    assert updated["trace_count"] == {"value": ["7"]}
    cleared = client.update_trace_settings("simple", {"trace_count": None}, as_json=True)["settings"]
    assert cleared["trace_count"] == {"value": ["-1"]}
    with pytest.raises(InferenceServerException) as caught:
        client.get_trace_settings("nope")
    assert status_of(caught.value) == "INVALID_ARGUMENT"
    assert caught.value.message() == "Request for unknown model : nope"


# ------------------------------------------------------------------------------------ serving
def test_message_size_limit_is_configurable(grpc_server: RunningGrpcServer) -> None:
    from server.frontends.grpc import serve_grpc

    def on_server_loop(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, grpc_server.loop).result(timeout=30)

    implementation = grpc_server.server.settings.grpc_implementation
    small = on_server_loop(
        serve_grpc(grpc_server.service, "127.0.0.1", 0, max_message_size=2**20, implementation=implementation)
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{small.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="simple", raw_input_contents=[b"\x00" * 2 * 2**20])
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelInfer(request)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.ServerLive(pb.ServerLiveRequest()).live
    finally:
        on_server_loop(small.shutdown())
    with pytest.raises(OSError, match="could not bind"):  # a port in use is an error
        on_server_loop(
            serve_grpc(grpc_server.service, "127.0.0.1", grpc_server.port, implementation=implementation)
        )
