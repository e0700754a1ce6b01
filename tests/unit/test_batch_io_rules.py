"""The batch_input / batch_output rules (server/config/batch_io_rules.py) and the model-file checks of
ragged ONNX models, on real repositories on disk as `tcli repo validate` and loading read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.repository.validation import validate_repositories
from tests.integration.test_batching_mixed import RAGGED_ONNX_CONFIG, write_ragged_sum_onnx
from tests.repo_builder import MINIMAL_MODEL, add_model

PYTHON = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def findings(repo: Path, severity: str = "error") -> list[str]:
    (model,) = validate_repositories([repo]).models
    return [p.one_line() for p in model.problems if p.severity == severity]


def python_model(repo: Path, extra: str) -> None:
    add_model(repo, "m", PYTHON + extra, {"1/model.py": MINIMAL_MODEL})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32 } ]',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
        ),
        (
            'batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "B" data_type: TYPE_INT64 source_input: "INPUT" } ]',
            "batch input data type must be TYPE_INT32 or TYPE_FP32 for m",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 source_input: "NOPE" } ]',
            "unknown source input name 'NOPE' for m",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT data_type: TYPE_INT32 source_input: "INPUT" } ]',
            "batch input kind 'BATCH_ELEMENT_COUNT' has no target_name for m",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "INPUT" data_type: TYPE_INT32 source_input: "INPUT" } ]',
            "batch input target name 'INPUT' is also an input of the configuration for m",
        ),
        (
            'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUT" } ]',
            "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0 for m",
        ),
        (
            'batch_output [ { target_name: "GONE" source_input: "INPUT" } ]',
            "unknown target output name 'GONE' for m",
        ),
        (
            'batch_output [ { target_name: [ "OUT", "OUT" ] source_input: "INPUT" } ]',
            "target output name 'OUT' can only be specified once for m",
        ),
    ],
)
def test_each_batch_io_rule_in_tritons_words(tmp_path: Path, extra: str, message: str) -> None:
    python_model(tmp_path, extra)
    (model,) = validate_repositories([tmp_path]).models
    errors = [p for p in model.problems if p.severity == "error"]
    assert len(errors) == 1, [e.one_line() for e in errors]
    assert message in errors[0].message
    assert errors[0].fix  # how to put it right
    assert errors[0].file == tmp_path / "m" / "config.pbtxt"
    assert errors[0].line is not None and errors[0].line > 5  # the batch_input / batch_output line


def test_python_models_are_warned_that_batch_inputs_never_reach_them(tmp_path: Path) -> None:
    python_model(
        tmp_path,
        'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32 source_input: "INPUT" } ]',
    )
    assert findings(tmp_path) == []
    (warning,) = findings(tmp_path, "warning")
    assert "python backend does not provide" in warning


def test_a_ragged_onnx_model_is_valid_with_its_1d_input_and_batch_input(tmp_path: Path) -> None:
    folder = add_model(tmp_path, "ragged", RAGGED_ONNX_CONFIG)
    write_ragged_sum_onnx(folder / "1" / "model.onnx")
    assert findings(tmp_path) == []
    assert findings(tmp_path, "warning") == []


def test_a_batch_input_the_onnx_model_lacks_is_named(tmp_path: Path) -> None:
    folder = add_model(
        tmp_path, "ragged", RAGGED_ONNX_CONFIG.replace('target_name: "INDEX"', 'target_name: "IDX"')
    )
    write_ragged_sum_onnx(folder / "1" / "model.onnx")
    errors = findings(tmp_path)
    assert any("unexpected batch input 'IDX' for model 'ragged'" in e for e in errors), errors


def test_auto_complete_leaves_batch_input_targets_out_of_the_inputs(tmp_path: Path) -> None:
    config = """
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    batch_input [
      { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32 source_input: "INPUT" }
    ]
    """
    folder = add_model(tmp_path, "ragged", config)
    write_ragged_sum_onnx(folder / "1" / "model.onnx")
    (model,) = validate_repositories([tmp_path]).models
    assert [p.one_line() for p in model.problems if p.severity == "error"] == []
    assert model.config is not None
    assert [i.name for i in model.config.input] == ["INPUT"]
