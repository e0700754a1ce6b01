"""The binary frames between the server and a python instance process (server/backends/python/
hop_frames.py): what goes in comes out, large tensors through a shared segment, and a torn or mangled
frame is a FrameError, never another exception or a hang (fuzzed)."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.backends.base import ModelError, Rescheduled
from server.backends.python import hop_frames as hf
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor


class _Segment:
    """A placement over a plain buffer standing for a shared segment."""

    def __init__(self, size: int = 1 << 20) -> None:
        self.buffer = bytearray(size)
        self.placed = 0

    def place(self, arrays: Any) -> tuple[list[int] | None, str | None, int | None]:
        offsets, offset = [], 64
        for array in arrays:
            raw = array.reshape(-1).view(np.uint8)
            self.buffer[offset : offset + raw.nbytes] = raw.tobytes()
            offsets.append(offset)
            offset += (raw.nbytes + 63) & ~63
        self.placed += 1
        return offsets, "arena_1", offset


def _tensors() -> list[Tensor]:
    bytes_data = np.array([b"a", b"", "héllo".encode(), b"\x00\xff"], dtype=object).reshape(2, 2)
    return [
        Tensor("FP32", "FP32", (2, 3), np.arange(6, dtype=np.float32).reshape(2, 3)),
        Tensor("INT64", "INT64", (), np.array(7, dtype=np.int64)),
        Tensor("BOOL", "BOOL", (3,), np.array([True, False, True])),
        Tensor("FP16", "FP16", (2,), np.array([1.5, -2], dtype=np.float16)),
        Tensor("BF16", "BF16", (2,), np.array([0x3F80, 0x4000], dtype=np.uint16)),
        Tensor("EMPTY", "INT32", (0, 4), np.zeros((0, 4), np.int32)),
        Tensor("BYTES", "BYTES", (2, 2), bytes_data),
        Tensor("NOT_CONTIGUOUS", "INT32", (2,), np.arange(4, dtype=np.int32)[::2]),
    ]


def _same(got: list[Tensor], sent: list[Tensor]) -> None:
    assert [(t.name, t.datatype, tuple(t.shape)) for t in got] == [
        (t.name, t.datatype, tuple(t.data.shape)) for t in sent
    ]
    for a, b in zip(got, sent, strict=True):
        assert a.data.shape == b.data.shape
        assert a.data.tolist() == b.data.tolist()


def test_a_batch_arrives_as_sent_with_its_parameters_and_requested_outputs() -> None:
    requests = [
        InferenceRequest(
            "m", "1", "first", _tensors(), [RequestedOutput("OUT1")], {"sequence_id": 5, "x": "y"}
        ),
        InferenceRequest("m", "1", "", _tensors()[:1], [], {}),
    ]
    frame = hf.encode_exec(9, requests, True, hf.INLINE)
    assert hf.kind_of(frame) == hf.EXEC
    batch = hf.decode_exec(bytearray(frame), lambda name: None)
    assert (batch.batch_id, batch.senders, batch.arena) == (9, True, None)
    assert [r.id for r in batch.requests] == ["first", ""]
    assert batch.requests[0].parameters == {"sequence_id": 5, "x": "y"}
    assert [o.name for o in batch.requests[0].outputs] == ["OUT1"]
    assert batch.requests[1].outputs == []
    _same(batch.requests[0].inputs, requests[0].inputs)
    _same(batch.requests[1].inputs, requests[1].inputs)
    batch.requests[0].inputs[0].data[0, 0] = 42  # a model may write into its inputs


def test_large_inputs_go_through_the_arena_and_come_out_as_copies() -> None:
    big = Tensor("BIG", "FP64", (3000,), np.linspace(0, 1, 3000))
    segment = _Segment()
    frame = hf.encode_exec(1, [InferenceRequest("m", "1", "r", [big], [], {})], False, segment)
    assert segment.placed == 1 and len(frame) < 200  # the bytes are not in the frame
    batch = hf.decode_exec(bytearray(frame), lambda name: memoryview(segment.buffer) if name else None)
    assert batch.arena == "arena_1"
    got = batch.requests[0].inputs[0].data
    segment.buffer[64:128] = bytes(64)  # the arena is reused: what was read stays
    assert np.array_equal(got, big.data)


def test_every_kind_of_result_comes_back() -> None:
    response = InferenceResponse("m", "1", "r1", _tensors(), {"p": True, "n": 3})
    results = [
        response,
        None,
        TritonError(ErrorCode.INVALID_ARG, "bad input"),
        ModelError("model said no", "Traceback ...", ErrorCode.UNAVAILABLE),
        Rescheduled(),
    ]
    frame = hf.encode_results(hf.DONE, 4, 0, False, results, hf.INLINE)
    assert hf.ring_end(frame) is None
    decoded = hf.decode_results(bytearray(frame), lambda: None, "m", "1")
    assert (decoded.kind, decoded.batch_id) == (hf.DONE, 4)
    got = decoded.results
    assert isinstance(got[0], InferenceResponse)
    assert (got[0].model_name, got[0].id, got[0].parameters) == ("m", "r1", {"p": True, "n": 3})
    _same(got[0].outputs, response.outputs)
    assert got[1] is None
    assert isinstance(got[2], TritonError) and (got[2].code, got[2].message) == (
        ErrorCode.INVALID_ARG,
        "bad input",
    )
    assert isinstance(got[3], ModelError)
    assert (got[3].code, got[3].message, got[3].trace) == (
        ErrorCode.UNAVAILABLE,
        "model said no",
        "Traceback ...",
    )
    assert isinstance(got[4], Rescheduled)


def test_a_sender_response_says_which_request_and_whether_it_is_the_last() -> None:
    segment = _Segment()
    big = Tensor("OUT", "INT32", (10000,), np.arange(10000, dtype=np.int32))
    frame = hf.encode_results(hf.SEND, 7, 3, True, [InferenceResponse("m", "1", "x", [big])], segment)
    assert hf.ring_end(frame) == 64 + 40000
    decoded = hf.decode_results(bytearray(frame), lambda: memoryview(segment.buffer), "m", "1")
    assert (decoded.kind, decoded.batch_id, decoded.index, decoded.final, decoded.end) == (
        hf.SEND,
        7,
        3,
        True,
        64 + 40000,
    )
    response = decoded.results[0]
    assert isinstance(response, InferenceResponse)
    assert np.array_equal(response.outputs[0].data, big.data)


def test_a_pickled_control_message_is_not_taken_for_a_frame() -> None:
    import pickle

    assert hf.kind_of(pickle.dumps(("stop",), pickle.HIGHEST_PROTOCOL)) == 0
    assert hf.kind_of(b"") == 0


def test_the_head_names_the_requests_of_a_frame_whose_rest_does_not_decode() -> None:
    # the side that cannot decode a frame still answers the requests it carried, as its head names them
    exec_frame, done_frame = _valid_frames()
    send_frame = hf.encode_results(hf.SEND, 8, 2, True, [None], hf.INLINE)
    assert hf.exec_head(exec_frame[:-3]) == (1, 1)
    assert hf.results_head(done_frame[:-3]) == (hf.DONE, 1, 0)
    assert hf.results_head(send_frame[:18] + b"garbage") == (hf.SEND, 8, 2)
    # too short to hold a head, or of the other direction: nothing is named
    assert hf.exec_head(exec_frame[:5]) is None and hf.results_head(done_frame[:5]) is None
    assert hf.exec_head(done_frame) is None and hf.results_head(exec_frame) is None


def _valid_frames() -> list[bytes]:
    requests = [InferenceRequest("m", "1", "id", _tensors(), [RequestedOutput("A")], {"k": 1})]
    results = [InferenceResponse("m", "1", "id", _tensors(), {}), TritonError(ErrorCode.INTERNAL, "x"), None]
    return [
        hf.encode_exec(1, requests, True, hf.INLINE),
        hf.encode_results(hf.DONE, 1, 0, False, results, hf.INLINE),
    ]


def _decode(frame: bytes) -> None:
    view = memoryview(bytearray(64))
    if frame[:1] == bytes((hf.EXEC,)):
        hf.decode_exec(bytearray(frame), lambda name: view)
    else:
        hf.decode_results(bytearray(frame), lambda: view, "m", "1")


@pytest.mark.parametrize("which", [0, 1])
def test_every_cut_of_a_valid_frame_is_refused(which: int) -> None:
    frame = _valid_frames()[which]
    _decode(frame)
    for end in range(len(frame)):
        with pytest.raises(hf.FrameError):
            _decode(frame[:end] if end else bytes((frame[0],)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, 1),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
    tail=st.binary(max_size=16),
)
def test_a_mangled_frame_decodes_or_is_refused_but_never_breaks_the_decoder(
    which: int, edits: list[tuple[int, int]], tail: bytes
) -> None:
    frame = bytearray(_valid_frames()[which])
    for position, value in edits:
        frame[position % len(frame)] = value
    frame += tail
    frame[0] = (hf.EXEC, hf.DONE)[which]
    with contextlib.suppress(hf.FrameError):
        _decode(bytes(frame))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([hf.EXEC, hf.DONE, hf.SEND]))
def test_random_bytes_are_refused_or_decoded(data: bytes, kind: int) -> None:
    with contextlib.suppress(hf.FrameError):
        _decode(bytes((kind,)) + data)
