"""The interpreter state a python model's instance process gives the model, as Triton's stub gives
it: `sys.argv` is `[""]`, not the server's command line. Triton's own qa models run their checks with
`unittest.main("model", exit=False)` (qa/L0_backend_python argument_validation, bls,
request_rescheduling); with the server's argv, unittest rejected `--model-repository` and the
instance process exited with code 2. Served by `tcli serve` in a process of its own, so the model
sees a real server command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess

CONFIG = """
name: "stub_state"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "ARGV" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "TESTS_RUN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "FAILURES" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

# runs its own unit test at initialize(), as Triton's qa models do, and reports it with sys.argv
MODEL = """
import sys
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils


class OwnTest(unittest.TestCase):
    def test_arithmetic(self):
        self.assertEqual(1 + 1, 2)


class TritonPythonModel:
    def initialize(self, args):
        self.result = unittest.main("model", exit=False).result

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("ARGV", np.array(sys.argv, dtype=np.object_)),
                pb_utils.Tensor("TESTS_RUN", np.array([self.result.testsRun], dtype=np.int32)),
                pb_utils.Tensor("FAILURES", np.array([len(self.result.failures)], dtype=np.int32)),
            ])
            for _ in requests
        ]
"""


def test_a_model_running_unittest_main_loads_and_sees_an_empty_argv(tmp_path: Path) -> None:
    folder = tmp_path / "repo" / "stub_state"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    (folder / "1" / "model.py").write_text(MODEL)

    server = ServeProcess("--model-repository", str(tmp_path / "repo"), "--exit-on-error=false")
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("stub_state"), server.output()
        request = httpclient.InferInput("IN", [1], "INT32")
        request.set_data_from_numpy(np.array([1], dtype=np.int32))
        result = client.infer("stub_state", [request])
        client.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
    finally:
        server.stop()

    assert result.as_numpy("ARGV").tolist() == [b""]
    assert result.as_numpy("TESTS_RUN").tolist() == [1]
    assert result.as_numpy("FAILURES").tolist() == [0]
