"""Configs written back as canonical pbtxt parse to the same config; Triton's JSON form keeps int64
fields as numbers; a python model's auto_complete_config completes its config."""

from __future__ import annotations

from pathlib import Path

from server.config.complete import complete_config
from server.config.model_folder import scan_model
from server.config.parse import parse_config_text, read_config
from server.config.write import to_pbtxt
from server.protocol.config_json import from_json_dict, to_json_dict

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_config_round_trips_through_canonical_pbtxt() -> None:
    for path in sorted((ROOT / "model_repository").glob("*/config.pbtxt")):
        config, _ = read_config(path)
        text = to_pbtxt(config)
        assert parse_config_text(text, path) == config, path
        assert to_pbtxt(parse_config_text(text, path)) == text  # canonical: writing again changes nothing
        # as a user writes one: top-level fields at the margin, nested ones two spaces in
        lines = text.splitlines()
        assert lines[0].startswith("name: ") and "  name: " in text, path


def test_json_form_writes_int64_fields_as_numbers() -> None:
    config = parse_config_text(
        'name: "m"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 100 }\n",
        Path("config.pbtxt"),
    )
    data = to_json_dict(config)
    assert data["input"][0]["dims"] == [-1, 3]
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert from_json_dict(data) == config


def test_python_auto_complete_fills_a_config_that_names_only_the_backend(tmp_path: Path) -> None:
    folder = tmp_path / "auto"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        config.add_input({'name': 'IN', 'data_type': 'TYPE_FP32', 'dims': [4]})\n"
        "        config.add_output({'name': 'OUT', 'data_type': 'TYPE_FP32', 'dims': [4]})\n"
        "        config.set_max_batch_size(16)\n"
        "        config.set_dynamic_batching()\n"
        "        return config\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    (folder / "config.pbtxt").write_text('backend: "python"\n')
    raw, _ = read_config(folder / "config.pbtxt")
    completed = to_json_dict(complete_config(raw, scan_model(folder, tmp_path)))
    assert completed["name"] == "auto"
    assert completed["max_batch_size"] == 16
    assert [(i["name"], i["dims"]) for i in completed["input"]] == [("IN", [4])]
    assert [(o["name"], o["dims"]) for o in completed["output"]] == [("OUT", [4])]
    assert "dynamic_batching" in completed
    assert completed["default_model_filename"] == "model.py"
    assert completed["instance_group"][0]["kind"] == "KIND_CPU"
    assert completed["instance_group"][0]["count"] == 1


def test_json_form_orders_keys_as_tritons_printer_does() -> None:
    """Fields in the schema's order whatever is set (protobuf's Python printer puts the set ones
    first), every scalar with its default, map entries sorted by key (integer keys as numbers)."""
    config = parse_config_text(
        'max_batch_size: 4\nname: "m"\nbackend: "python"\n'
        'input [ { dims: [ 2 ] name: "x" data_type: TYPE_FP32 } ]\n'
        'parameters [ { key: "zeta" value: { string_value: "1" } }, { key: "alpha" value: { string_value: "2" } } ]\n'
        "dynamic_batching { priority_levels: 10 priority_queue_policy { key: 10 value: { max_queue_size: 4 } }\n"
        "  priority_queue_policy { key: 2 value: { max_queue_size: 1 } } }\n"
        "model_transaction_policy { decoupled: true }\n",
        Path("config.pbtxt"),
    )
    data = to_json_dict(config)
    assert list(data)[:7] == ["name", "platform", "backend", "runtime", "max_batch_size", "input", "output"]
    assert (data["platform"], data["runtime"], data["max_batch_size"]) == ("", "", 4)
    assert list(data["input"][0])[:4] == ["name", "data_type", "format", "dims"]
    assert list(data["parameters"]) == ["alpha", "zeta"]
    assert list(data["dynamic_batching"]["priority_queue_policy"]) == ["2", "10"]
    assert list(data)[-1] == "model_transaction_policy"
    assert from_json_dict(data) == config
    sequence = parse_config_text(
        'name: "s"\nsequence_batching { control_input [ { name: "S" control [ { int32_false_true: [ 0, 1 ] '
        "kind: CONTROL_SEQUENCE_START } ] } ] }\n",
        Path("config.pbtxt"),
    )
    control = to_json_dict(sequence)["sequence_batching"]["control_input"][0]["control"][0]
    assert list(control) == ["kind", "int32_false_true", "fp32_false_true", "bool_false_true", "data_type"]


def test_configs_differing_in_their_names_convert_each_to_its_own_json() -> None:
    """Copies of a model share one conversion (its names filled in after): each still gets its own
    names, its own dict, and what protobuf's printer makes of it."""
    from google.protobuf import json_format

    text = (
        'name: "{name}"\nmax_batch_size: 2\ninput [ {{ name: "x" data_type: TYPE_INT64 dims: [ 3 ] }} ]\n'
        'instance_group [ {{ name: "{name}_0" count: 2 }}, {{ count: 1 }} ]\n'
    )
    forms = []
    for name in ("first", "second", "first"):
        config = parse_config_text(text.format(name=name), Path("config.pbtxt"))
        form = to_json_dict(config)
        assert form["name"] == name
        assert [g["name"] for g in form["instance_group"]] == [f"{name}_0", ""]
        printed = json_format.MessageToDict(
            config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        assert from_json_dict(form) == config == from_json_dict(printed)
        assert form["input"][0]["dims"] == [3]  # numbers, as Triton writes int64 fields
        form["input"][0]["dims"].append(99)  # the caller's own copy
        forms.append(form)
    assert forms[2]["input"][0]["dims"] == [3, 99] and forms[0] is not forms[2]
