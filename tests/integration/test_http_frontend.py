"""The HTTP front end on a real server (port 0), driven by the real tritonclient.http client as Triton users
drive Triton, and by raw httpx requests for what a client library never sends (malformed bodies, wrong
methods, oversized or compressed bodies). Error answers are the ones the real Triton 2.51 gives, except
that malformed input is always a 4xx, never a 500."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.integration.conftest import RunningServer
from tests.torch_needed import requires_torch


@pytest.fixture(scope="module")
def client(http_server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(http_server.url, concurrency=2)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def raw(http_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=http_server.base_url, timeout=30) as session:
        yield session


@pytest.fixture(scope="module")
def raw_small(small_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=small_server.base_url, timeout=30) as session:
        yield session


def simple_inputs(
    batch: int = 1, binary: bool = True
) -> tuple[list[httpclient.InferInput], np.ndarray, np.ndarray]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 3, dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs, a, b


def digits(count: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (data.images[:count] * 255 / 16).astype(np.float32)[:, np.newaxis, :, :]
    return images, data.target[:count]


def error_body(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    return str(body["error"])


# ------------------------------------------------------------------------------------ health, metadata
def test_health_and_server_metadata(client: httpclient.InferenceServerClient, raw: httpx.Client) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    assert {"binary_tensor_data", "classification", "statistics", "model_repository"} <= set(
        metadata["extensions"]
    )
    for path in ("/v2/health/live", "/v2/health/ready"):
        response = raw.get(path)
        assert (response.status_code, response.content) == (200, b"")


def test_model_metadata_config_and_readiness(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple")
    assert metadata["name"] == "simple" and metadata["versions"] == ["1"]
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.get_model_metadata("simple", "1")["versions"] == ["1"]
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8 and config["input"][0]["data_type"] == "TYPE_INT32"
    assert (
        client.get_model_config("densenet_onnx", "1")["output"][0]["label_filename"] == "densenet_labels.txt"
    )
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "7")
    assert not client.is_model_ready("no_such_model")
    with pytest.raises(
        InferenceServerException, match="Request for unknown model: 'no_such_model' is not found"
    ):
        client.get_model_metadata("no_such_model")


# ------------------------------------------------------------------------------------ inference
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_simple(client: httpclient.InferenceServerClient, binary: bool) -> None:
    inputs, a, b = simple_inputs(batch=2, binary=binary)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs, request_id="req-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (
        response["id"] == "req-1" and response["model_name"] == "simple" and response["model_version"] == "1"
    )
    kinds = {o["name"]: ("data" in o, "parameters" in o) for o in response["outputs"]}
    assert kinds == {n: (not binary, binary) for n in ("OUTPUT0", "OUTPUT1")}


def test_infer_default_outputs_one_output_and_async(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    result = client.infer("simple", inputs)  # no outputs named: all of them, binary
    assert {o["name"] for o in result.get_response()["outputs"]} == {"OUTPUT0", "OUTPUT1"}
    result = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    pending = [client.async_infer("simple", inputs, request_id=str(i)) for i in range(4)]
    for index, request in enumerate(pending):
        result = request.get_result()
        assert result.get_response()["id"] == str(index)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_infer_with_compressed_request_and_response(client: httpclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs()
    for request_algorithm, response_algorithm in (("gzip", "deflate"), ("deflate", "gzip")):
        result = client.infer(
            "simple",
            inputs,
            request_compression_algorithm=request_algorithm,
            response_compression_algorithm=response_algorithm,
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@requires_torch
def test_classification_with_labels(client: httpclient.InferenceServerClient) -> None:
    images, truth = digits(8)
    results = {}
    for model, input_name, output_name in (
        ("digits_onnx", "input", "probabilities"),
        ("digits_torchscript", "INPUT__0", "OUTPUT__0"),
    ):
        tensor = httpclient.InferInput(input_name, list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        top = client.infer(
            model, [tensor], outputs=[httpclient.InferRequestedOutput(output_name, class_count=3)]
        )
        classes = top.as_numpy(output_name)
        assert classes.shape == (8, 3)
        value, index, label = classes[0][0].decode().split(":")
        assert float(value) > 0.5 and label == index  # digits_labels.txt line i is "i"
        results[model] = [int(row[0].decode().split(":")[1]) for row in classes]
    assert results["digits_onnx"] == results["digits_torchscript"]
    assert sum(p == t for p, t in zip(results["digits_onnx"], truth, strict=True)) >= 7


def test_classification_on_a_non_batching_model(client: httpclient.InferenceServerClient) -> None:
    image = np.random.default_rng(0).random((3, 224, 224), dtype=np.float32)
    tensor = httpclient.InferInput("data_0", [3, 224, 224], "FP32")
    tensor.set_data_from_numpy(image)
    output = httpclient.InferRequestedOutput("fc6_1", binary_data=False, class_count=2)
    result = client.infer("densenet_onnx", [tensor], outputs=[output])
    response = result.get_response()["outputs"][0]
    assert (response["datatype"], response["shape"]) == ("BYTES", [2])
    first, second = (entry.split(":") for entry in response["data"])
    assert len(first) == 3 and float(first[0]) >= float(second[0])


def test_python_models_json_binary_and_bytes(client: httpclient.InferenceServerClient) -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    y = np.ones(4, dtype=np.float32)
    for binary in (True, False):
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(x, binary_data=binary)
        inputs[1].set_data_from_numpy(y, binary_data=binary)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + y)
    strings = np.array([[b"hello", b"", "caf\u00e9".encode()]], dtype=object)
    for binary in (True, False):
        tensor = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        tensor.set_data_from_numpy(strings, binary_data=binary)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
        result = client.infer("simple_identity", [tensor], outputs=[output])
        received = [
            item if isinstance(item, bytes) else item.encode() for item in result.as_numpy("OUTPUT0").flat
        ]
        assert received == list(strings.flat)  # tritonclient reads JSON strings as str, binary as bytes


def test_raw_binary_request(raw: httpx.Client) -> None:
    images, _ = digits(1)
    response = raw.post(
        "/v2/models/digits_onnx/infer",
        content=images[0].tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    header = json.loads(response.content[:length])
    assert header["outputs"][0]["shape"] == [1, 10] and header["outputs"][0]["parameters"] == {
        "binary_data_size": 40
    }
    probabilities = np.frombuffer(response.content[length:], np.float32)
    assert abs(float(probabilities.sum()) - 1.0) < 1e-4
    response = raw.post(
        "/v2/models/simple/infer", content=b"\0" * 64, headers={"Inference-Header-Content-Length": "0"}
    )
    assert response.status_code == 400
    assert (
        "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple'"
        in error_body(response)
    )


def test_an_inference_request_looks_its_model_up_once(
    http_server: RunningServer,
    client: httpclient.InferenceServerClient,
    raw: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The front end takes the service's admission and hands it to infer: one lookup of the model per
    request, a raw binary one (read with the model's config) included."""
    manager = http_server.manager
    lookups: list[str] = []
    resolve, models = manager.resolve, manager.models
    monkeypatch.setattr(manager, "resolve", lambda *a: lookups.append("resolve") or resolve(*a))
    monkeypatch.setattr(manager, "models", lambda: lookups.append("models") or models())
    client.infer("simple", simple_inputs()[0])
    assert lookups == ["resolve"]
    lookups.clear()
    images, _ = digits(1)
    headers = {"Inference-Header-Content-Length": "0"}
    assert (
        raw.post("/v2/models/digits_onnx/infer", content=images[0].tobytes(), headers=headers).status_code
        == 200
    )
    assert lookups == ["resolve"]


def test_system_shared_memory(client: httpclient.InferenceServerClient) -> None:
    key = f"/tcli_test_{uuid.uuid4().hex[:8]}"
    region = shm.create_shared_memory_region("io", key, 256)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.full((1, 16), 2, dtype=np.int32)
        shm.set_shared_memory_region(region, [a, b])
        client.register_system_shared_memory("io", key, 256)
        status = client.get_system_shared_memory_status()
        assert status == [{"name": "io", "key": key, "offset": 0, "byte_size": 256}]
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("io", 64)
        inputs[1].set_shared_memory("io", 64, offset=64)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("io", 64, offset=128)
        outputs[1].set_shared_memory("io", 64, offset=192)
        result = client.infer("simple", inputs, outputs=outputs)
        # written to shared memory, not sent: the answer names the output only (as Triton 2.51 does)
        assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
        written = shm.get_contents_as_numpy(region, np.int32, [4, 16])
        np.testing.assert_array_equal(written[2], (a + b)[0])
        np.testing.assert_array_equal(written[3], (a - b)[0])
        outputs[0].set_shared_memory("io", 64, offset=250)
        with pytest.raises(
            InferenceServerException, match="Invalid offset \\+ byte size for shared memory region: 'io'"
        ):
            client.infer("simple", inputs, outputs=outputs)
        client.unregister_system_shared_memory("io")
        assert client.get_system_shared_memory_status() == []
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'io'"):
            client.infer("simple", inputs)
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)


# ------------------------------------------------------------------------------------ extensions
def test_statistics(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple")["model_stats"][0]["inference_count"]
    inputs, _, _ = simple_inputs(batch=3)
    client.infer("simple", inputs)
    stats = client.get_inference_statistics("simple", "1")["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("simple", "1")]
    assert stats[0]["inference_count"] == before + 3
    assert stats[0]["inference_stats"]["success"]["count"] >= 1
    every = client.get_inference_statistics()["model_stats"]
    assert {"simple", "digits_onnx"} <= {s["name"] for s in every}


def test_logging_settings(client: httpclient.InferenceServerClient) -> None:
    settings = client.get_log_settings()
    assert settings["log_info"] is True and settings["log_format"] in ("default", "ISO8601")
    try:
        assert client.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
        assert client.get_log_settings()["log_verbose_level"] == 1
    finally:
        client.update_log_settings({"log_verbose_level": settings["log_verbose_level"]})


def test_trace_settings(client: httpclient.InferenceServerClient) -> None:
    global_rate = client.get_trace_settings()["trace_rate"]
    try:
        updated = client.update_trace_settings(model_name="simple", settings={"trace_rate": "7"})
        assert updated["trace_rate"] == "7"
        assert client.get_trace_settings(model_name="simple")["trace_rate"] == "7"
        assert client.get_trace_settings()["trace_rate"] == global_rate
        reset = client.update_trace_settings(model_name="simple", settings={"trace_rate": None})
        assert reset["trace_rate"] == global_rate
    finally:
        client.update_trace_settings(model_name="simple", settings={"trace_rate": None})
    with pytest.raises(InferenceServerException, match="Request for unknown model : no_such_model"):
        client.get_trace_settings(model_name="no_such_model")


@requires_torch
def test_repository_index_load_and_unload(
    client: httpclient.InferenceServerClient, raw: httpx.Client
) -> None:
    index = client.get_model_repository_index()
    assert {"name": "digits_torchscript", "version": "1", "state": "READY"} in index
    client.unload_model("digits_torchscript")
    assert not client.is_model_ready("digits_torchscript")
    ready = raw.post("/v2/repository/index", json={"ready": True}).json()
    assert "simple" in {row["name"] for row in ready}
    assert "digits_torchscript" not in {row["name"] for row in ready}
    with pytest.raises(InferenceServerException, match="digits_torchscript"):
        client.get_model_metadata("digits_torchscript")
    client.load_model("digits_torchscript")
    assert client.is_model_ready("digits_torchscript")

    config = client.get_model_config("digits_onnx")
    # the served config's preferred batch size is its max_batch_size (Triton's completion): a smaller
    # max_batch_size needs a smaller preferred size too, as Triton requires
    batching = {**config["dynamic_batching"], "preferred_batch_size": [16]}
    try:
        client.load_model(
            "digits_onnx", config=json.dumps({**config, "max_batch_size": 16, "dynamic_batching": batching})
        )
        assert client.get_model_config("digits_onnx")["max_batch_size"] == 16
        client.load_model("digits_onnx")  # its files unchanged: the override stays, as in Triton
        assert client.get_model_config("digits_onnx")["max_batch_size"] == 16
    finally:
        client.unload_model("digits_onnx")  # then a load reads its files again
        client.load_model("digits_onnx")
    assert client.get_model_config("digits_onnx")["max_batch_size"] == 64
    with pytest.raises(InferenceServerException, match="failed to load 'no_such_model'"):
        client.load_model("no_such_model")


# ------------------------------------------------------------------------------------ raw HTTP errors
def test_unknown_routes_and_wrong_methods(raw: httpx.Client) -> None:
    for path in (
        "/",
        "/v2/",
        "/v2/health",
        "/v2/models/simple/",
        "/v2/models/simple/foo",
        "/v2/models/simple/versions/1/trace/setting",
    ):
        response = raw.get(path)
        assert (response.status_code, error_body(response)) == (404, "Not Found"), path
    for method, path in (
        ("POST", "/v2/health/live"),
        ("POST", "/v2"),
        ("GET", "/v2/models/simple/infer"),
        ("POST", "/v2/models/simple/ready"),
        ("GET", "/v2/repository/index"),
        ("POST", "/v2/models/stats"),
        ("PUT", "/v2/logging"),
        ("DELETE", "/v2/trace/setting"),
        ("POST", "/v2/systemsharedmemory/status"),
        ("GET", "/v2/systemsharedmemory/region/r/register"),
    ):
        response = raw.request(method, path)
        assert (response.status_code, error_body(response)) == (405, "Method Not Allowed"), (method, path)


def test_model_errors(raw: httpx.Client) -> None:
    response = raw.get("/v2/models/no_such_model")
    assert (response.status_code, error_body(response)) == (
        404,
        "Request for unknown model: 'no_such_model' is not found",
    )
    response = raw.get("/v2/models/simple/versions/9/config")
    assert (response.status_code, error_body(response)) == (
        404,
        "Request for unknown model: 'simple' version 9 is not found",
    )
    response = raw.get("/v2/models/no_such_model/ready")
    assert (response.status_code, response.json()) == (400, {"error": "Model version not ready"})
    # an unknown model is reported as such whatever the body
    response = raw.post("/v2/models/no_such_model/infer", content=b"garbage")
    assert (response.status_code, error_body(response)) == (
        404,
        "Request for unknown model: 'no_such_model' is not found",
    )


def _json_infer(raw: httpx.Client, body: Any, model: str = "simple", **kwargs: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return raw.post(f"/v2/models/{model}/infer", content=content, **kwargs)


def _simple_json(**input0: Any) -> dict[str, Any]:
    first = {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16)), **input0}
    second = {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}
    return {"inputs": [first, second]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"inputs": [', "failed to parse the request JSON buffer: "),
        (
            _simple_json(data=list(range(15))),
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (_simple_json(datatype="NOPE"), "invalid datatype for input INPUT0"),
        (
            _simple_json(shape=[2**40, 16]),
            "JSON input 'INPUT0' has a byte_size (70368744177664 bytes) that exceeds the maximum allowed value",
        ),
        (
            _simple_json(shape=[-1, 16]),
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            _simple_json(data=["a"] * 16),
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        ({"inputs": {}}, "Unable to parse 'inputs': attempt to access JSON non-array as array"),
        (
            {**_simple_json(), "parameters": {"triton_flag": True}},
            "parameter keys starting with 'triton_' are reserved",
        ),
        (
            _simple_json(shape=[1, 15], data=list(range(15))),
            "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15].",
        ),
    ],
)
def test_malformed_json_inference_is_a_400(raw: httpx.Client, body: Any, message: str) -> None:
    response = _json_infer(raw, body)
    assert response.status_code == 400
    assert error_body(response).startswith(message)


def _binary_request(
    sizes: tuple[int, int], blob: bytes, shape: list[int] | None = None
) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": shape or [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": size},
                }
                for name, size in zip(("INPUT0", "INPUT1"), sizes, strict=True)
            ]
        }
    ).encode()
    return header + blob, {"Inference-Header-Content-Length": str(len(header))}


def test_malformed_binary_inference_is_a_400(raw: httpx.Client) -> None:
    tensor = np.arange(16, dtype=np.int32).tobytes()
    cases = [
        (
            (64, 64),
            tensor + tensor[:32],
            "unexpected size for input 'INPUT1', expecting 32 additional bytes for model 'simple'",
        ),
        ((64, 64), tensor + tensor + b"extra", "unexpected additional input data for model 'simple'"),
        (
            (64, 60),
            tensor + tensor[:60],
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60",
        ),
    ]
    for sizes, blob, message in cases:
        body, headers = _binary_request(sizes, blob)
        response = raw.post("/v2/models/simple/infer", content=body, headers=headers)
        assert (response.status_code, error_body(response)) == (400, message)
    body, headers = _binary_request((64, 64), tensor + tensor, shape=[2**40, 16])
    response = raw.post("/v2/models/simple/infer", content=body, headers=headers)
    assert response.status_code == 400 and "input byte size mismatch for input 'INPUT0'" in error_body(
        response
    )
    body, _ = _binary_request((64, 64), tensor + tensor)
    for value, message in (
        ("100000", f"inference header size should be in range (0, {len(body)}), got: 100000"),
        ("-3", f"inference header size should be in range (0, {len(body)}), got: -3"),
        ("abc", "Unable to parse Inference-Header-Content-Length, got: abc"),
    ):
        response = raw.post(
            "/v2/models/simple/infer", content=body, headers={"Inference-Header-Content-Length": value}
        )
        assert (response.status_code, error_body(response)) == (400, message)


def test_compression_of_request_and_response_bodies(raw: httpx.Client) -> None:
    body = json.dumps(_simple_json()).encode()
    expected = np.arange(16) + 1
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        response = _json_infer(
            raw, packed, headers={"Content-Encoding": encoding, "Accept-Encoding": "identity"}
        )
        assert response.status_code == 200 and "content-encoding" not in response.headers
        assert response.json()["outputs"][0]["data"] == expected.tolist()
    response = _json_infer(raw, body, headers={"Accept-Encoding": "deflate;q=0.5, gzip;q=0.9"})
    assert response.headers["content-encoding"] == "gzip"
    assert response.json()["outputs"][0]["data"] == expected.tolist()  # httpx inflates it
    response = _json_infer(raw, body, headers={"Content-Encoding": "br"})
    assert (response.status_code, error_body(response)) == (501, "Unsupported compression type")
    assert response.headers["accept-encoding"] == "gzip, deflate"
    response = _json_infer(raw, b"not gzip", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 400 and "unable to decompress the request body" in error_body(response)


def test_repository_and_shared_memory_errors(raw: httpx.Client) -> None:
    response = raw.post("/v2/repository/index", json={"ready": "yes"})
    assert (response.status_code, error_body(response)) == (
        400,
        "Invalid value for 'ready': expected a boolean",
    )
    response = raw.post("/v2/repository/other/models/simple/load")
    assert (response.status_code, error_body(response)) == (
        501,
        "'repository_name' specification is not supported",
    )
    response = raw.post(
        "/v2/repository/models/simple/unload", json={"parameters": {"unload_dependents": "x"}}
    )
    assert response.status_code == 400
    response = raw.get("/v2/systemsharedmemory/region/none/status")
    assert (response.status_code, error_body(response)) == (
        404,
        "Unable to find system shared memory region: 'none'",
    )
    response = raw.post(
        "/v2/systemsharedmemory/region/r/register", json={"key": "/../../etc/passwd", "byte_size": 4}
    )
    assert (response.status_code, error_body(response)) == (
        400,
        "Unable to open shared memory region: '/../../etc/passwd'",
    )
    response = raw.post("/v2/systemsharedmemory/region/r/register", json={"key": "/x"})
    assert (response.status_code, error_body(response)) == (
        400,
        "Shared memory register request has no 'byte_size' field",
    )
    assert raw.get("/v2/cudasharedmemory/status").json() == []
    response = raw.post(
        "/v2/cudasharedmemory/region/g/register",
        json={"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 4},
    )
    assert response.status_code == 501 and "GPUs not supported" in error_body(response)


def test_garbage_never_gets_a_500(raw: httpx.Client) -> None:
    bodies = [
        b"",
        b"null",
        b"[]",
        b"{}",
        b'{"inputs": [null, 1, "x"]}',
        b'{"inputs": [{"name": [], "shape": {}}]}',
        b"\xff\xfe",
        b"{" * 5000,
    ]
    paths = [
        "/v2/models/simple/infer",
        "/v2/repository/index",
        "/v2/repository/models/no_such_model/unload",
        "/v2/logging",
        "/v2/trace/setting",
    ]
    for path in paths:
        for body in bodies:
            response = raw.post(
                path,
                content=body,
                headers={"Inference-Header-Content-Length": "3"} if body == b"null" else {},
            )
            assert response.status_code < 500, (path, body[:20], response.text)


# ------------------------------------------------------------------------------------ server options
def test_oversized_bodies_are_refused(raw_small: httpx.Client) -> None:
    big = json.dumps({**_simple_json(), "id": "x" * 70_000}).encode()
    response = _json_infer(raw_small, big)
    assert (response.status_code, error_body(response)) == (
        400,
        f"request JSON size of {len(big)} bytes exceeds the maximum allowed input size of 65536 bytes. Use "
        "--http-max-input-size to increase the limit.",
    )
    response = _json_infer(raw_small, gzip.compress(big), headers={"Content-Encoding": "gzip"})
    assert (
        response.status_code == 400
        and "exceeds the maximum allowed input size of 65536 bytes" in error_body(response)
    )
    response = _json_infer(raw_small, _simple_json())
    assert response.status_code == 200


def test_chunked_request_bodies(raw: httpx.Client, raw_small: httpx.Client) -> None:
    body = json.dumps(_simple_json()).encode()

    def pieces(data: bytes, size: int) -> Iterator[bytes]:
        for start in range(0, len(data), size):
            yield data[start : start + size]

    response = raw.post("/v2/models/simple/infer", content=pieces(body, 100))
    assert response.status_code == 200 and response.json()["outputs"][0]["data"] == list(range(1, 17))
    big = json.dumps({**_simple_json(), "id": "x" * 70_000}).encode()
    response = raw_small.post("/v2/models/simple/infer", content=pieces(big, 8192))
    assert (
        response.status_code == 400
        and "exceeds the maximum allowed input size of 65536 bytes" in error_body(response)
    )


def test_client_shared_memory_is_off_by_default(raw_small: httpx.Client) -> None:
    message = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
    response = raw_small.post(
        "/v2/systemsharedmemory/region/r/register", json={"key": "/k", "offset": 0, "byte_size": 16}
    )
    assert (response.status_code, error_body(response)) == (503, message)
    assert raw_small.get("/v2/systemsharedmemory/status").json() == []
    body = _simple_json()
    body["inputs"][0] = {
        "name": "INPUT0",
        "shape": [1, 16],
        "datatype": "INT32",
        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64},
    }
    response = _json_infer(raw_small, body)
    assert (response.status_code, error_body(response)) == (503, message)


def test_model_control_refused_outside_explicit_mode(raw_small: httpx.Client) -> None:
    response = raw_small.post("/v2/repository/models/simple/unload")
    assert (response.status_code, error_body(response)) == (
        503,
        "explicit model load / unload is not allowed if polling is enabled (this server runs with "
        "--model-control-mode none; start it with --model-control-mode explicit to load and unload models)",
    )


def test_bytes_length_prefix_is_checked_over_http(raw: httpx.Client) -> None:
    blob = struct.pack("<I", 1) + b"a" + struct.pack("<I", 100)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 2],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(blob)},
                }
            ]
        }
    ).encode()
    response = raw.post(
        "/v2/models/simple/infer",
        content=header + blob,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert (response.status_code, error_body(response)) == (
        400,
        "incomplete string data for inference input 'INPUT0', expecting string of length 100 but only 0 bytes available",
    )


# ------------------------------------------------------------------------------------ against real Triton
def _binary_add_sub(
    sizes: tuple[int, int], blob: bytes, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    header = json.dumps(
        {
            "inputs": [
                {"name": name, "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": size}}
                for name, size in zip(("INPUT0", "INPUT1"), sizes, strict=True)
            ],
            **(extra or {}),
        }
    ).encode()
    return {"content": header + blob, "headers": {"Inference-Header-Content-Length": str(len(header))}}


def _add_sub_json(**changes: Any) -> dict[str, Any]:
    first = {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    second = {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]}
    body: dict[str, Any] = {"inputs": [{**first, **changes.pop("input0", {})}, second], **changes}
    return {"content": json.dumps(body).encode()}


_FOUR = np.arange(4, dtype=np.float32).tobytes()
_INFER = "/v2/models/add_sub/infer"
# (method, path, request arguments): real Triton 2.51 and tcli must answer alike, except that where
# Triton answers malformed input with a 500, tcli answers 400 with the same message.
DIFFERENTIAL_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v2/health/live", {}),
    ("GET", "/v2/health/ready", {}),
    ("GET", "/v2/models/add_sub", {}),
    ("GET", "/v2/models/add_sub/versions/1", {}),
    ("GET", "/v2/models/add_sub/versions/2", {}),
    ("GET", "/v2/models/nope", {}),
    ("GET", "/v2/models/add_sub/ready", {}),
    ("GET", "/v2/models/add_sub/versions/3/ready", {}),
    ("GET", "/v2/models/nope/ready", {}),
    ("GET", "/v2/", {}),
    ("GET", "/v2/foo", {}),
    ("GET", "/v2/models/add_sub/versions/x", {}),
    ("GET", "/v2/models/add_sub/versions/1/trace/setting", {}),
    ("POST", "/v2", {}),
    ("POST", "/v2/health/ready", {}),
    ("GET", _INFER, {}),
    ("POST", "/v2/models/add_sub/ready", {}),
    ("GET", "/v2/repository/index", {}),
    ("POST", "/v2/repository/index", {}),
    ("POST", "/v2/repository/models/add_sub/load", {}),
    ("POST", "/v2/repository/other/models/add_sub/unload", {}),
    ("GET", "/v2/logging", {}),
    ("POST", "/v2/logging", {"json": {}}),
    ("GET", "/v2/trace/setting", {}),
    ("GET", "/v2/models/nope/trace/setting", {}),
    ("GET", "/v2/systemsharedmemory/status", {}),
    ("GET", "/v2/systemsharedmemory/region/r/status", {}),
    ("POST", "/v2/systemsharedmemory/register", {"json": {"key": "/k", "offset": 0, "byte_size": 16}}),
    ("POST", "/v2/systemsharedmemory/region/r/register", {"json": {"offset": 0, "byte_size": 16}}),
    ("POST", "/v2/systemsharedmemory/region/r/register", {"json": {"key": "/k"}}),
    ("POST", "/v2/systemsharedmemory/region/r/unregister", {}),
    ("GET", "/v2/cudasharedmemory/status", {}),
    ("POST", _INFER, _add_sub_json()),
    ("POST", _INFER, _add_sub_json(id="abc", parameters={"custom": 1}, outputs=[{"name": "OUTPUT1"}])),
    ("POST", _INFER, _add_sub_json(input0={"data": [[1, 2], [3, 4]]})),
    ("POST", _INFER, _add_sub_json(outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}])),
    (
        "POST",
        _INFER,
        _add_sub_json(
            outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2, "binary_data": True}}]
        ),
    ),
    ("POST", _INFER, _add_sub_json(parameters={"binary_data_output": True})),
    ("POST", _INFER, _binary_add_sub((16, 16), _FOUR + _FOUR)),
    (
        "POST",
        _INFER,
        _binary_add_sub(
            (16, 16),
            _FOUR + _FOUR,
            {"outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}]},
        ),
    ),
    ("POST", _INFER, _binary_add_sub((16, 16), _FOUR + _FOUR[:8])),
    ("POST", _INFER, _binary_add_sub((16, 16), _FOUR + _FOUR + b"xx")),
    ("POST", _INFER, _binary_add_sub((12, 16), _FOUR[:12] + _FOUR)),
    ("POST", _INFER, _binary_add_sub((-16, 16), _FOUR + _FOUR)),
    (
        "POST",
        _INFER,
        {
            **_binary_add_sub((16, 16), _FOUR + _FOUR),
            "headers": {"Inference-Header-Content-Length": "100000"},
        },
    ),
    ("POST", _INFER, _add_sub_json(input0={"data": [1, 2, 3]})),
    ("POST", _INFER, _add_sub_json(input0={"data": [1, 2, "a", 4]})),
    ("POST", _INFER, _add_sub_json(input0={"datatype": "FOO"})),
    ("POST", _INFER, _add_sub_json(input0={"datatype": "FP16"})),
    ("POST", _INFER, _add_sub_json(input0={"datatype": "BF16"})),
    ("POST", _INFER, _add_sub_json(input0={"datatype": "INT32"})),
    ("POST", _INFER, _add_sub_json(input0={"shape": [-4]})),
    ("POST", _INFER, _add_sub_json(input0={"parameters": {"binary_data_size": 16}})),
    (
        "POST",
        _INFER,
        _add_sub_json(input0={"data": None, "name": "INPUT0"})
        | {"content": b'{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32"}]}'},
    ),
    (
        "POST",
        _INFER,
        {"content": b'{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[1,2,3,4]}'},
    ),
    ("POST", _INFER, {"content": b"[1]"}),
    ("POST", _INFER, {"content": b'{"inputs":{}}'}),
    ("POST", _INFER, {"content": b'{"inputs":[]}'.replace(b"[]", b"[1,2]")}),
    ("POST", _INFER, _add_sub_json(id=5)),
    ("POST", _INFER, _add_sub_json(parameters={"triton_x": 1})),
    ("POST", _INFER, _add_sub_json(parameters={"x": [1]})),
    ("POST", _INFER, _add_sub_json(parameters={"sequence_start": "true"})),
    ("POST", _INFER, _add_sub_json(parameters={"priority": -1})),
    ("POST", _INFER, _add_sub_json(parameters=[1])),
    ("POST", _INFER, _add_sub_json(outputs=[{"name": "NOPE"}])),
    ("POST", _INFER, _add_sub_json(outputs={})),
    ("POST", _INFER, _add_sub_json(outputs=[{"parameters": {}}])),
    ("POST", _INFER, _add_sub_json(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}])),
    ("POST", _INFER, _add_sub_json(outputs=[{"name": "OUTPUT0", "parameters": {"classification": -2}}])),
    (
        "POST",
        _INFER,
        _add_sub_json(
            outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2, "shared_memory_region": "r"}}]
        ),
    ),
    (
        "POST",
        _INFER,
        _add_sub_json(
            outputs=[
                {
                    "name": "OUTPUT0",
                    "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 16},
                }
            ]
        ),
    ),
    ("POST", _INFER, {"content": _add_sub_json()["content"], "headers": {"Content-Encoding": "br"}}),
    (
        "POST",
        _INFER,
        {"content": gzip.compress(_add_sub_json()["content"]), "headers": {"Content-Encoding": "gzip"}},
    ),
    ("POST", "/v2/models/nope/infer", {"content": b"garbage"}),
    (
        "POST",
        "/v2/models/simple_identity/infer",
        {"content": b"hello", "headers": {"Inference-Header-Content-Length": "0"}},
    ),
    (
        "POST",
        "/v2/models/simple_identity/infer",
        {
            "json": {
                "id": "r1",
                "inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "BYTES", "data": ["ab", "c"]}],
            }
        },
    ),
    (
        "POST",
        "/v2/models/simple_identity/infer",
        {"json": {"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "BYTES", "data": ["ab", "c"]}]}},
    ),
    ("POST", _INFER, {"content": b'{"inputs":[]}', "headers": {"Inference-Header-Content-Length": "0"}}),
]


@pytest.mark.reference
def test_answers_match_real_triton(tmp_path_factory: pytest.TempPathFactory) -> None:
    from server.repository.manager import ControlMode
    from tests.integration.conftest import link_repository, start_server
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    repository = link_repository(tmp_path_factory.mktemp("diff") / "models", ["add_sub", "simple_identity"])
    ours = start_server(repository, ControlMode.NONE, allow_client_shm=True)
    try:
        with RealTriton(binary, repository) as triton:
            mismatches = []
            theirs_url = f"http://{triton.http_address}"
            with httpx.Client(timeout=30) as session:
                for method, path, arguments in DIFFERENTIAL_CASES:
                    headers = {"Accept-Encoding": "identity", **arguments.get("headers", {})}
                    call = {k: v for k, v in arguments.items() if k != "headers"}
                    expected = session.request(method, theirs_url + path, headers=headers, **call)
                    actual = session.request(method, ours.base_url + path, headers=headers, **call)
                    status = 400 if expected.status_code == 500 else expected.status_code
                    same_header = expected.headers.get(
                        "inference-header-content-length"
                    ) == actual.headers.get("inference-header-content-length")
                    if (status, _comparable(expected)) != (
                        actual.status_code,
                        _comparable(actual),
                    ) or not same_header:
                        mismatches.append(
                            f"{method} {path} {str(call)[:150]}\n  triton {expected.status_code} "
                            f"{expected.content[:300]!r}\n  tcli   {actual.status_code} {actual.content[:300]!r}"
                        )
        assert not mismatches, "\n".join(mismatches)
    finally:
        ours.stop()


def _comparable(response: httpx.Response) -> Any:
    """A response body as compared: JSON documents parsed (key order does not matter), binary tails
    as bytes, and JSON parser messages only up to the parser's own wording."""
    length = response.headers.get("inference-header-content-length")
    head, tail = (
        (response.content, b"")
        if length is None
        else (response.content[: int(length)], response.content[int(length) :])
    )
    try:
        document = json.loads(head) if head else None
    except ValueError:
        return response.content
    prefix = "failed to parse the request JSON buffer:"
    if isinstance(document, dict) and str(document.get("error", "")).startswith(prefix):
        document = {"error": prefix}
    # DIFFERENCE (README, model commands): tcli keeps Triton's words and adds the server's mode and the fix
    polling = "explicit model load / unload is not allowed if polling is enabled"
    if isinstance(document, dict) and str(document.get("error", "")).startswith(polling):
        document = {"error": polling}
    return document, tail


# ------------------------------------------------------------------ connection handling on /infer
# Inference requests take a shorter path than the other routes (server/frontends/http/fast_path.py);
# these check that it keeps HTTP/1.1's connection rules: pipelining in order, Connection: close,
# HTTP/1.0, a client that leaves before its answer.


def _infer_request(target: str, body: bytes, *extra: str, version: str = "HTTP/1.1") -> bytes:
    head = [f"POST {target} {version}", "Host: tcli", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _read_response(stream: Any) -> tuple[int, dict[str, str], bytes]:
    """One response from a socket's file object: status, headers (lower-cased names), body."""
    status = int(stream.readline().split()[1])
    headers = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers.get("content-length", "0")))
    return status, headers, body


def _connect(server: RunningServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def test_pipelined_requests_are_answered_in_order(small_server: RunningServer) -> None:
    first = json.dumps({**_simple_json(), "id": "first"}).encode()
    second = json.dumps({**_simple_json(), "id": "second"}).encode()
    wrong = json.dumps(_simple_json(datatype="FP32")).encode()
    requests = (
        _infer_request("/v2/models/simple/infer", first)
        + b"GET /v2/health/ready HTTP/1.1\r\nHost: tcli\r\n\r\n"
        + _infer_request("/v2/models/simple/infer?trace=1", second)
        + _infer_request("/v2/models/simple/versions/1/infer", wrong)
        + _infer_request("/v2/models/nope/infer", first)
    )
    with _connect(small_server) as sock, sock.makefile("rb") as stream:
        sock.sendall(requests)  # all in one write: the server reads them together
        answers = [_read_response(stream) for _ in range(5)]
    assert [status for status, _, _ in answers] == [200, 200, 200, 400, 404]
    assert json.loads(answers[0][2])["id"] == "first"
    assert answers[1][2] == b""
    assert json.loads(answers[2][2])["id"] == "second"
    assert "data-type is 'FP32'" in json.loads(answers[3][2])["error"]
    assert json.loads(answers[4][2]) == {"error": "Request for unknown model: 'nope' is not found"}
    assert all(answer[1]["content-type"] == "application/json" for answer in answers if answer[2])


@pytest.mark.parametrize(
    ("extra", "version"), [(("Connection: close",), "HTTP/1.1"), ((), "HTTP/1.0")], ids=["close", "http1.0"]
)
def test_infer_without_keep_alive_closes_after_the_answer(
    small_server: RunningServer, extra: tuple[str, ...], version: str
) -> None:
    body = json.dumps(_simple_json()).encode()
    with _connect(small_server) as sock, sock.makefile("rb") as stream:
        sock.sendall(_infer_request("/v2/models/simple/infer", body, *extra, version=version))
        status, headers, answer = _read_response(stream)
        assert status == 200 and json.loads(answer)["outputs"][0]["data"] == list(range(1, 17))
        assert headers["connection"] == "close"
        assert stream.read() == b""  # the server closed the connection


def test_a_client_leaving_before_its_answer_loses_nothing_for_the_others(small_server: RunningServer) -> None:
    body = json.dumps(_simple_json()).encode()
    for _ in range(20):
        with _connect(small_server) as sock:
            sock.sendall(_infer_request("/v2/models/simple/infer", body))
    with _connect(small_server) as sock, sock.makefile("rb") as stream:
        for _ in range(3):  # keep-alive: one connection, several requests
            sock.sendall(_infer_request("/v2/models/simple/infer", body))
            status, headers, answer = _read_response(stream)
            assert status == 200 and "connection" not in headers
            assert json.loads(answer)["outputs"][0]["data"] == list(range(1, 17))


# ------------------------------------------------------------------ Triton's qa/L0_http, as at HEAD
def test_a_chunked_body_with_a_content_length_is_read_as_chunked(http_server: RunningServer) -> None:
    """qa/L0_http test_content_encoding_chunked_manually: requests sends a Content-Length beside the
    caller's own Transfer-Encoding. Triton serves it; so does tcli, reading the body as chunked and
    closing the connection after the answer (nothing may follow such a body on the connection)."""
    body = json.dumps(_simple_json()).encode()
    chunked = f"{len(body):X}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    head = (
        "POST /v2/models/simple/infer HTTP/1.1\r\nHost: tcli\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Length: {len(chunked)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", http_server.port), timeout=30) as sock:
        sock.sendall(head + chunked)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 200 OK", answer[:200]
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    assert json.loads(payload)["outputs"][0]["data"] == list(range(1, 17))


def test_an_output_named_twice_gets_current_tritons_text(raw: httpx.Client) -> None:
    body = {**_simple_json(), "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}
    response = _json_infer(raw, body)
    assert (response.status_code, error_body(response)) == (
        400,
        "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    )


def test_a_deeply_nested_ready_is_not_a_boolean(raw: httpx.Client) -> None:
    """qa/L0_http test_repository_index_deeply_nested_json: 250,000 levels, read as Triton reads them."""
    depth = 250_000
    payload = '{"ready":' + "[" * depth + "true" + "]" * depth + "}"
    response = raw.post("/v2/repository/index", content=payload)
    assert (response.status_code, error_body(response)) == (
        400,
        "Invalid value for 'ready': expected a boolean",
    )
    broken = '{"ready":' + "[" * depth + "true" + "]" * (depth - 1) + "}"
    response = raw.post("/v2/repository/index", content=broken)
    assert response.status_code == 400
    assert error_body(response).startswith("failed to parse the request JSON buffer: ")
    assert raw.get("/v2/health/live").status_code == 200


def test_an_oversized_load_request_names_the_request_json_size(raw_small: httpx.Client) -> None:
    """qa/L0_http test_loading_large_invalid_model looks for current Triton's lower-case words."""
    body = json.dumps({"parameters": {"config": "{}", "file:1/model.onnx": "A" * 70_000}}).encode()
    response = raw_small.post("/v2/repository/models/simple/load", content=body)
    assert (response.status_code, error_body(response)) == (
        400,
        f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of 65536 bytes. "
        "Use --http-max-input-size to increase the limit.",
    )


def test_an_oversized_load_request_is_refused_from_its_head(small_server: RunningServer) -> None:
    """Its body (2 GiB of base64 in the qa) is never waited for: the declared size decides."""
    with socket.create_connection(("127.0.0.1", small_server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v2/repository/models/simple/load HTTP/1.1\r\nHost: tcli\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2863311532\r\n\r\n"
        )
        answer = sock.recv(65536)
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 400 Bad Request", answer
    assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {
        "error": "request JSON size of 2863311532 bytes exceeds the maximum allowed input size of 65536 bytes. "
        "Use --http-max-input-size to increase the limit."
    }
