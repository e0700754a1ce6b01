"""A python model may start processes of its own (a multiprocessing.Pool in execute), as in Triton's
stub: Triton's qa bls model does (test_multiprocess). On the default path the model runs in an
instance process the server starts as a daemon, which multiprocessing forbids to have children.
The children stop when the model stops them: Pool.terminate() (its `with` block's end) sends
SIGTERM, which an instance process ignores and the server handles, and a child deaf to it left the
Pool, and the request, waiting forever. Both placements (instance process, server process), served
by a real `tcli serve` to a real tritonclient."""

from __future__ import annotations

import signal
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

# stops a child at once, as Pool.terminate() does with a worker that has not started its work yet;
# says whether a Pool's worker is in the model's process group
TERMINATE = """
import multiprocessing
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            child = multiprocessing.Process(target=time.sleep, args=(60,))
            child.start()
            child.terminate()
            child.join(30)
            if child.exitcode is None:  # deaf to SIGTERM: end it, and say so
                child.kill()
                child.join()
                code = 0
            else:
                code = child.exitcode
            with multiprocessing.Pool(1) as pool:
                shares_our_group = int(pool.apply(os.getpgid, (0,)) == os.getpgid(0))
            out = pb_utils.Tensor("OUT", np.array([code, shares_our_group], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


IN_SERVER = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }'


@pytest.fixture(scope="module", params=["instance process", "server process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    for name, model in (("pool", MODEL), ("terminate", TERMINATE)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(model)
        placement = IN_SERVER if request.param == "server process" else ""
        (repo / name / "config.pbtxt").write_text(CONFIG + placement)
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


def test_a_child_the_model_terminates_ends(server: ServeProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        values = httpclient.InferInput("IN", [1], "INT32")
        values.set_data_from_numpy(np.array([0], dtype=np.int32))
        result = client.infer("terminate", [values])
    code, shares_our_group = result.as_numpy("OUT").tolist()
    assert code == -signal.SIGTERM  # ended by the SIGTERM it was sent
    assert not shares_our_group  # a Ctrl-C to the server's process group does not reach it
