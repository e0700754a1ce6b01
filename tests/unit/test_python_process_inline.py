"""PythonModel.inline_ok: which in-thread python models the runner may run straight on its event loop.
Real model files in temporary folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.backends.base import InstanceSpec, ModelContext
from server.backends.python.host import PythonModel

CONFIG = """
name: "m"
backend: "python"
default_model_filename: "model.py"
{policy}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

PLAIN = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""

COROUTINE = """
class TritonPythonModel:
    async def execute(self, requests):
        return []
"""

BLS = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        pb_utils.InferenceRequest(model_name="other", requested_output_names=[], inputs=[])
        return []
"""


def load(tmp_path: Path, source: str, decoupled: bool = False) -> PythonModel:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text(source)
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    config = text_format.Parse(CONFIG.format(policy=policy), mc.ModelConfig())
    return PythonModel(ModelContext(config, tmp_path / "m", 1, tmp_path), InstanceSpec("m_0", "KIND_CPU"))


@pytest.mark.parametrize(
    ("source", "decoupled", "expected"),
    [(PLAIN, False, True), (PLAIN, True, False), (COROUTINE, False, False), (BLS, False, False)],
    ids=["plain", "decoupled", "coroutine", "bls"],
)
def test_inline_ok(tmp_path: Path, source: str, decoupled: bool, expected: bool) -> None:
    model = load(tmp_path, source, decoupled)
    try:
        assert model.inline_ok is expected
    finally:
        model.unload()
