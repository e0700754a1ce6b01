"""A config gets the refusal real Triton 2.51 gives it, in Triton's words (its qa and its users grep
them): the config's own rules before a missing version folder or backend, ensembles checked as
Triton's dependency graph checks them, and the completed config Triton serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from server.config.complete import complete_config
from server.config.ensemble_steps import ensemble_error
from server.config.model_folder import scan_model
from server.repository import ensemble_deps
from server.repository.validation import load_refusals, validate_model
from tests.repo_builder import add_model

IO = """
input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
TF = 'platform: "tensorflow_savedmodel"\nmax_batch_size: 8\n'
ENSEMBLE_IO = """
input [ { name: "data" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "prob" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ONE_STEP = """ensemble_scheduling { step [ { model_name: "inner" model_version: -1
  input_map { key: "INPUT0" value: "data" } output_map { key: "OUTPUT0" value: "prob" } } ] }
"""


def first_refusal(
    tmp_path: Path, name: str, config: str | None, files: dict[str, str | bytes], auto: bool
) -> str:
    folder = add_model(tmp_path, name, config, files)
    report = validate_model(
        scan_model(folder, tmp_path), auto_complete=auto, backend_directory=tmp_path / "be"
    )
    refusals = load_refusals(report)
    assert refusals, report.problems
    return refusals[0].message


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (  # the config's error, not "at least one version must be available"
            TF + IO + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 } ]\n',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
        ),
        (
            TF + IO.replace("dims: [ 4 ] }", "dims: [ 4 ] reshape: { shape: [ 3 ] } }", 1),
            "model input 'input' has different size for dims and reshape for m",
        ),
        (
            TF + IO.replace("dims: [ 4 ] }", "dims: [ 2, -1 ] reshape: { shape: [ -1, 4 ] } }", 1),
            "model input 'input' has different size for dims and reshape for m",
        ),
        (
            TF
            + IO
            + """sequence_batching { control_input [
              { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
              { name: "START" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }
            """,
            "sequence batching control tensor 'START' is specified for multiple control kinds for m",
        ),
        (
            'name: "other"\n' + TF + IO.replace("dims: [ 4 ] }", "dims: [ 0 ] }", 1),
            "model input 'input' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for other",
        ),
        ('platform: "tensorflo"\n' + IO, "unexpected platform type 'tensorflo' for m"),
        (
            'platform: "ensemble"\nbackend: "python"\n' + ENSEMBLE_IO + ONE_STEP,
            "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
        ),
        (
            'platform: "ensemble"\n' + ENSEMBLE_IO,
            "ensemble scheduling must be set for ensemble m whose platform is ensemble",
        ),
        (
            'platform: "ensemble"\n' + ENSEMBLE_IO + "optimization { }\n" + ONE_STEP,
            "optimization should not be specified for ensemble 'm'",
        ),
        (
            'platform: "ensemble"\n'
            + ENSEMBLE_IO
            + ONE_STEP.replace('input_map { key: "INPUT0" value: "data" }', ""),
            "must specify 'input_map' in step 0 of ensemble 'm'",
        ),
        (
            'platform: "ensemble"\n'
            + ENSEMBLE_IO.replace(
                "dims: [ 4 ] } ]", 'dims: [ 4 ] }, { name: "data_2" data_type: TYPE_FP32 dims: [ 4 ] } ]', 1
            )
            + ONE_STEP,
            "ensemble input 'data_2' for ensemble m' is not used",
        ),
        (
            'platform: "ensemble"\n' + ENSEMBLE_IO + ONE_STEP.replace('value: "prob"', 'value: "temp"'),
            "ensemble output 'prob' for ensemble m' is not used",
        ),
    ],
)
def test_a_config_without_version_folders_gets_its_own_error(
    tmp_path: Path, config: str, expected: str
) -> None:
    assert first_refusal(tmp_path, "m", config, {}, auto=False) == expected


def test_with_auto_complete_off_a_model_needs_its_config_file(tmp_path: Path) -> None:
    message = first_refusal(tmp_path, "m", None, {"1/model.py": ""}, auto=False)
    assert (
        message == f"failed to open text file for read {tmp_path}/m/config.pbtxt: No such file or directory"
    )


def test_an_instance_group_is_checked_before_the_model_file(tmp_path: Path) -> None:
    config = (
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        + IO
        + "instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]\n"
    )
    assert first_refusal(tmp_path, "m", config, {"1/.keep": ""}, auto=False) == (
        "instance group m_0 of model m specifies invalid or unsupported gpu id 42. GPUs with at least the "
        "minimum required CUDA compute compatibility of 6.000000 are: "
    )


def test_an_unknown_backend_named_by_the_model_name_is_looked_for(tmp_path: Path) -> None:
    message = first_refusal(tmp_path, "m.unknown", "", {"1/.keep": ""}, auto=True)
    assert message.startswith(
        "unable to find backend library for backend 'unknown', try specifying runtime on the model configuration."
    )


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        (
            "__invalid__",
            "unable to find backend library '__invalid__' for model 'm', searched: '{repo}/m/1' ",
        ),
        (
            "../lib/libtriton_x.so",
            "backend library name '../lib/libtriton_x.so' escapes backend directory '{repo}/m/1', for model 'm', "
            "check model config runtime field",
        ),
    ],
)
def test_a_runtime_library_is_looked_for_where_triton_looks(
    tmp_path: Path, runtime: str, expected: str
) -> None:
    config = f'backend: "python"\nruntime: "{runtime}"\n' + IO
    message = first_refusal(tmp_path, "m", config, {"1/model.py": "", "lib/libtriton_x.so": ""}, auto=False)
    assert message.startswith(expected.format(repo=tmp_path))


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


IDENTITY = """name: "{name}" max_batch_size: {batch}
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
"""


def identity(
    name: str, batch: int = 4, dtype: str = "TYPE_FP32", dims: str = "4", decoupled: bool = False
) -> str:
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    return IDENTITY.format(name=name, batch=batch, dtype=dtype, dims=dims) + policy


def two_steps(first: str, second: str, batch: int = 2, between: str = "temp") -> str:
    return f"""name: "e" platform: "ensemble" max_batch_size: {batch}
    input [ {{ name: "data" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    output [ {{ name: "prob" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    ensemble_scheduling {{ step [
      {{ model_name: "{first}" model_version: -1 input_map {{ key: "INPUT0" value: "data" }}
        output_map {{ key: "OUTPUT0" value: "{between}" }} }},
      {{ model_name: "{second}" model_version: -1 input_map {{ key: "INPUT0" value: "{between}" }}
        output_map {{ key: "OUTPUT0" value: "prob" }} }} ] }}
    """


@pytest.mark.parametrize(
    ("ensemble", "models", "expected"),
    [
        (
            two_steps("a", "b", batch=8),
            [identity("a"), identity("b")],
            "ensemble e allows maximum batch size 8, but it contains model a which only allows maximum batch size to be 4",
        ),
        (
            two_steps("a", "b").replace('key: "INPUT0" value: "temp"', 'key: "INPUT9" value: "temp"'),
            [identity("a"), identity("b")],
            "in ensemble e, ensemble tensor temp is mapping to non-existing input INPUT9 in model b",
        ),
        (
            two_steps("a", "b").replace('key: "OUTPUT0" value: "temp"', 'key: "OUTPUT9" value: "temp"'),
            [identity("a"), identity("b")],
            "in ensemble e, ensemble tensor temp is mapped from non-existing output OUTPUT9 in model a",
        ),
        (
            two_steps("a", "b"),
            [
                identity("a"),
                identity("b").replace("] }", '] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }', 1),
            ],
            "in ensemble e, input INPUT1 in model b is not mapped to any ensemble tensors",
        ),
        (
            two_steps("a", "b"),
            [identity("a"), identity("b", dtype="TYPE_INT32")],
            "in ensemble e, ensemble tensor temp: inconsistent data type: TYPE_FP32 is inferred from model a while "
            "TYPE_INT32 is inferred from model b",
        ),
        (
            two_steps("a", "b"),
            [identity("a"), identity("b", dims="4, 4")],
            "in ensemble e, ensemble tensor temp: inconsistent shape: [-1,4] is inferred from model a while "
            "[-1,4,4] is inferred from model b",
        ),
        (  # a non-batching step fits where its dims are the batching one's with the batch dimension
            two_steps("a", "b"),
            [identity("a"), identity("b", batch=0, dims="-1, 4")],
            None,
        ),
    ],
)
def test_steps_are_checked_against_the_composing_configs(
    ensemble: str, models: list[str], expected: str | None
) -> None:
    composing = {config.name: config for config in map(parse, models)}
    assert ensemble_error(parse(ensemble), composing) == expected


def test_a_step_reading_tensors_of_two_decoupled_models_is_refused() -> None:
    ensemble = parse(
        """name: "e" platform: "ensemble" max_batch_size: 0
        input [ { name: "data" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "prob" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [
          { model_name: "d" input_map { key: "INPUT0" value: "data" } output_map { key: "OUTPUT0" value: "x" } },
          { model_name: "d" input_map { key: "INPUT0" value: "data" } output_map { key: "OUTPUT0" value: "y" } },
          { model_name: "two" input_map { key: "INPUT0" value: "x" } input_map { key: "INPUT1" value: "y" }
            output_map { key: "OUTPUT0" value: "z" } },
          { model_name: "one" input_map { key: "INPUT0" value: "z" } output_map { key: "OUTPUT0" value: "prob" } }
        ] }
        """
    )
    two = identity("two", batch=0).replace(
        "] }", '] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }', 1
    )
    composing = {"d": parse(identity("d", batch=0, decoupled=True)), "two": parse(two)}
    composing["one"] = parse(identity("one", batch=0))
    assert ensemble_error(ensemble, composing) == (
        "in ensemble e, step of model 'two' receives inputs originated from different decoupled models"
    )


def test_dependency_graph_refusals() -> None:
    first, second = (
        parse(two_steps("e2", "e2")),
        parse(two_steps("e", "e").replace('name: "e"', 'name: "e2"', 1)),
    )
    steps = {"e": ["e2"], "e2": ["e"]}
    assert ensemble_deps.circular_dependency(first, steps.__getitem__) == (
        "circular dependency between ensembles: e -> ... -> e2 -> e"
    )
    assert ensemble_deps.circular_dependency(second, steps.__getitem__) == (
        "circular dependency between ensembles: e2 -> ... -> e -> e2"
    )
    itself = parse(two_steps("e", "a"))
    assert ensemble_deps.circular_dependency(itself, {"e": ["e", "a"], "a": []}.__getitem__) == (
        "circular dependency between ensembles: e -> ... -> e -> e"
    )
    assert ensemble_deps.missing_models(parse(two_steps("z", "a")), {"a"}) == (
        "ensemble e contains models that are not available or ambiguous: z"
    )
    pinned = parse(two_steps("a", "b").replace('"b" model_version: -1', '"b" model_version: 2'))
    assert ensemble_deps.version_error(pinned, {"a": [1], "b": [1]}) == (
        "ensemble 'e' depends on 'b' whose required version 2 is not loaded."
    )
    assert ensemble_deps.version_error(pinned, {"a": [1], "b": [1, 2]}) is None
    # a step that names no version asks for version 0, which Triton 2.51 refuses as well
    unpinned = parse(two_steps("a", "b").replace('"b" model_version: -1', '"b"'))
    assert ensemble_deps.version_error(unpinned, {"a": [1], "b": [1]}) == (
        "ensemble 'e' depends on 'b' whose required version 0 is not loaded."
    )


def test_the_completed_config_is_tritons(tmp_path: Path) -> None:
    batching = add_model(tmp_path, "m", None, {})
    raw = parse('backend: "python"\nmax_batch_size: 4\ndynamic_batching { }\n' + IO)
    completed = complete_config(raw, scan_model(batching, tmp_path), auto_complete=False)
    assert list(completed.dynamic_batching.preferred_batch_size) == [4]
    ensemble = add_model(tmp_path, "e", None, {})
    completed = complete_config(
        parse(two_steps("a", "b")), scan_model(ensemble, tmp_path), auto_complete=False
    )
    assert not completed.HasField("optimization")
    assert completed.HasField("model_transaction_policy")
