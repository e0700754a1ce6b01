"""The model file must agree with its config (real ONNX graphs and TorchScript archives), and a config
left out is completed from the file the way Triton completes it."""

from __future__ import annotations

from pathlib import Path

from server.protocol.config_json import to_json_dict
from server.repository.validation import validate_repositories
from tests.repo_builder import ONNX_CONFIG, add_model, add_onnx_simple, write_onnx_add_sub
from tests.torch_needed import import_torch


def errors(repo: Path, model: str = "simple") -> list[str]:
    report = validate_repositories([repo])
    (found,) = [m for m in report.models if m.name == model]
    return [p.one_line() for p in found.problems if p.severity == "error"]


def test_dims_that_include_the_batch_dimension_are_explained(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config=ONNX_CONFIG.replace("dims: [ 16 ]", "dims: [ -1, 16 ]"))
    found = errors(tmp_path)
    assert found, "a batch dimension written into dims must be reported"
    assert any(
        "the model expects 2 dimensions (shape [-1,16]) but the model configuration specifies 3 dimensions"
        in e
        and "dims exclude the batch dimension when max_batch_size > 0" in e
        and "use dims [16], not [-1,16]" in e
        for e in found
    ), found


def test_batching_model_with_max_batch_size_zero_is_explained(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config=ONNX_CONFIG.replace("max_batch_size: 8", "max_batch_size: 0"))
    # Triton's auto-complete turns max_batch_size 0 into 4 for a model that batches: say so
    report = validate_repositories([tmp_path])
    (warning,) = report.models[0].problems
    assert warning.severity == "warning" and "was auto-completed to 4" in warning.message
    # with auto-complete off, as with Triton's --disable-auto-complete-config, it is a shape error
    report = validate_repositories([tmp_path], auto_complete=False)
    found = [p.one_line() for p in report.models[0].problems]
    assert any("set max_batch_size > 0" in e and "dims exclude the batch dimension" in e for e in found), (
        found
    )


def test_fixed_first_dimension_cannot_batch(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, batch=False)
    found = errors(tmp_path)
    assert any(
        "model does not support batching while non-zero max_batch_size is specified" in e for e in found
    )


def test_wrong_input_name_lists_the_allowed_ones(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config=ONNX_CONFIG.replace('"INPUT1"', '"INPUT_1"'))
    found = errors(tmp_path)
    assert any("unexpected inference input 'INPUT_1', allowed inputs are: INPUT0, INPUT1" in e for e in found)
    assert any("configuration expects 2 inputs" not in e for e in found)


def test_wrong_data_type(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config=ONNX_CONFIG.replace("TYPE_INT32", "TYPE_FP32", 1))
    assert any(
        "unexpected datatype TYPE_FP32 for inference input 'INPUT0', expecting TYPE_INT32" in e
        for e in errors(tmp_path)
    )


def test_wrong_fixed_dimension(tmp_path: Path) -> None:
    add_onnx_simple(
        tmp_path,
        config=ONNX_CONFIG.replace(
            'dims: [ 16 ] },\n  { name: "INPUT1"', 'dims: [ 8 ] },\n  { name: "INPUT1"'
        ),
    )
    assert any(
        "tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model configuration "
        "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
        "explicit tensor shape, making complete shape [-1,8])"
        in e
        and "use dims [16]" in e
        for e in errors(tmp_path)
    )


def test_unreadable_onnx_file_is_one_error(tmp_path: Path) -> None:
    add_model(tmp_path, "simple", ONNX_CONFIG, {"1/model.onnx": b"not an onnx file"})
    found = errors(tmp_path)
    assert len(found) == 1 and "cannot read ONNX model" in found[0]


def test_onnx_without_config_is_auto_completed_like_triton(tmp_path: Path) -> None:
    folder = add_model(tmp_path, "auto", None)
    write_onnx_add_sub(folder / "1" / "model.onnx")
    report = validate_repositories([tmp_path])
    (model,) = report.models
    assert model.problems == []
    assert model.config is not None
    config = to_json_dict(model.config)
    assert config["name"] == "auto"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert config["instance_group"] == [
        {
            "name": "auto",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert config["default_model_filename"] == "model.onnx"
    assert config["version_policy"] == {"latest": {"num_versions": 1}}


def test_config_naming_only_the_platform_gets_tensors_from_the_file(tmp_path: Path) -> None:
    add_onnx_simple(tmp_path, config='platform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    report = validate_repositories([tmp_path])
    assert report.models[0].problems == []
    assert report.models[0].config is not None
    assert [o.name for o in report.models[0].config.output] == ["OUTPUT0", "OUTPUT1"]


torch = import_torch()


class _AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


TORCH_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_torchscript_input_count_must_match_forward(tmp_path: Path) -> None:
    folder = add_model(tmp_path, "ts", TORCH_CONFIG)
    (folder / "1").mkdir()
    torch.jit.save(torch.jit.script(_AddSub()), str(folder / "1" / "model.pt"))
    found = errors(tmp_path, "ts")
    assert any(
        "configuration expects 1 inputs, model provides 2" in e and "forward() takes (a, b)" in e
        for e in found
    )
    (folder / "config.pbtxt").write_text(
        TORCH_CONFIG.replace(
            'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        )
    )
    assert errors(tmp_path, "ts") == []
    # Triton's words for a config with no output at all
    two_inputs = (folder / "config.pbtxt").read_text()
    (folder / "config.pbtxt").write_text(two_inputs.split("output [")[0])
    assert any(
        "model configuration must contain at least one output, none were specified" in e
        for e in errors(tmp_path, "ts")
    )


def test_too_many_inputs_are_counted_before_their_names(tmp_path: Path) -> None:
    extra = '{ name: "INPUT_EXTRA" data_type: TYPE_INT32 dims: [ 16 ] },\n  { name: "INPUT1"'
    add_onnx_simple(tmp_path, config=ONNX_CONFIG.replace('{ name: "INPUT1"', extra, 1))
    found = errors(tmp_path)
    assert any(
        "unable to load model 'simple', configuration expects 3 inputs, model provides 2" in e for e in found
    )
    assert not any("unexpected inference input 'INPUT_EXTRA'" in e for e in found), found


def test_torchscript_inputs_named_after_no_convention_are_a_warning(tmp_path: Path) -> None:
    # Triton's pytorch backend loads such a model, binding the inputs in config order
    folder = add_model(
        tmp_path,
        "ts",
        TORCH_CONFIG.replace(
            'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        ),
    )
    (folder / "1").mkdir()
    torch.jit.save(torch.jit.script(_AddSub()), str(folder / "1" / "model.pt"))
    report = validate_repositories([tmp_path])
    (found,) = [m for m in report.models if m.name == "ts"]
    assert [(p.severity, p.message) for p in found.problems] == [
        (
            "warning",
            "inputs of model 'ts' match neither forward()'s arguments (a, b) nor the naming convention "
            "<name>__<index>: forward() takes them in the configuration's order",
        )
    ]


def test_pickled_state_dict_is_not_a_torchscript_model(tmp_path: Path) -> None:
    folder = add_model(tmp_path, "ts", TORCH_CONFIG)
    (folder / "1").mkdir()
    torch.save({"w": torch.zeros(2)}, str(folder / "1" / "model.pt"))
    found = errors(tmp_path, "ts")
    assert len(found) == 1 and "cannot load TorchScript model" in found[0] and "torch.jit.save" in found[0]


def test_onnx_sequence_model_keeps_control_inputs_out_of_the_config(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    names = ("INPUT", "START", "READY")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 1]) for n in names]
    output = helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["batch", 1])
    nodes = [
        helper.make_node("Add", ["INPUT", "START"], ["T"]),
        helper.make_node("Add", ["T", "READY"], ["OUTPUT"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "seq", inputs, [output]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    folder = add_model(
        tmp_path,
        "seq",
        'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "sequence_batching { control_input [\n"
        '  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },\n'
        '  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }\n',
    )
    (folder / "1").mkdir()
    onnx.save(model, str(folder / "1" / "model.onnx"))
    report = validate_repositories([tmp_path])
    assert report.models[0].problems == []
    assert report.models[0].config is not None
    assert [i.name for i in report.models[0].config.input] == ["INPUT"]  # not extended by auto-complete
    (folder / "config.pbtxt").write_text(
        (folder / "config.pbtxt")
        .read_text()
        .replace(
            '  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }',
            "] }",
        )
        .replace("int32_false_true: [ 0, 1 ] } ] },\n", "int32_false_true: [ 0, 1 ] } ] }\n")
    )
    found = errors(tmp_path, "seq")
    assert any(
        "configuration expects 1 inputs, model provides 3" in e and "add input(s) READY" in e for e in found
    ), found
