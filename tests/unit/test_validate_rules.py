"""Each validation rule, on a real repository on disk: a broken config fails with the right message,
pointing at the right line, and a valid one passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.config.problems import RepositoryReport
from server.repository.validation import validate_repositories
from tests.repo_builder import (
    ADD_SUB_CONFIG,
    MINIMAL_MODEL,
    ONNX_CONFIG,
    add_model,
    add_onnx_simple,
    add_python_add_sub,
)


def check(repo: Path) -> RepositoryReport:
    return validate_repositories([repo])


def problems_of(report: RepositoryReport, model: str, severity: str = "error") -> list[str]:
    (found,) = [m for m in report.models if m.name == model]
    return [p.one_line() for p in found.problems if p.severity == severity]


def only_error(report: RepositoryReport, model: str) -> str:
    errors = problems_of(report, model)
    assert len(errors) == 1, errors
    return errors[0]


def test_valid_repository_has_no_problems(tmp_path: Path) -> None:
    add_python_add_sub(tmp_path)
    add_onnx_simple(tmp_path)
    report = check(tmp_path)
    assert [m.status for m in report.models] == ["ok", "ok"], report.all_problems()
    assert not report.has_errors(strict=True)


def test_parse_error_names_file_line_and_column_and_suggests_the_field(tmp_path: Path) -> None:
    add_model(tmp_path, "m", 'backend: "python"\n\nmax_batch: 8\n', {"1/model.py": MINIMAL_MODEL})
    report = check(tmp_path)
    (problem,) = report.models[0].problems
    assert problem.file == tmp_path / "m" / "config.pbtxt"
    assert (problem.line, problem.column) == (3, 1)
    assert 'no field named "max_batch"' in problem.message
    assert problem.fix == "did you mean 'max_batch_size'?"


def test_an_enum_number_out_of_range_is_a_parse_error_at_its_place(tmp_path: Path) -> None:
    config = 'backend: "python"\ninstance_group [ { kind: 99999999999999999999 } ]\n'
    add_model(tmp_path, "m", config, {"1/model.py": MINIMAL_MODEL})
    (problem,) = check(tmp_path).models[0].problems
    assert (problem.line, problem.column) == (2, 26)
    assert problem.message == "Value out of range: 99999999999999999999"
    assert problem.fix == "use a value the field's type can hold"


def test_unknown_data_type_is_a_parse_error_listing_known_types(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace(
        'TYPE_FP32 dims: [ 4 ] },\n  { name: "INPUT1"', 'TYPE_FP33 dims: [ 4 ] },\n  { name: "INPUT1"'
    )
    add_python_add_sub(tmp_path, config=config)
    (problem,) = check(tmp_path).models[0].problems
    assert "TYPE_FP33" in problem.message
    assert problem.line == 5
    assert problem.fix is not None and "did you mean TYPE_FP32?" in problem.fix


def test_name_must_match_folder(tmp_path: Path) -> None:
    add_python_add_sub(tmp_path, config='name: "other"\n' + ADD_SUB_CONFIG)
    report = check(tmp_path)
    message = only_error(report, "add_sub")
    assert (
        "unexpected directory name 'add_sub' for model 'other', directory name must equal model name"
        in message
    )
    assert report.models[0].problems[0].line == 1


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ('platform: "onnx"\n', "unexpected platform type 'onnx' for m"),
        (
            'platform: "onnxruntime_onnx"\nbackend: "pytorch"\n',
            "platform 'onnxruntime_onnx' is served by backend 'onnxruntime'",
        ),
        ('backend: "pythn"\n', "unable to find backend library for backend 'pythn'"),
    ],
)
def test_platform_and_backend_known_and_consistent(tmp_path: Path, config: str, expected: str) -> None:
    add_model(tmp_path, "m", config + "max_batch_size: 0\n", {"1/model.onnx": b"x"})
    assert any(expected in p for p in problems_of(check(tmp_path), "m"))


def test_backend_cannot_be_determined_without_config_or_known_file(tmp_path: Path) -> None:
    add_model(tmp_path, "m", None, {"1/weights.bin": b"x"})
    message = only_error(check(tmp_path), "m")
    assert "Could not determine backend for model 'm'" in message
    assert 'backend: "python"' in message  # the fix says what to write


def test_negative_max_batch_size(tmp_path: Path) -> None:
    add_python_add_sub(tmp_path, config=ADD_SUB_CONFIG.replace("max_batch_size: 8", "max_batch_size: -1"))
    assert "'max_batch_size' must be non-negative value for add_sub" in only_error(check(tmp_path), "add_sub")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" data_type: TYPE_FP32 }',
            "model input 'INPUT1' must specify 'dims'",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 0 ] }',
            "model input 'INPUT1' dimension must be integer >= 1, or -1",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" dims: [ 4 ] }',
            "model input 'INPUT1' must specify 'data_type'",
        ),
        (
            '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -2 ] }',
            "model output 'OUTPUT1' dimension must be integer >= 1",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }',
            "model input 'INPUT0' is specified 2 times",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 3 ] } }',
            "model input 'INPUT1' has different size for dims and reshape",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 4 ] reshape: { shape: [ -1, 2, -1 ] } }',
            "different number of variable-size dimensions",
        ),
        (
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
            '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ -1, 4 ] } }',
            "model input 'INPUT1' has different size for dims and reshape",
        ),
    ],
)
def test_tensor_rules(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in ADD_SUB_CONFIG
    add_model(tmp_path, "m", ADD_SUB_CONFIG.replace(old, new), {"1/model.py": MINIMAL_MODEL})
    errors = problems_of(check(tmp_path), "m")
    assert any(expected in e for e in errors), errors


def test_problem_points_at_the_tensor_line(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace(
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }',
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 0 ] }',
    )
    add_python_add_sub(tmp_path, config=config)
    (problem,) = check(tmp_path).models[0].problems
    assert problem.line == 6  # the INPUT1 line


def test_versions_must_be_numeric_and_present(tmp_path: Path) -> None:
    add_model(tmp_path, "noversion", ADD_SUB_CONFIG, {"v1/model.py": MINIMAL_MODEL})
    report = check(tmp_path)
    assert (
        "at least one version must be available under the version policy of model 'noversion'"
        in only_error(report, "noversion")
    )
    warnings = problems_of(report, "noversion", "warning")
    assert any("folder 'v1'" in w and "positive integers" in w for w in warnings)


def test_version_folder_starting_with_zero_is_ignored(tmp_path: Path) -> None:
    add_model(tmp_path, "m", ADD_SUB_CONFIG, {"01/model.py": MINIMAL_MODEL, "2/model.py": MINIMAL_MODEL})
    report = check(tmp_path)
    assert report.models[0].versions == (2,)
    assert any("folder '01'" in w for w in problems_of(report, "m", "warning"))


def test_specific_version_policy_names_missing_folder(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG + "version_policy: { specific: { versions: [ 3 ] } }\n"
    add_python_add_sub(tmp_path, config=config)
    errors = problems_of(check(tmp_path), "add_sub")
    assert any(
        "version 3 is specified for model 'add_sub', but the version directory is not present" in e
        for e in errors
    )
    assert any("at least one version must be available" in e for e in errors)


def test_default_model_file_must_exist_in_each_served_version(tmp_path: Path) -> None:
    add_model(
        tmp_path,
        "m",
        ONNX_CONFIG + "version_policy: { all { } }\n",
        {"1/model.onnx": b"", "2/other.onnx": b""},
    )
    errors = problems_of(check(tmp_path), "m")
    assert any("unable to find 'model.onnx' for model 'm' version 2" in e for e in errors)


def test_label_file_missing_and_wrong_length(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace(
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }',
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" }',
    )
    add_python_add_sub(tmp_path, config=config)
    assert "failed to open text file for read" in only_error(check(tmp_path), "add_sub")
    (tmp_path / "add_sub" / "labels.txt").write_text("a\nb\nc\n")
    assert "has 3 labels but output 'OUTPUT0' of model 'add_sub' has 4 classes" in only_error(
        check(tmp_path), "add_sub"
    )
    (tmp_path / "add_sub" / "labels.txt").write_text("a\nb\nc\nd\n")
    assert check(tmp_path).models[0].status == "ok"


@pytest.mark.parametrize(
    ("batching", "expected"),
    [
        (
            "dynamic_batching { preferred_batch_size: [ 16 ] }",
            "dynamic batching preferred size must be <= max batch size for add_sub",
        ),
        (
            "dynamic_batching { preferred_batch_size: [ 0 ] }",
            "dynamic batching preferred size must be positive",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
            "default priority level must be in range [1, 2]",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 1 preserve_ordering: true }",
            "Only one priority level is allowed when 'preserve_ordering' is true",
        ),
        (
            "dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY } }",
            "Queue policy can not have DELAY as timeout action",
        ),
    ],
)
def test_dynamic_batching_rules(tmp_path: Path, batching: str, expected: str) -> None:
    add_python_add_sub(tmp_path, config=ADD_SUB_CONFIG + batching + "\n")
    assert expected in only_error(check(tmp_path), "add_sub")


SEQ = """sequence_batching {{
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START {start} }} ] }},
    {{ name: "READY" control [ {{ kind: {ready_kind} {ready} }} ] }}
  ]
}}
"""


@pytest.mark.parametrize(
    ("start", "ready_kind", "ready", "expected"),
    [
        ("int32_false_true: [ 0, 1 ]", "CONTROL_SEQUENCE_READY", "int32_false_true: [ 0, 1 ]", None),
        (
            "int32_false_true: [ 0, 1 ]",
            "CONTROL_SEQUENCE_START",
            "int32_false_true: [ 0, 1 ]",
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors",
        ),
        (
            "",
            "CONTROL_SEQUENCE_READY",
            "int32_false_true: [ 0, 1 ]",
            "must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_START",
        ),
        (
            "int32_false_true: [ 1 ]",
            "CONTROL_SEQUENCE_READY",
            "int32_false_true: [ 0, 1 ]",
            "control 'int32_false_true' must have exactly 2 entries",
        ),
        ("int32_false_true: [ 0, 1 ]", "CONTROL_SEQUENCE_CORRID", "", "must specify data_type TYPE_UINT64"),
        (
            "int32_false_true: [ 0, 1 ]",
            "CONTROL_SEQUENCE_CORRID",
            "data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ]",
            "must not specify either",
        ),
    ],
)
def test_sequence_batching_control_inputs(
    tmp_path: Path, start: str, ready_kind: str, ready: str, expected: str | None
) -> None:
    add_python_add_sub(
        tmp_path, config=ADD_SUB_CONFIG + SEQ.format(start=start, ready_kind=ready_kind, ready=ready)
    )
    errors = problems_of(check(tmp_path), "add_sub")
    if expected is None:
        assert errors == []
    else:
        assert any(expected in e for e in errors), errors


@pytest.mark.parametrize(
    ("group", "expected", "severity"),
    [
        (
            "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "instance group add_sub_0 of model add_sub has kind KIND_CPU but specifies one or more GPUs",
            "error",
        ),
        ("instance_group [ { kind: KIND_CPU count: -2 } ]", "must specify count >= 1", "error"),
        (
            "instance_group [ { kind: KIND_GPU } ]",
            "instance group KIND_GPU requested for model add_sub but no GPU is visible",
            "warning",
        ),
        (
            "instance_group [ { kind: KIND_CPU rate_limiter { resources [ { count: 1 } ] } } ]",
            "a rate_limiter resource of instance group add_sub_0 of model add_sub has no name",
            "error",
        ),
        (
            'instance_group [ { kind: KIND_CPU rate_limiter { resources [ { name: "R" global: true count: 1 } ] } },'
            ' { kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 1 } ] } } ]',
            'Resource "R" is present as both global and device-specific resource in the model configuration.',
            "error",
        ),
    ],
)
def test_instance_group_rules(tmp_path: Path, group: str, expected: str, severity: str) -> None:
    add_python_add_sub(tmp_path, config=ADD_SUB_CONFIG + group + "\n")
    found = problems_of(check(tmp_path), "add_sub", severity)
    assert any(expected in p for p in found), found


def test_broken_model_does_not_stop_the_others(tmp_path: Path) -> None:
    add_model(tmp_path, "a_broken", "max_batch_size: [", {"1/model.py": MINIMAL_MODEL})
    add_python_add_sub(tmp_path)
    report = check(tmp_path)
    assert [(m.name, m.status) for m in report.models] == [("a_broken", "error"), ("add_sub", "ok")]


def test_model_in_two_repositories_is_reported(tmp_path: Path) -> None:
    add_python_add_sub(tmp_path / "r1")
    add_python_add_sub(tmp_path / "r2")
    report = validate_repositories([tmp_path / "r1", tmp_path / "r2"])
    assert any("appears in more than one repository" in p.message for p in report.all_problems())


def test_missing_repository_is_one_error(tmp_path: Path) -> None:
    report = validate_repositories([tmp_path / "nope"])
    assert report.has_errors()
    assert "is not a directory" in report.problems[0].message
