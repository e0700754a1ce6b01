"""Merging requests into one batch and splitting the outputs back: every caller gets exactly its rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, RequestedOutput, Tensor
from server.scheduling.batch import batch_key, merge_inputs, requested_outputs, split_outputs

DTYPES = {"FP32": np.float32, "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8, "BYTES": np.object_}


def rows_for(request_index: int, rows: int, feature: tuple[int, ...], datatype: str) -> np.ndarray[Any, Any]:
    """Data whose every element names its request and row, so a misrouted row is visible."""
    count = int(np.prod(feature, dtype=np.int64))
    values = [[request_index * 1000 + row * 10 + (k % 10) for k in range(count)] for row in range(rows)]
    if datatype == "BYTES":
        flat = np.array([f"r{v}".encode() for row in values for v in row], dtype=object)
        return flat.reshape((rows, *feature))
    if datatype == "BOOL":
        return (np.array(values, dtype=np.int64).reshape((rows, *feature)) + request_index) % 2 == 0
    return np.array(values, dtype=np.int64).reshape((rows, *feature)).astype(DTYPES[datatype])


def make_request(
    index: int, rows: int, inputs: list[tuple[str, str, tuple[int, ...]]], outputs: list[str] | None = None
) -> InferenceRequest:
    tensors = []
    for name, datatype, feature in inputs:
        data = rows_for(index, rows, feature, datatype)
        tensors.append(Tensor(name, datatype, tuple(data.shape), data))
    return InferenceRequest(
        "m", id=f"r{index}", inputs=tensors, outputs=[RequestedOutput(o) for o in outputs or []]
    )


def row_wise(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A function that works row by row (as a model does), different for every dtype."""
    if array.dtype == object:
        return np.vectorize(lambda b: b + b"!", otypes=[object])(array)
    if array.dtype == np.bool_:
        return ~array
    return array * 2 + 1


features = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
input_specs = st.lists(st.tuples(st.sampled_from(sorted(DTYPES)), features), min_size=1, max_size=3).map(
    lambda specs: [(f"IN{i}", dt, feat) for i, (dt, feat) in enumerate(specs)]
)


@settings(max_examples=100, deadline=None)
@given(batch_rows=st.lists(st.integers(1, 5), min_size=1, max_size=8), specs=input_specs, fn=st.booleans())
def test_merge_then_split_gives_every_request_its_own_rows(
    batch_rows: list[int], specs: list[tuple[str, str, tuple[int, ...]]], fn: bool
) -> None:
    requests = [make_request(i, rows, specs) for i, rows in enumerate(batch_rows)]
    assert len({batch_key(r, True) for r in requests}) == 1

    merged = merge_inputs(requests)

    total = sum(batch_rows)
    for name, datatype, feature in specs:
        assert merged[name].shape == (total, *feature)
        assert merged[name].dtype == np.dtype(DTYPES[datatype])
    outputs = {f"OUT_{name}": (row_wise(array) if fn else array) for name, array in merged.items()}

    parts = split_outputs(outputs, batch_rows)

    assert len(parts) == len(requests)
    for request, part in zip(requests, parts, strict=True):
        for tensor in request.inputs:
            expected = row_wise(tensor.data) if fn else tensor.data
            got = part[f"OUT_{tensor.name}"]
            assert got.shape == expected.shape
            assert got.dtype == expected.dtype
            assert np.array_equal(got, expected)
            # a view into the batch output, not a copy
            assert np.shares_memory(got, outputs[f"OUT_{tensor.name}"]) or got.size == 0


@settings(max_examples=100, deadline=None)
@given(
    a=st.tuples(st.sampled_from(sorted(DTYPES)), features, st.integers(1, 4)),
    b=st.tuples(st.sampled_from(sorted(DTYPES)), features, st.integers(1, 4)),
)
def test_requests_share_a_batch_key_exactly_when_they_can_be_concatenated(
    a: tuple[str, tuple[int, ...], int], b: tuple[str, tuple[int, ...], int]
) -> None:
    ra = make_request(0, a[2], [("IN", a[0], a[1])])
    rb = make_request(1, b[2], [("IN", b[0], b[1])])
    compatible = a[0] == b[0] and a[1] == b[1]  # batch sizes (dim 0) may differ

    assert (batch_key(ra, True) == batch_key(rb, True)) == compatible
    if compatible:
        merged = merge_inputs([ra, rb])["IN"]
        assert merged.shape[0] == a[2] + b[2]


def test_batch_key_separates_different_inputs_but_not_requested_outputs() -> None:
    base = make_request(0, 1, [("A", "FP32", (2,)), ("B", "INT64", (3,))], ["X"])
    reordered = make_request(1, 4, [("A", "FP32", (2,)), ("B", "INT64", (3,))], ["X"])
    reordered.inputs.reverse()
    assert batch_key(base, True) == batch_key(reordered, True)

    assert batch_key(base, True) != batch_key(make_request(2, 1, [("A", "FP32", (2,))], ["X"]), True)
    # Triton batches requests that ask for different outputs (L0_batcher test_multi_different_outputs)
    for outputs in (["X", "Y"], ["Y"], []):
        other = make_request(3, 1, [("A", "FP32", (2,)), ("B", "INT64", (3,))], outputs)
        assert batch_key(base, True) == batch_key(other, True)
    # without a batch dimension the whole shape must agree
    assert batch_key(base, False) != batch_key(reordered, False)


def test_ragged_inputs_may_differ_in_shape_and_merge_into_one_flat_tensor() -> None:
    short = make_request(0, 1, [("R", "FP32", (2,)), ("F", "INT64", (3,))])
    long = make_request(1, 2, [("R", "FP32", (5,)), ("F", "INT64", (3,))])
    ragged = frozenset({"R"})
    assert batch_key(short, True) != batch_key(long, True)
    assert batch_key(short, True, ragged) == batch_key(long, True, ragged)
    other_fixed = make_request(2, 1, [("R", "FP32", (2,)), ("F", "INT64", (4,))])
    assert batch_key(short, True, ragged) != batch_key(other_fixed, True, ragged)

    merged = merge_inputs([short, long], ragged)
    assert merged["R"].shape == (2 + 10,)
    assert np.array_equal(
        merged["R"], np.concatenate([short.inputs[0].data.ravel(), long.inputs[0].data.ravel()])
    )
    assert merged["F"].shape == (3, 3)  # a fixed input still concatenates by rows
    assert merge_inputs([short], ragged)["R"].shape == (2,)  # one request is flattened too


def test_a_batch_computes_the_union_of_requested_outputs_in_config_order() -> None:
    every = ["OUT0", "OUT1", "OUT2"]
    one = make_request(0, 1, [("A", "FP32", (1,))], ["OUT2"])
    two = make_request(1, 1, [("A", "FP32", (1,))], ["OUT0"])
    assert requested_outputs([one, two], every) == ["OUT0", "OUT2"]
    assert requested_outputs([one, make_request(2, 1, [("A", "FP32", (1,))])], every) == every
    # a sequence's implicit state output is no config output, and is computed too
    state = make_request(3, 1, [("A", "FP32", (1,))], ["OUT1", "STATE"])
    assert requested_outputs([one, state], every) == ["OUT1", "OUT2", "STATE"]


def test_one_request_is_passed_through_without_a_copy() -> None:
    request = make_request(0, 3, [("IN", "FP32", (2,))])
    assert merge_inputs([request])["IN"] is request.inputs[0].data


def test_bytes_inputs_stay_object_arrays() -> None:
    requests = [make_request(i, 2, [("S", "BYTES", (1,))]) for i in range(3)]
    merged = merge_inputs(requests)["S"]
    assert merged.dtype == object
    assert merged[:, 0].tolist() == [b"r0", b"r10", b"r1000", b"r1010", b"r2000", b"r2010"]


@pytest.mark.parametrize(
    ("shape", "rows"),
    [((5, 2), [2, 2, 2]), ((7,), [2, 2, 2]), ((), [1])],
)
def test_an_output_without_the_batch_rows_is_an_internal_error(
    shape: tuple[int, ...], rows: list[int]
) -> None:
    outputs = {"OUT": np.zeros(shape, np.float32)}
    with pytest.raises(TritonError) as caught:
        split_outputs(outputs, rows)
    assert caught.value.code is ErrorCode.INTERNAL
    assert "'OUT'" in caught.value.message
    assert str(sum(rows)) in caught.value.message


def test_requests_with_different_inputs_cannot_be_merged() -> None:
    a = make_request(0, 1, [("A", "FP32", (2,))])
    b = make_request(1, 1, [("B", "FP32", (2,))])
    with pytest.raises(TritonError) as caught:
        merge_inputs([a, b])
    assert caught.value.code is ErrorCode.INTERNAL
