"""Ensemble rules across models: steps exist, tensors flow as a DAG, types and shapes agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.repository.validation import validate_repositories
from tests.repo_builder import add_model, add_onnx_simple

# simple: INPUT0/INPUT1 INT32 [16] -> OUTPUT0 (sum) / OUTPUT1 (difference), max_batch_size 8
STEP = """{{ model_name: "{model}" model_version: -1
      input_map {{ key: "INPUT0" value: "{a}" }} input_map {{ key: "INPUT1" value: "{b}" }}
      output_map {{ key: "OUTPUT0" value: "{sum}" }} output_map {{ key: "OUTPUT1" value: "{diff}" }} }}"""


def ensemble(
    steps: list[str],
    inputs: str = "A:TYPE_INT32:16,B:TYPE_INT32:16",
    outputs: str = "SUM:TYPE_INT32:16,DIFF:TYPE_INT32:16",
    max_batch: int = 8,
) -> str:
    def tensors(spec: str) -> str:
        items = []
        for item in spec.split(","):
            name, dtype, dims = item.split(":")
            items.append(f'{{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}')
        return ", ".join(items)

    return (
        f'platform: "ensemble"\nmax_batch_size: {max_batch}\n'
        f"input [ {tensors(inputs)} ]\noutput [ {tensors(outputs)} ]\n"
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


def ensemble_errors(tmp_path: Path, config: str) -> list[str]:
    add_onnx_simple(tmp_path)
    add_model(tmp_path, "ens", config, {"1/.keep": ""})
    report = validate_repositories([tmp_path])
    (found,) = [m for m in report.models if m.name == "ens"]
    return [p.one_line() for p in found.problems if p.severity == "error"]


def test_two_step_ensemble_is_valid(tmp_path: Path) -> None:
    steps = [
        STEP.format(model="simple", a="A", b="B", sum="S1", diff="D1"),
        STEP.format(model="simple", a="S1", b="D1", sum="SUM", diff="DIFF"),
    ]
    assert ensemble_errors(tmp_path, ensemble(steps)) == []


@pytest.mark.parametrize(
    ("steps", "kwargs", "expected"),
    [
        (
            [STEP.format(model="missing", a="A", b="B", sum="SUM", diff="DIFF")],
            {},
            "ensemble ens contains models that are not available or ambiguous: missing",
        ),
        (
            [STEP.format(model="simple", a="A", b="X", sum="SUM", diff="DIFF")],
            {},
            "ensemble input 'B' for ensemble ens' is not used",
        ),
        (
            [STEP.format(model="simple", a="A", b="B", sum="SUM", diff="D")],
            {},
            "ensemble output 'DIFF' for ensemble ens' is not used",
        ),
        (
            [STEP.format(model="simple", a="A", b="A", sum="SUM", diff="DIFF")],
            {},
            "ensemble input 'B' for ensemble ens' is not used",
        ),
        (
            [STEP.format(model="simple", a="A", b="B", sum="SUM", diff="SUM")],
            {},
            "ensemble tensor 'SUM' can appear in an output map only once for ensemble 'ens' step 0",
        ),
        (
            [STEP.format(model="simple", a="A", b="B", sum="SUM", diff="DIFF")],
            {"inputs": "A:TYPE_FP32:16,B:TYPE_INT32:16"},
            "in ensemble ens, ensemble tensor A: inconsistent data type: TYPE_FP32 is inferred from model ens while TYPE_INT32 is inferred from model simple",
        ),
        (
            [STEP.format(model="simple", a="A", b="B", sum="SUM", diff="DIFF")],
            {"inputs": "A:TYPE_INT32:8,B:TYPE_INT32:16"},
            "in ensemble ens, ensemble tensor A: inconsistent shape: [-1,8] is inferred from model ens while [-1,16] is inferred from model simple",
        ),
        (
            [STEP.format(model="simple", a="A", b="B", sum="SUM", diff="DIFF")],
            {"max_batch": 16},
            "ensemble ens allows maximum batch size 16, but it contains model simple which only allows maximum batch size to be 8",
        ),
    ],
)
def test_ensemble_rules(tmp_path: Path, steps: list[str], kwargs: dict[str, object], expected: str) -> None:
    found = ensemble_errors(tmp_path, ensemble(steps, **kwargs))  # type: ignore[arg-type]
    assert any(expected in e for e in found), found


def test_a_cycle_between_steps_leaves_an_output_unwritten(tmp_path: Path) -> None:
    steps = [
        STEP.format(model="simple", a="A", b="Y", sum="X", diff="SUM"),
        STEP.format(model="simple", a="X", b="B", sum="Y", diff="DIFF"),
    ]
    found = ensemble_errors(tmp_path, ensemble(steps))
    assert any(
        "output 'SUM' for ensemble 'ens' is not written: at least one of its depending tensors, 'X', "
        "is not connected" in e
        for e in found
    ), found


def test_step_key_must_be_an_input_of_the_composing_model(tmp_path: Path) -> None:
    step = STEP.format(model="simple", a="A", b="B", sum="SUM", diff="DIFF").replace(
        'key: "INPUT1"', 'key: "IN1"'
    )
    found = ensemble_errors(tmp_path, ensemble([step]))
    assert any(
        "in ensemble ens, ensemble tensor B is mapping to non-existing input IN1 in model simple" in e
        for e in found
    ), found


def test_an_ensemble_without_scheduling_is_refused_first(tmp_path: Path) -> None:
    config = 'platform: "ensemble"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU } ]\n'
    found = ensemble_errors(tmp_path, config)
    assert any(
        "ensemble scheduling must be set for ensemble ens whose platform is ensemble" in e for e in found
    )
    config += "ensemble_scheduling { }\n"
    found = ensemble_errors(tmp_path, config)
    assert any("instance group should not be specified for ensemble 'ens'" in e for e in found)


def test_ensemble_scheduling_on_a_non_ensemble_platform(tmp_path: Path) -> None:
    add_onnx_simple(
        tmp_path, config='platform: "onnxruntime_onnx"\nmax_batch_size: 8\nensemble_scheduling { }\n'
    )
    report = validate_repositories([tmp_path])
    assert any(
        "ensemble scheduling cannot be set for model 'simple' whose platform is not ensemble" in p.message
        for p in report.all_problems()
    )


def test_a_step_asking_for_a_version_its_model_does_not_serve(tmp_path: Path) -> None:
    step = STEP.format(model="simple", a="A", b="B", sum="SUM", diff="DIFF").replace(
        "model_version: -1", "model_version: 2"
    )
    found = ensemble_errors(tmp_path, ensemble([step]))
    assert any(
        "ensemble 'ens' depends on 'simple' whose required version 2 is not loaded." in e for e in found
    )
