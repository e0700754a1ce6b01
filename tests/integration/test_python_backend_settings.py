"""The python backend's --backend-config settings that map onto tcli's instance processes
(shm-default-byte-size, shm-growth-byte-size; stub-timeout-seconds is in test_execution_envs.py), and
the ones that do not, logged once as ignored. The segments are the server's own, in /dev/shm."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess

MIB = 1 << 20
RING_HEADER = 64  # the output ring's first cache line (its tail), ahead of its capacity

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""
CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /dev/shm (Linux)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repository = tmp_path_factory.mktemp("settings_repository")
    (repository / "echo" / "1").mkdir(parents=True)
    (repository / "echo" / "config.pbtxt").write_text(CONFIG)
    (repository / "echo" / "1" / "model.py").write_text(ECHO)
    running = ServeProcess(
        "--model-repository",
        str(repository),
        f"--backend-config=python,shm-default-byte-size={3 * MIB}",
        f"--backend-config=python,shm-growth-byte-size={5 * MIB}",
        "--backend-config=python,shm-message-queue-size=10",
    )
    try:
        yield running
    finally:
        running.stop()


def _segment_sizes(server: ServeProcess) -> list[int]:
    return sorted(p.stat().st_size for p in Path("/dev/shm").glob(f"tcli{server.process.pid}_*"))


def test_segments_start_at_shm_default_byte_size(server: ServeProcess) -> None:
    assert _segment_sizes(server) == [3 * MIB + RING_HEADER] * 2  # one output ring per instance


def test_segments_grow_by_shm_growth_byte_size(server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.arange(int(3.5 * MIB) // 4, dtype=np.float32)  # 3.5 MiB: more than a segment holds
    given = httpclient.InferInput("IN", list(data.shape), "FP32")
    given.set_data_from_numpy(data)
    result = client.infer("echo", [given])
    assert np.array_equal(result.as_numpy("OUT"), data)
    # 3 MiB + one 5 MiB step, where doubling would give 3.5 MiB (input) and 7 MiB (output ring)
    assert 8 * MIB in _segment_sizes(server)  # the input arena
    assert 8 * MIB + RING_HEADER in _segment_sizes(server)  # that instance's output ring


def test_a_setting_tcli_does_not_use_is_logged_once(server: ServeProcess) -> None:
    server.wait_for_output("shm-message-queue-size=10 is ignored")
    assert server.output().count("shm-message-queue-size=10 is ignored") == 1  # two instances loaded
