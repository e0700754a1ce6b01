"""The example repository's python-backend models, served by the REAL Triton 2.51.

Real Triton here has only the python backend. So the python models (add_sub,
simple_identity, simple_sequence, simple_dyna_sequence, repeat_int32, digits_preprocess) run as
they are, digits_ensemble runs with a python stand-in for digits_onnx (same config,
`backend: "python"`), and the other models are
checked for getting past real Triton's repository and config checks up to the missing backend.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.reference import RealTriton, require_reference_triton

pytestmark = pytest.mark.reference

REPO = Path(__file__).resolve().parents[2] / "model_repository"
PYTHON_MODELS = [
    "add_sub",
    "simple_identity",
    "simple_sequence",
    "simple_dyna_sequence",
    "repeat_int32",
    "digits_preprocess",
]
NON_PYTHON_MODELS = {
    "simple": "onnxruntime",
    "digits_onnx": "onnxruntime",
    "densenet_onnx": "onnxruntime",
    "digits_torchscript": "pytorch",
}

# Stands in for digits_onnx (which needs onnxruntime) inside digits_ensemble: it answers with
# the first 10 pixels of each image, so the test can see exactly what the ensemble passed on.
DIGITS_ONNX_STAND_IN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "input").as_numpy()
            first = image.reshape(image.shape[0], -1)[:, :10].astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("probabilities", first)]))
        return responses
"""


def repository_index(server: RealTriton) -> list[dict[str, str]]:
    request = urllib.request.Request(
        f"http://{server.http_address}/v2/repository/index", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def python_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python models, digits_ensemble with its stand-in, and the repository's root files."""
    repo = tmp_path_factory.mktemp("python_repo")
    for name in [*PYTHON_MODELS, "digits_ensemble"]:
        shutil.copytree(REPO / name, repo / name)
    stand_in = repo / "digits_onnx"
    (stand_in / "1").mkdir(parents=True)
    (stand_in / "1" / "model.py").write_text(DIGITS_ONNX_STAND_IN)
    shutil.copy(REPO / "digits_onnx" / "digits_labels.txt", stand_in)
    config = (REPO / "digits_onnx" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config
    (stand_in / "config.pbtxt").write_text(
        config.replace('platform: "onnxruntime_onnx"', 'backend: "python"')
    )
    # plain files at the repository root must not disturb real Triton
    for root_file in ("build_models.py", "MODELS.md"):
        shutil.copy(REPO / root_file, repo / root_file)
    return repo


@pytest.fixture(scope="module")
def server(python_repo: Path) -> Iterator[RealTriton]:
    binary = require_reference_triton()
    with RealTriton(binary, python_repo) as running:
        yield running


@pytest.fixture()
def client(server: RealTriton) -> Iterator[httpclient.InferenceServerClient]:
    connection = httpclient.InferenceServerClient(server.http_address, concurrency=4)
    yield connection
    connection.close()


def test_every_model_is_ready_with_no_failures(server: RealTriton) -> None:
    index = repository_index(server)
    expected = {*PYTHON_MODELS, "digits_ensemble", "digits_onnx"}
    assert {entry["name"] for entry in index} == expected
    assert all(entry.get("state") == "READY" and entry.get("version") == "1" for entry in index), index
    assert "failed to load" not in server.log()


def test_add_sub(client: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0").dtype == np.float32

    metadata = client.get_model_metadata("add_sub")
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [4]},
    ]


def test_simple_identity_returns_its_strings(client: httpclient.InferenceServerClient) -> None:
    data = np.array(
        [[b"hello", b"", "caf\u00e9".encode()], [b"nul\x00byte", b"x" * 1000, b"42"]], dtype=np.object_
    )
    tensor = httpclient.InferInput("INPUT0", [2, 3], "BYTES")
    tensor.set_data_from_numpy(data)
    result = client.infer("simple_identity", [tensor])
    output = result.as_numpy("OUTPUT0")
    assert output.shape == (2, 3)
    assert output.tolist() == data.tolist()


def sequence_step(
    client: httpclient.InferenceServerClient, sequence_id: int | str, value: int, **flags: bool
) -> int:
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer("simple_sequence", [tensor], sequence_id=sequence_id, **flags)
    output = result.as_numpy("OUTPUT")
    assert output.shape == (1, 1) and output.dtype == np.int32
    return int(output[0, 0])


def test_simple_sequence_accumulates_per_sequence(client: httpclient.InferenceServerClient) -> None:
    # two sequences interleaved: each keeps its own running sum
    assert sequence_step(client, 1001, 0, sequence_start=True) == 0
    assert sequence_step(client, 1002, 100, sequence_start=True) == 100
    expected_a, expected_b = 0, 100
    for value in (11, 7, 5, 3, 2, 0, 1):
        expected_a += value
        expected_b -= value
        assert sequence_step(client, 1001, value) == expected_a
        assert sequence_step(client, 1002, -value) == expected_b
    assert sequence_step(client, 1001, 4, sequence_end=True) == expected_a + 4
    assert sequence_step(client, 1002, 0, sequence_end=True) == expected_b
    # START begins again from the new value; string sequence IDs work too
    assert sequence_step(client, 1001, 9, sequence_start=True) == 9
    assert sequence_step(client, "session-a", 5, sequence_start=True) == 5
    assert sequence_step(client, "session-a", 6, sequence_end=True) == 11
    assert sequence_step(client, 1001, 1, sequence_end=True) == 10


def test_simple_sequence_in_concurrent_batches(client: httpclient.InferenceServerClient) -> None:
    """Requests of several sequences in flight together: idle slots (READY=0) change nothing."""
    sequences = [2001, 2002, 2003]
    for n, sequence_id in enumerate(sequences):
        assert sequence_step(client, sequence_id, n, sequence_start=True) == n
    pending = []
    for step in range(1, 6):
        for n, sequence_id in enumerate(sequences):
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[step * (n + 1)]], dtype=np.int32))
            handle = client.async_infer(
                "simple_sequence", [tensor], sequence_id=sequence_id, sequence_end=(step == 5)
            )
            pending.append((sequence_id, handle))
    outputs: dict[int, list[int]] = {sequence_id: [] for sequence_id in sequences}
    for sequence_id, handle in pending:
        outputs[sequence_id].append(int(handle.get_result().as_numpy("OUTPUT")[0, 0]))
    for n, sequence_id in enumerate(sequences):
        # requests of one sequence run in order, whatever the interleaving with the others
        assert outputs[sequence_id] == [n + (n + 1) * step * (step + 1) // 2 for step in range(1, 6)]


def test_simple_sequence_rejects_requests_without_start(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        sequence_step(client, 3001, 1)
    with pytest.raises(InferenceServerException, match="non-zero or non-empty correlation ID"):
        sequence_step(client, 0, 1)


def test_digits_ensemble_wiring(client: httpclient.InferenceServerClient) -> None:
    """RAW_IMAGE -> digits_preprocess -> digits_onnx (stand-in) -> probabilities, with labels."""
    raw = np.arange(3 * 64, dtype=np.uint8).reshape(3, 8, 8)
    tensor = httpclient.InferInput("RAW_IMAGE", [3, 8, 8], "UINT8")
    tensor.set_data_from_numpy(raw)
    result = client.infer("digits_ensemble", [tensor])
    expected = raw.reshape(3, 64)[:, :10].astype(np.float32)
    np.testing.assert_array_equal(result.as_numpy("probabilities"), expected)

    top = client.infer(
        "digits_ensemble",
        [tensor],
        outputs=[httpclient.InferRequestedOutput("probabilities", class_count=2)],
    ).as_numpy("probabilities")
    # the classification extension reads the ensemble's own digits_labels.txt
    assert top[1].tolist() == [b"73.000000:9:9", b"72.000000:8:8"]

    metadata = client.get_model_metadata("digits_ensemble")
    assert metadata["inputs"] == [{"name": "RAW_IMAGE", "datatype": "UINT8", "shape": [-1, 8, 8]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}]


def test_whole_repository_gets_as_far_as_the_missing_backends(tmp_path: Path) -> None:
    """Every config passes real Triton's repository checks; only absent backends stop a model."""
    binary = require_reference_triton()
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    with RealTriton(binary, repo, ["--exit-on-error=false"], require_ready=False) as running:
        index = {entry["name"]: entry for entry in repository_index(running)}
        log = running.log()
    assert "Poll failed" not in log, log
    for name in PYTHON_MODELS:
        assert index[name]["state"] == "READY", index[name]
    for name, backend in NON_PYTHON_MODELS.items():
        assert index[name]["state"] == "UNAVAILABLE"
        assert index[name]["reason"] == (
            f"Invalid argument: unable to find backend library for backend '{backend}', "
            "try specifying runtime on the model configuration."
        )
    # an ensemble whose composing model failed is never loaded: it is listed by name only
    assert index["digits_ensemble"] == {"name": "digits_ensemble"}
    assert "ensemble 'digits_ensemble' depends on 'digits_onnx' which has no loaded version" in log
