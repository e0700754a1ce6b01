"""A TorchScript model whose config names its inputs neither after forward()'s arguments nor
`<name>__<index>` loads and binds them in the config's order, as Triton's pytorch backend does ("strict
config ordering"); Triton's qa L0_backend_python/python_based_backends serves such a model (INPUT0 and
INPUT1 for forward(input0, input1)). A sequence model's control inputs and implicit state are
forward() arguments too, counted and bound as Triton's pytorch backend does (qa
L0_request_cancellation's implicit-state model). Served by a real `tcli serve` to a real tritonclient."""

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


SEQUENCE_CONFIG = """
backend: "pytorch"
max_batch_size: 1
input [ { name: "VALUE__0" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "TOTAL__0" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching {
  control_input [ { name: "START__1" control { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } } ]
  state { input_name: "STATE_IN__2" output_name: "STATE_OUT__1" data_type: TYPE_INT64 dims: [ 1 ]
          initial_state { name: "zero" data_type: TYPE_INT64 dims: [ 1 ] zero_data: true } }
}
"""


def write_sequence_model(repo: Path) -> None:
    """forward(value, start, state) -> (total, total): a running total kept in the implicit state."""
    torch = import_torch()

    class RunningTotal(torch.nn.Module):
        def forward(
            self, value: torch.Tensor, start: torch.Tensor, state: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            total = value + state * (1 - start.to(state.dtype))
            return total, total

    (repo / "running_total" / "1").mkdir(parents=True)
    torch.jit.script(RunningTotal()).save(str(repo / "running_total" / "1" / "model.pt"))
    (repo / "running_total" / "config.pbtxt").write_text(SEQUENCE_CONFIG)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repo = tmp_path_factory.mktemp("repo")
    write_model(repo, "in_order", "INPUT0", "INPUT1")
    write_model(repo, "reversed", "B", "A")  # config order, not the alphabet, picks forward()'s arguments
    write_sequence_model(repo)
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


def test_a_sequence_models_controls_and_state_are_forward_arguments(server: ServeProcess) -> None:
    totals = []
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        for step, value in enumerate((1, 2, 3)):
            tensor = httpclient.InferInput("VALUE__0", [1, 1], "INT64")
            tensor.set_data_from_numpy(np.array([[value]], np.int64))
            result = client.infer(
                "running_total", [tensor], sequence_id=7, sequence_start=step == 0, sequence_end=step == 2
            )
            totals.append(int(result.as_numpy("TOTAL__0").item()))
    assert totals == [1, 3, 6]  # the state carried from each request to the next
