"""A TorchScript model fed a ragged input as the 1-D concatenation of its batch, with a batch input
saying where each request's elements end, by the real ModelRunner and dynamic batcher (Triton's delay
knob holds the first batch until both requests are queued)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.backends.base import ModelContext
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor
from server.scheduling.runner import ModelRunner
from server.scheduling.stats import ModelStats
from tests.torch_needed import import_torch
from tests.unit.test_python_process import submit

torch = import_torch()


class RaggedSum(torch.nn.Module):
    def forward(
        self, INPUT: torch.Tensor, ENDS: torch.Tensor
    ) -> torch.Tensor:  # forward() arguments are bound by name
        running = torch.cat([torch.zeros(1), torch.cumsum(INPUT, 0)])
        totals = running[ENDS.long()]
        return totals[1:] - totals[:-1]


TORCH_CONFIG = """
name: "ragged_sum" platform: "pytorch_libtorch" backend: "pytorch" max_batch_size: 8
default_model_filename: "model.pt"
dynamic_batching { }
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "ENDS" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]
instance_group [ { name: "ragged_sum" kind: KIND_CPU count: 1 } ]
"""


def write_torch_ragged_sum(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(RaggedSum()).save(str(path))


def test_pytorch_model_sums_ragged_requests_of_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_torch_ragged_sum(tmp_path / "ragged_sum" / "1" / "model.pt")
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    config = text_format.Parse(TORCH_CONFIG, mc.ModelConfig())
    runner = ModelRunner(
        ModelContext(config, tmp_path / "ragged_sum", 1, tmp_path), ModelStats("ragged_sum", "1")
    )
    runner.load()
    try:
        values = [np.array([[1, 2]], np.float32), np.array([[3, 4, 5, 6]], np.float32)]
        waiters = [
            submit(runner, InferenceRequest("ragged_sum", "", f"r{i}", [Tensor("INPUT", "FP32", v.shape, v)]))
            for i, v in enumerate(values)
        ]
        answers = [waiter.wait() for waiter in waiters]
        assert runner.stats.execution_count == 1
        for value, answer in zip(values, answers, strict=True):
            assert isinstance(answer, InferenceResponse), answer
            (out,) = answer.outputs
            np.testing.assert_array_equal(out.data, [[value.sum()]])
    finally:
        runner.stop(10)
