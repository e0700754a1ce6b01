"""A TorchScript model whose config names its inputs neither after forward()'s arguments nor
`<name>__<index>` loads and binds them in the config's order, as Triton's pytorch backend does ("strict
config ordering"); Triton's qa L0_backend_python/python_based_backends serves such a model (INPUT0 and
INPUT1 for forward(input0, input1)). Served by a real `tcli serve` to a real tritonclient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess
from tests.torch_needed import import_torch

CONFIG = """
backend: "pytorch"
input [
  { name: "%s" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "%s" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "DIFFERENCE" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


def write_model(repo: Path, name: str, first: str, second: str) -> None:
    """forward(left, right) -> (left + right, left - right); the config lists `first`, `second`."""
    torch = import_torch()

    class SumAndDifference(torch.nn.Module):
        def forward(self, left: torch.Tensor, right: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return left + right, left - right

    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(SumAndDifference()).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(CONFIG % (first, second))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "in_order", "INPUT0", "INPUT1")
    write_model(repo, "reversed", "B", "A")  # config order, not the alphabet, picks forward()'s arguments
    process = ServeProcess("--model-repository", str(repo))
    try:
        yield process
    finally:
        process.stop()


def infer(server: ServeProcess, model: str, values: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        inputs = []
        for name, value in values.items():
            tensor = httpclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(np.full(4, value, np.float32))
            inputs.append(tensor)
        result = client.infer(model, inputs)
        return result.as_numpy("SUM"), result.as_numpy("DIFFERENCE")


def test_inputs_named_after_no_convention_bind_in_config_order(server: ServeProcess) -> None:
    total, difference = infer(server, "in_order", {"INPUT0": 5.0, "INPUT1": 2.0})
    np.testing.assert_array_equal(total, np.full(4, 7.0, np.float32))
    np.testing.assert_array_equal(difference, np.full(4, 3.0, np.float32))  # INPUT0 is forward()'s left

    total, difference = infer(server, "reversed", {"A": 5.0, "B": 2.0})
    np.testing.assert_array_equal(total, np.full(4, 7.0, np.float32))
    np.testing.assert_array_equal(difference, np.full(4, -3.0, np.float32))  # B, listed first, is left
