"""Model warmup (config `model_warmup`) on a real server: every sample runs on every instance at load,
before the model is READY, with the data, shapes, batch size and count the config asks for; python
instances in their own processes and in the server's; a failing sample fails the load in Triton's
words; ONNX models warm up too."""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.integration.conftest import RunningServer
from tests.repo_builder import add_model, write_onnx_add_sub

# records every request it executes, one JSON line each, in the file named by its "record" parameter
RECORDING_MODEL = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.path = config["parameters"]["record"]["string_value"]
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        responses = []
        with open(self.path, "a") as out:
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                s = pb_utils.get_input_tensor_by_name(request, "S").as_numpy()
                line = {
                    "instance": self.instance,
                    "pid": os.getpid(),
                    "batch": len(requests),
                    "shape": list(x.shape),
                    "dtype": str(x.dtype),
                    "x": x.tobytes().hex(),
                    "s": [v.decode() for v in s.reshape(-1)],
                }
                out.write(json.dumps(line) + "\\n")
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""

SAMPLES = """
model_warmup [
  { name: "zero" batch_size: 2 count: 1
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] random_data: true } } },
  { name: "file" batch_size: 1
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "x.bin" } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s.bin" } } },
  { name: "rand" batch_size: 1 count: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] random_data: true } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } } },
  { name: "skipped" batch_size: 0
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } } }
]
"""


def recording_config(record: Path, instances: int = 2) -> str:
    return f"""
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] }}, {{ name: "S" data_type: TYPE_STRING dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters {{ key: "record" value: {{ string_value: "{record}" }} }}
{SAMPLES}
"""


FILE_X = struct.pack("<3f", 1.0, 2.0, 3.0)
FILE_S = struct.pack("<I", 3) + b"abc" + struct.pack("<I", 2) + b"de"  # Triton's length-prefixed strings


@pytest.fixture(scope="module", params=["process", "thread"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """Explicit model control; python instances in processes of their own (the default) or in the
    server's (--backend-config=python,instance-process=false)."""
    repository = tmp_path_factory.mktemp("warmup") / "models"
    repository.mkdir()
    placement = {"python": {"instance-process": "false"}} if request.param == "thread" else {}
    settings = ServerSettings(
        [repository],
        ControlMode.EXPLICIT,
        host="127.0.0.1",
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
        exit_timeout_secs=10,
        backend_config=placement,
    )
    running = RunningServer(Server(settings).start(), repository)
    try:
        yield running
    finally:
        running.stop()


def _client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url)


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_sample_runs_on_every_instance_before_ready(
    server: RunningServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record = tmp_path / "requests.jsonl"
    add_model(
        server.repository,
        "recorder",
        recording_config(record),
        {"1/model.py": RECORDING_MODEL, "warmup/x.bin": FILE_X, "warmup/s.bin": FILE_S},
    )
    caplog.set_level(logging.DEBUG, logger="tcli.scheduling")
    client = _client(server)
    try:
        client.load_model("recorder")  # returns once loaded: warmup is part of the load
        records = _records(record)
        assert client.is_model_ready("recorder")
        instances = sorted({str(r["instance"]) for r in records})
        assert instances == ["recorder_0_0", "recorder_0_1"]  # group recorder_0, Triton's names
        for instance in instances:
            mine = [r for r in records if r["instance"] == instance]
            # zero: one execution of 2 requests; file: 1 request; rand: 1 request, twice; skipped: none
            assert [r["batch"] for r in mine] == [2, 2, 1, 1, 1]
            assert all(r["shape"] == [1, 3] and r["dtype"] == "float32" for r in mine)
            zero, _, from_file, rand1, rand2 = mine
            assert bytes.fromhex(str(zero["x"])) == bytes(12) and zero["s"] == ["", ""]
            assert bytes.fromhex(str(from_file["x"])) == FILE_X and from_file["s"] == ["abc", "de"]
            assert rand1["x"] == rand2["x"] and rand1["s"] == ["", ""]  # random bytes drawn once per instance
            for sample, iteration in [("zero", 1), ("file", 1), ("rand", 1), ("rand", 2)]:
                line = f"model 'recorder' instance {instance} is running warmup sample '{sample}' for iteration {iteration}"
                assert line in caplog.text
            assert "Skipping batch 0 warmup sample 'skipped'" in caplog.text
        # Triton counts warmup executions in the model's statistics
        stats = client.get_inference_statistics("recorder")["model_stats"][0]
        assert (stats["inference_count"], stats["execution_count"]) == (10, 8)
        # and a client's request comes after them
        inputs = [
            httpclient.InferInput("INPUT0", [1, 3], "FP32"),
            httpclient.InferInput("S", [1, 2], "BYTES"),
        ]
        inputs[0].set_data_from_numpy(np.ones((1, 3), np.float32))
        inputs[1].set_data_from_numpy(np.array([[b"a", b"b"]], dtype=np.object_))
        client.infer("recorder", inputs)
        assert len(_records(record)) == 11
    finally:
        client.unload_model("recorder")


FAILING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError(f"cannot warm up on {len(requests)} requests")
"""


def test_a_failing_sample_fails_the_load_in_tritons_words(server: RunningServer) -> None:
    config = """
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
model_warmup [ { name: "sample1" batch_size: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]
"""
    add_model(server.repository, "cold", config, {"1/model.py": FAILING_MODEL})
    client = _client(server)
    with pytest.raises(InferenceServerException) as failure:
        client.load_model("cold")
    message = failure.value.message()
    assert "failed to run warmup sample 'sample1': " in message
    assert "ValueError: cannot warm up on 2 requests" in message
    (entry,) = [m for m in client.get_model_repository_index() if m["name"] == "cold"]
    assert entry["state"] == "UNAVAILABLE"
    # Triton's reason: the status, the sample, then each failed request's error followed by "; "
    assert entry["reason"].startswith("Invalid argument: failed to run warmup sample 'sample1': ")
    assert entry["reason"].count("cannot warm up on 2 requests") == 2 and entry["reason"].endswith("; ")
    assert not client.is_model_ready("cold")


def test_a_warmup_file_too_short_fails_the_load(server: RunningServer, tmp_path: Path) -> None:
    add_model(
        server.repository,
        "short_file",
        recording_config(tmp_path / "unused.jsonl", instances=1),
        {"1/model.py": RECORDING_MODEL, "warmup/x.bin": b"\0" * 4, "warmup/s.bin": FILE_S},
    )
    client = _client(server)
    with pytest.raises(
        InferenceServerException,
        match=r"warmup setting expects 12 bytes, but the data provided from x\.bin only has 4 bytes",
    ):
        client.load_model("short_file")


def test_onnx_models_warm_up(server: RunningServer) -> None:
    config = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
model_warmup [ { name: "random" batch_size: 4 count: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } } ]
"""
    folder = add_model(server.repository, "onnx_warm", config)
    write_onnx_add_sub(folder / "1" / "model.onnx")
    client = _client(server)
    client.load_model("onnx_warm")
    try:
        stats = client.get_inference_statistics("onnx_warm")["model_stats"][0]
        # 4 requests merged into one execution, three times
        assert (stats["inference_count"], stats["execution_count"]) == (12, 3)
    finally:
        client.unload_model("onnx_warm")
