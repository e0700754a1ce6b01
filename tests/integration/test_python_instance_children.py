"""A python model may start processes of its own (a multiprocessing.Pool in execute), as in Triton's
stub: Triton's qa bls model does (test_multiprocess). On the default path the model runs in an
instance process the server starts as a daemon, which multiprocessing forbids to have children.
Served by a real `tcli serve` to a real tritonclient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess

MODEL = """
from multiprocessing import Pool

import numpy as np
import triton_python_backend_utils as pb_utils


def magnitude(x):
    return abs(x)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            with Pool(2) as pool:
                magnitudes = pool.map(magnitude, values.tolist())  # the model's own function
            out = pb_utils.Tensor("OUT", np.array(magnitudes, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    (repo / "pool" / "1").mkdir(parents=True)
    (repo / "pool" / "1" / "model.py").write_text(MODEL)
    (repo / "pool" / "config.pbtxt").write_text(CONFIG)
    process = ServeProcess("--model-repository", str(repo))
    try:
        yield process
    finally:
        process.stop()


def test_a_model_can_run_a_process_pool(server: ServeProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        values = httpclient.InferInput("IN", [4], "INT32")
        values.set_data_from_numpy(np.array([1, -2, 3, -4], dtype=np.int32))
        result = client.infer("pool", [values])
    np.testing.assert_array_equal(result.as_numpy("OUT"), np.array([1, 2, 3, 4], dtype=np.int32))
