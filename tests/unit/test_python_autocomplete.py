"""auto_complete_config of python models: what the model adds ends up in the config, conflicts and
broken model files give one-line errors naming the file, and model files stay isolated.

Messages were checked against real Triton 2.51 loading the same model files."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from server.backends.python.autocomplete import auto_complete_config
from server.protocol.errors import ErrorCode, TritonError

ROOT = Path(__file__).resolve().parents[2]

ADD_SUB_AUTO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        for name in ("INPUT0", "INPUT1"):
            auto_complete_model_config.add_input({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
        for name in ("OUTPUT0", "OUTPUT1"):
            auto_complete_model_config.add_output({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""


def write_model(repo: Path, name: str, source: str, version: str = "1", **extra_files: str) -> Path:
    folder = repo / name / version
    folder.mkdir(parents=True, exist_ok=True)
    model_file = folder / "model.py"
    model_file.write_text(textwrap.dedent(source))
    for file_name, text in extra_files.items():
        (folder / file_name).write_text(textwrap.dedent(text))
    return model_file


def failure(model_file: Path, config: dict[str, Any]) -> TritonError:
    with pytest.raises(TritonError) as info:
        auto_complete_config(model_file, config)
    message = info.value.message
    assert "\n" not in message and "Traceback" not in message, message
    return info.value


def test_model_adds_inputs_outputs_batching(tmp_path: Path) -> None:
    model_file = write_model(tmp_path, "add_sub", ADD_SUB_AUTO)
    completed = auto_complete_config(model_file, {"name": "add_sub", "backend": "python"})
    assert completed["max_batch_size"] == 8
    assert completed["dynamic_batching"] == {}
    assert [(i["name"], i["data_type"], i["dims"]) for i in completed["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    assert [o["name"] for o in completed["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert completed["backend"] == "python"
    # the result is a valid ModelConfig in Triton's JSON form
    parsed = json_format.ParseDict(completed, model_config_pb2.ModelConfig())
    assert parsed.max_batch_size == 8 and parsed.HasField("dynamic_batching")


def test_decoupled_and_optional_inputs(tmp_path: Path) -> None:
    model_file = write_model(
        tmp_path,
        "streamer",
        """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                config.add_input({"name": "PROMPT", "data_type": "TYPE_STRING", "dims": [1]})
                config.add_input({"name": "MAX_TOKENS", "data_type": "TYPE_INT32", "dims": [1], "optional": True})
                config.add_output({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]})
                config.set_model_transaction_policy(dict(decoupled=True))
                return config
        """,
    )
    completed = auto_complete_config(model_file, {"name": "streamer", "backend": "python"})
    assert completed["model_transaction_policy"] == {"decoupled": True}
    assert completed["input"][1] == {
        "name": "MAX_TOKENS",
        "data_type": "TYPE_INT32",
        "dims": [1],
        "optional": True,
    }
    parsed = json_format.ParseDict(completed, model_config_pb2.ModelConfig())
    assert parsed.model_transaction_policy.decoupled and parsed.input[1].optional


def test_existing_config_is_kept_and_filled_in(tmp_path: Path) -> None:
    model_file = write_model(tmp_path, "add_sub", ADD_SUB_AUTO)
    # protobuf's JSON printer writes int64 dims as strings; a partial input has no data_type yet
    config = {
        "name": "add_sub",
        "backend": "python",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "dims": ["4"]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
    }
    completed = auto_complete_config(model_file, config)
    assert completed["input"][0] == {"name": "INPUT0", "dims": [4], "data_type": "TYPE_FP32"}
    assert completed["max_batch_size"] == 8  # raising the limit is allowed
    assert completed["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    assert config["input"] == [{"name": "INPUT0", "dims": ["4"]}]  # the caller's dict is not modified


def test_model_without_auto_complete_leaves_the_config_alone(tmp_path: Path) -> None:
    model_file = write_model(
        tmp_path, "plain", "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    )
    config = {"name": "plain", "backend": "python", "max_batch_size": 2, "input": [], "output": []}
    assert auto_complete_config(model_file, config) == config


def test_conflicting_input_datatype(tmp_path: Path) -> None:
    model_file = write_model(
        tmp_path,
        "m_conflict",
        """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                c.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})
                return c
        """,
    )
    config = {"name": "m_conflict", "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]}
    error = failure(model_file, config)
    assert error.code is ErrorCode.INTERNAL  # Triton: "Internal: ValueError: ..."
    assert error.message == (
        "model.py for 'm_conflict': ValueError: unable to load model 'm_conflict', configuration expects "
        "datatype TYPE_FP32 for input 'INPUT0', model provides TYPE_INT32"
    )


def test_conflicting_dims_and_max_batch_size(tmp_path: Path) -> None:
    model_file = write_model(
        tmp_path,
        "m",
        """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                c.set_max_batch_size(4)
                c.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [8]})
                return c
        """,
    )
    error = failure(model_file, {"name": "m", "max_batch_size": 8})
    assert error.message.endswith(
        "ValueError: configuration specified max_batch_size 8, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 4"
    )
    error = failure(
        model_file, {"name": "m", "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": ["4"]}]}
    )
    assert error.message.endswith(
        "ValueError: model 'm', tensor 'OUT': the model expects dims [8] but the model configuration specifies dims [4]"
    )


def test_import_error_is_one_line(tmp_path: Path) -> None:
    model_file = write_model(
        tmp_path, "add_sub", "import foo_missing_module\n\nclass TritonPythonModel:\n    pass\n"
    )
    error = failure(model_file, {"name": "add_sub"})
    assert (
        error.message == "model.py for 'add_sub': ModuleNotFoundError: No module named 'foo_missing_module'"
    )
    assert error.code is ErrorCode.INTERNAL


@pytest.mark.parametrize(
    "source,expected",
    [
        (
            "class TritonPythonModel(\n",
            "model.py for 'm': SyntaxError: '(' was never closed (model.py, line 1)",
        ),
        (
            "class Other:\n    pass\n",
            "model.py for 'm': AttributeError: module 'model' has no attribute 'TritonPythonModel'",
        ),
        (
            "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n        return None\n",
            "model.py for 'm': auto_complete_config function in model 'm' must return a valid pb.ModelConfig object.",
        ),
        (
            "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n"
            "        raise RuntimeError('boom\\nsecond line')\n",
            "model.py for 'm': RuntimeError: boom second line",
        ),
        ("import sys\nsys.exit(3)\n", "model.py for 'm': SystemExit: 3"),
    ],
)
def test_broken_model_files(tmp_path: Path, source: str, expected: str) -> None:
    model_file = write_model(tmp_path, "m", source)
    assert failure(model_file, {"name": "m"}).message == expected


def test_missing_file_is_an_invalid_repository(tmp_path: Path) -> None:
    error = failure(tmp_path / "ghost" / "1" / "model.py", {"name": "ghost"})
    assert error.code is ErrorCode.INVALID_ARG
    assert error.message.startswith("model.py for 'ghost': Python model file not found in ")


def test_models_are_isolated_from_each_other(tmp_path: Path) -> None:
    source = """
        import helper
        from .sibling import VALUE
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(c):
                c.add_output({"name": helper.NAME + VALUE, "data_type": "TYPE_FP32", "dims": [1]})
                c.add_input({"name": pb_utils.get_model_dir(), "data_type": "TYPE_FP32", "dims": [1]})
                return c
        """
    path_before, modules_before = list(sys.path), set(sys.modules)
    names = []
    for model in ("first", "second"):
        model_file = write_model(
            tmp_path, model, source, **{"helper.py": f"NAME = '{model}'\n", "sibling.py": "VALUE = '_out'\n"}
        )
        completed = auto_complete_config(model_file, {"name": model})
        names.append(completed["output"][0]["name"])
        assert completed["input"][0]["name"] == str(model_file.parent.resolve())  # get_model_dir()
    assert names == ["first_out", "second_out"]  # each model imported its own helper.py
    assert sys.path == path_before
    leftovers = set(sys.modules) - modules_before
    assert not {m for m in leftovers if m.startswith("_tcli_model_") or m in ("helper", "sibling")}


def test_our_pb_utils_replaces_other_modules_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils")
    )
    model_file = write_model(tmp_path, "add_sub", ADD_SUB_AUTO)
    assert auto_complete_config(model_file, {"name": "add_sub"})["max_batch_size"] == 8


def test_auto_complete_does_not_import_torch(tmp_path: Path) -> None:
    model_file = write_model(tmp_path, "add_sub", ADD_SUB_AUTO)
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from server.backends.python.autocomplete import auto_complete_config
        auto_complete_config(Path({str(model_file)!r}), {{"name": "add_sub"}})
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
