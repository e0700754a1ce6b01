"""Request checks against a model's config: Triton 2.51's messages, word for word, and the order in which
it reports problems (requested outputs first, then the number of inputs, unknown inputs, the batch
dimension, then each input's datatype and shape). Every expected message here was read off the real
Triton 2.51 answering the same request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from server.config.parse import parse_config_text
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, RequestedOutput, Tensor
from server.scheduling.request_checks import RequestRules

ADD_SUB = """
name: "add_sub"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
IDENTITY = """
name: "simple_identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
RICH = """
name: "rich"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] }, { name: "B" data_type: TYPE_INT32 dims: [ -1 ] optional: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)
UNKNOWN = "[request id: <id_unknown>] "


def rules(text: str) -> RequestRules:
    return RequestRules(parse_config_text(text, Path("config.pbtxt")))


def tensor(name: str, shape: tuple[int, ...], datatype: str = "FP32") -> Tensor:
    dtype = np.object_ if datatype == "BYTES" else {"FP32": np.float32, "INT32": np.int32}[datatype]
    return Tensor(name, datatype, shape, np.zeros(shape, dtype=dtype))


def request(*inputs: Tensor, outputs: tuple[str, ...] = (), id: str = "") -> InferenceRequest:
    return InferenceRequest(
        "m", id=id, inputs=list(inputs), outputs=[RequestedOutput(name) for name in outputs]
    )


def message(model: RequestRules, req: InferenceRequest) -> str:
    with pytest.raises(TritonError) as caught:
        model.check(req)
    assert caught.value.code == ErrorCode.INVALID_ARG
    return caught.value.message


def test_shape_message_ends_with_a_blank_without_max_batch_size() -> None:
    got = message(rules(ADD_SUB), request(tensor("INPUT0", (5,)), tensor("INPUT1", (4,))))
    assert got == f"{UNKNOWN}unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [5]. "


def test_shape_message_carries_the_batch_note_with_max_batch_size() -> None:
    got = message(rules(IDENTITY), request(tensor("INPUT0", (2,), "BYTES")))
    assert got == (
        f"{UNKNOWN}unexpected shape for input 'INPUT0' for model 'simple_identity'. Expected [-1,-1], "
        f"got [2]. {NOTE}"
    )


def test_missing_inputs_are_listed_without_blanks() -> None:
    add_sub = rules(ADD_SUB)
    assert message(add_sub, request()) == (
        f"{UNKNOWN}expected 2 inputs but got 0 inputs for model 'add_sub'. Got input(s) [], but missing "
        "required input(s) ['INPUT0','INPUT1']. Please provide all required input(s)."
    )
    assert message(add_sub, request(tensor("INPUTX", (4,)))) == (
        f"{UNKNOWN}expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUTX'], but "
        "missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s)."
    )


def test_too_many_inputs_lists_them_in_reverse_and_nothing_missing_as_a_bare_bracket() -> None:
    got = message(
        rules(ADD_SUB),
        request(tensor("INPUT1", (4,)), tensor("INPUT0", (4,)), tensor("INPUTX", (4,)), id="r1"),
    )
    assert got == (
        "[request id: r1] expected 2 inputs but got 3 inputs for model 'add_sub'. Got input(s) "
        "['INPUTX','INPUT0','INPUT1'], but missing required input(s) ]. Please provide all required input(s)."
    )


def test_optional_inputs_give_a_range() -> None:
    got = message(
        rules(RICH), request(tensor("A", (1, 2)), tensor("B", (1, 1), "INT32"), tensor("C", (1, 1)))
    )
    assert got.startswith(
        f"{UNKNOWN}expected number of inputs between 1 and 2 but got 3 inputs for model 'rich'"
    )
    rules(RICH).check(request(tensor("A", (1, 2))))  # the optional input may be left out


def test_unknown_input_with_the_right_count() -> None:
    got = message(rules(ADD_SUB), request(tensor("INPUT0", (4,)), tensor("INPUTX", (4,))))
    assert got == "unexpected inference input 'INPUTX' for model 'add_sub'"


def test_requested_outputs_are_checked_first_in_name_order() -> None:
    add_sub = rules(ADD_SUB)
    got = message(add_sub, request(tensor("INPUT0", (4,)), outputs=("Z", "A")))  # INPUT1 missing too
    assert got == "unexpected inference output 'A' for model 'add_sub'"


def test_an_output_requested_twice_is_refused() -> None:
    req = request(tensor("INPUT0", (4,)), tensor("INPUT1", (4,)), outputs=("OUTPUT1", "OUTPUT0", "OUTPUT1"))
    assert message(rules(ADD_SUB), req) == f"{UNKNOWN}output 'OUTPUT1' already exists in request"


def test_batch_checks_come_before_datatype_and_shape() -> None:
    identity = rules(IDENTITY)
    assert message(identity, request(tensor("INPUT0", (9, 1), "INT32"))) == (
        f"{UNKNOWN}inference request batch-size must be <= 8 for 'simple_identity'"
    )
    assert message(identity, request(tensor("INPUT0", (), "BYTES"))) == (
        f"{UNKNOWN}input 'INPUT0' has no shape but model requires batch dimension for 'simple_identity'"
    )
    assert message(rules(RICH), request(tensor("A", (1, 2)), tensor("B", (2, 1), "INT32"))) == (
        f"{UNKNOWN}input 'A' batch size does not match other inputs for 'rich'"
    )


def test_inputs_are_reported_in_reverse_request_order() -> None:
    add_sub = rules(ADD_SUB)
    assert "input 'INPUT1'" in message(add_sub, request(tensor("INPUT0", (5,)), tensor("INPUT1", (5,))))
    assert "input 'INPUT0'" in message(add_sub, request(tensor("INPUT1", (5,)), tensor("INPUT0", (5,))))
    assert message(add_sub, request(tensor("INPUT0", (5,), "INT32"), tensor("INPUT1", (4,)))) == (
        f"{UNKNOWN}inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"
    )
