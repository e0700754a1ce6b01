"""batch_input and batch_output (server/scheduling/batch_io.py): every batch input kind's tensor for a
batch, and the scatter of a batch output (a model fed them end to end: tests/unit/test_pytorch_ragged.py,
tests/integration/test_batching_mixed.py)."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, Tensor
from server.scheduling.batch import merge_inputs
from server.scheduling.batch_io import BatchIO

KINDS = [
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
]


def config_with(batch_inputs: str, batch_outputs: str = "", output_dims: str = "-1") -> mc.ModelConfig:
    text = f"""
    name: "m" max_batch_size: 8
    input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1, -1 ] allow_ragged_batch: true }} ]
    output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {output_dims} ] }} ]
    {batch_inputs}
    {batch_outputs}
    """
    return text_format.Parse(text, mc.ModelConfig())


def request(index: int, shape: tuple[int, ...]) -> InferenceRequest:
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 100 * index
    return InferenceRequest("m", "", f"r{index}", [Tensor("INPUT", "FP32", shape, data)])


# requests of shapes [1, 2, 3], [2, 1, 2] and [1, 4, 1]: 6, 4 and 4 elements, 4 batch rows in all
SHAPES = [(1, 2, 3), (2, 1, 2), (1, 4, 1)]
EXPECTED = {
    "BATCH_ELEMENT_COUNT": [6, 4, 4],
    "BATCH_ACCUMULATED_ELEMENT_COUNT": [6, 10, 14],
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO": [0, 6, 10, 14],
    "BATCH_ITEM_SHAPE": [[2, 3], [1, 2], [1, 2], [4, 1]],
    "BATCH_ITEM_SHAPE_FLATTEN": [2, 3, 1, 2, 1, 2, 4, 1],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data_type", ["TYPE_INT32", "TYPE_FP32"])
def test_each_batch_input_kind_describes_the_batch(kind: str, data_type: str) -> None:
    io = BatchIO(
        config_with(
            f'batch_input [ {{ kind: {kind} target_name: "B" data_type: {data_type} source_input: "INPUT" }} ]'
        )
    )
    made = io.batch_inputs([request(i, s) for i, s in enumerate(SHAPES)])["B"]
    assert made.dtype == (np.int32 if data_type == "TYPE_INT32" else np.float32)
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        assert made.shape == (6,)  # only the shape speaks: the largest element count
    else:
        np.testing.assert_array_equal(made, EXPECTED[kind])


def test_the_docs_example_ends_each_request_where_its_elements_end() -> None:
    # ragged_batching.md: requests [1, 3], [1, 4], [1, 5] give INPUT [12] and INDEX [3, 7, 12]
    config = config_with(
        'batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_FP32 '
        'source_input: "INPUT" } ]'
    )
    io = BatchIO(config)
    requests = [request(i, (1, n)) for i, n in enumerate((3, 4, 5))]
    assert merge_inputs(requests, io.ragged)["INPUT"].shape == (12,)
    np.testing.assert_array_equal(io.batch_inputs(requests)["INDEX"], [3, 7, 12])


def test_a_batch_output_is_scattered_in_each_requests_input_shape() -> None:
    io = BatchIO(
        config_with(
            "",
            'batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]',
            output_dims="-1, -1",
        )
    )
    requests = [request(0, (1, 2, 3)), request(1, (2, 1, 2))]
    outputs = {"OUT": np.arange(10, dtype=np.float32), "OTHER": np.zeros(3, np.float32)}
    first, second = io.scatter(outputs, requests)
    np.testing.assert_array_equal(first["OUT"], np.arange(6).reshape(1, 2, 3))
    np.testing.assert_array_equal(second["OUT"], np.arange(6, 10).reshape(2, 1, 2))
    assert list(outputs) == ["OTHER"]  # split by rows as usual


def test_a_request_without_the_source_input_is_told_which_input() -> None:
    io = BatchIO(
        config_with(
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32 source_input: "X" } ]'
        )
    )
    with pytest.raises(TritonError, match="input 'X' is missing"):
        io.batch_inputs([request(0, (1, 2, 2))])
