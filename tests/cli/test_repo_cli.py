"""`tcli repo validate | scaffold | index` as a user runs them: exit codes, formats, files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import ROOT
from tests.repo_builder import ADD_SUB_CONFIG, add_python_add_sub, write_onnx_add_sub
from tests.torch_needed import requires_torch


def test_bundled_repository_is_valid(tcli) -> None:  # type: ignore[no-untyped-def]
    result = tcli("repo", "validate", "model_repository")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid: " in result.stdout
    for model in ("simple", "add_sub", "densenet_onnx", "digits_onnx", "digits_ensemble"):
        assert model in result.stdout


def test_broken_repository_fails_with_table_json_and_github_formats(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    add_python_add_sub(tmp_path, "good")
    add_python_add_sub(
        tmp_path,
        "bad",
        config=ADD_SUB_CONFIG.replace(
            'dims: [ 4 ] },\n  { name: "INPUT1"', 'dims: [ 0 ] },\n  { name: "INPUT1"'
        ),
    )

    table = tcli("repo", "validate", str(tmp_path))
    assert table.returncode == 1
    assert "model input 'INPUT0' dimension must be integer >= 1" in table.stdout
    assert "Traceback" not in table.stdout + table.stderr

    as_json = tcli("repo", "validate", str(tmp_path), "--format", "json")
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert data["valid"] is False
    statuses = {m["name"]: m["status"] for m in data["models"]}
    assert statuses == {"bad": "error", "good": "ok"}
    (problem,) = next(m for m in data["models"] if m["name"] == "bad")["problems"]
    assert problem["line"] == 5 and problem["file"].endswith("bad/config.pbtxt")

    github = tcli("repo", "validate", str(tmp_path), "--format", "github")
    assert github.returncode == 1
    (line,) = github.stdout.splitlines()
    assert line.startswith("::error file=")
    assert "bad/config.pbtxt,line=5,title=tcli repo validate%3A bad::model input 'INPUT0'" in line


def test_warnings_fail_only_with_strict(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    add_python_add_sub(tmp_path, config=ADD_SUB_CONFIG + "instance_group [ { kind: KIND_GPU } ]\n")
    assert tcli("repo", "validate", str(tmp_path)).returncode == 0
    strict = tcli("repo", "validate", str(tmp_path), "--strict")
    assert strict.returncode == 1
    assert "no GPU is visible" in strict.stdout


def _python_model(repository: Path, name: str, source: str) -> None:
    add_python_add_sub(repository, name=name)
    (repository / name / "1" / "model.py").write_text(source)


def test_a_package_missing_here_is_a_warning_and_a_broken_model_an_error(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    # a CI runner lacks the serving image's packages: the model is not broken for that
    _python_model(tmp_path, "needs_pkg", "import tcli_no_such_package\nclass TritonPythonModel:\n    pass\n")
    result = tcli("repo", "validate", str(tmp_path))
    assert result.returncode == 0, result.stdout
    assert "warning" in result.stdout and "No module named 'tcli_no_such_package'" in result.stdout
    assert "install tcli_no_such_package here" in result.stdout
    # inside the serving image the user asks for imports to succeed
    required = tcli("repo", "validate", str(tmp_path), "--require-imports")
    assert required.returncode == 1
    assert "error" in required.stdout and "tcli_no_such_package" in required.stdout
    # the rest of the config is still checked: a bad config is an error beside the warning
    config = tmp_path / "needs_pkg" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: -1"))
    assert tcli("repo", "validate", str(tmp_path)).returncode == 1
    # a model.py that is itself broken, or misses its own helper file, stays an error
    broken = tmp_path / "broken"
    _python_model(broken, "syntax", "class TritonPythonModel(:\n")
    result = tcli("repo", "validate", str(broken))
    assert result.returncode == 1 and "SyntaxError" in result.stdout
    helper = tmp_path / "helper"
    _python_model(helper, "uses_helper", "from helper_mod import f\nclass TritonPythonModel:\n    pass\n")
    (helper / "uses_helper" / "1" / "helper_mod.py").write_text("import math\n")
    result = tcli("repo", "validate", str(helper))
    assert result.returncode == 1 and "ImportError" in result.stdout


def test_missing_repository_is_one_line_without_traceback(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    result = tcli("repo", "validate", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert "is not a directory" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_index_of_a_missing_repository_is_one_line_without_a_class_name(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    result = tcli("repo", "index", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert result.stderr == (
        f"error: model repository '{tmp_path / 'nope'}' is not a directory: pass the folder that holds the "
        "model folders\n"
    )


def test_unexpected_failures_are_described_without_class_names() -> None:
    from tcli.errors import describe

    assert (
        describe(FileNotFoundError(2, "No such file or directory", "x.npy"))
        == "x.npy: No such file or directory"
    )
    assert describe(ValueError("bad value")) == "bad value"
    assert "a bug in tcli" in describe(RuntimeError())


def test_scaffold_onnx_creates_a_valid_model(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    model = write_onnx_add_sub(tmp_path / "addsub.onnx")
    repo = tmp_path / "repo"
    result = tcli(
        "repo", "scaffold", str(model), "--repo", str(repo), "--max-batch-size", "8", "--instance-count", "2"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"created {repo / 'addsub' / 'config.pbtxt'} and {repo / 'addsub' / '1'}/",
        "validated addsub: valid; 0 errors, 0 warnings",
    ]
    config = (repo / "addsub" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config
    assert "max_batch_size: 8" in config
    assert "dynamic_batching" in config and "count: 2" in config
    assert (repo / "addsub" / "1" / "model.onnx").read_bytes() == model.read_bytes()
    assert tcli("repo", "validate", str(repo)).returncode == 0
    again = tcli("repo", "scaffold", str(model), "--repo", str(repo))
    assert again.returncode == 1 and "already exists: pass --force" in again.stderr


def test_scaffold_onnx_that_cannot_batch_refuses_batching(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    model = write_onnx_add_sub(tmp_path / "fixed.onnx", batch=False)
    result = tcli("repo", "scaffold", str(model), "--repo", str(tmp_path / "r"), "--max-batch-size", "4")
    assert result.returncode == 1
    assert "fixed first dimension" in result.stderr and "--max-batch-size 0" in result.stderr
    assert "Traceback" not in result.stderr
    ok = tcli("repo", "scaffold", str(model), "--repo", str(tmp_path / "r"))
    assert ok.returncode == 0, ok.stderr
    assert "max_batch_size" not in (tmp_path / "r" / "fixed" / "config.pbtxt").read_text()


@requires_torch
def test_scaffold_torchscript_needs_tensor_specs(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    model = ROOT / "model_repository" / "digits_torchscript" / "1" / "model.pt"
    repo = tmp_path / "repo"
    missing = tcli("repo", "scaffold", str(model), "--repo", str(repo), "--name", "digits")
    assert missing.returncode == 1 and "--input INPUT__0:FP32" in missing.stderr
    two = (
        "--input",
        "INPUT__0:FP32:1,8,8",
        "--input",
        "INPUT__1:FP32:1,8,8",
        "--output",
        "OUTPUT__0:FP32:10",
    )
    wrong = tcli("repo", "scaffold", str(model), "--repo", str(repo), "--name", "two", *two)
    assert wrong.returncode == 1  # written, then its validation reported, failing the command
    assert wrong.stdout.splitlines()[-1] == "validated two: invalid; 1 errors, 0 warnings"
    assert "configuration expects 2 inputs, model provides 1" in wrong.stderr
    bad = tcli(
        "repo",
        "scaffold",
        str(model),
        "--repo",
        str(repo),
        "--name",
        "digits",
        "--input",
        "INPUT__0:FLOAT:1,8,8",
        "--output",
        "OUTPUT__0:FP32:10",
    )
    assert bad.returncode == 1 and "unknown data type 'FLOAT'" in bad.stderr
    good = tcli(
        "repo",
        "scaffold",
        str(model),
        "--repo",
        str(repo),
        "--name",
        "digits",
        "--input",
        "INPUT__0:FP32:1,8,8",
        "--output",
        "OUTPUT__0:FP32:10",
        "--max-batch-size",
        "16",
    )
    assert good.returncode == 0, good.stderr
    assert 'platform: "pytorch_libtorch"' in (repo / "digits" / "config.pbtxt").read_text()


def test_scaffold_python_writes_a_model_that_runs(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "repo"
    result = tcli(
        "repo",
        "scaffold",
        "--backend",
        "python",
        "echo",
        "--repo",
        str(repo),
        "--input",
        "IN:FP32:-1",
        "--output",
        "OUT:FP32:-1",
    )
    assert result.returncode == 0, result.stderr
    assert tcli("repo", "validate", str(repo)).returncode == 0
    # the skeleton runs: execute it against our triton_python_backend_utils
    script = f"""
import json, sys, numpy as np
sys.path.insert(0, {str(ROOT / "server" / "backends" / "python")!r})
import triton_python_backend_utils as pb_utils
import importlib.util
spec = importlib.util.spec_from_file_location('m', {str(repo / "echo" / "1" / "model.py")!r})
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
config = {{"max_batch_size": 4, "input": [{{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}}],
          "output": [{{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}}]}}
model = module.TritonPythonModel(); model.initialize({{"model_config": json.dumps(config)}})
request = pb_utils.InferenceRequest(model_name="echo", inputs=[pb_utils.Tensor("IN", np.array([[1.5, 2.0]], np.float32))], requested_output_names=["OUT"])
(response,) = model.execute([request])
print(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy().tolist())
"""
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[[1.5, 2.0]]"


def test_index_lists_models_and_versions(tmp_path: Path, tcli) -> None:  # type: ignore[no-untyped-def]
    add_python_add_sub(tmp_path, config=ADD_SUB_CONFIG + "version_policy: { latest: { num_versions: 2 } }\n")
    for version in ("2", "3"):
        (tmp_path / "add_sub" / version).mkdir()
        (tmp_path / "add_sub" / version / "model.py").write_text("")
    result = tcli("repo", "index", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["name"] == "add_sub"
    assert row["versions"] == ["1", "2", "3"]
    assert row["served"] == ["2", "3"]
    assert row["backend"] == "python"
    table = tcli("repo", "index", str(tmp_path))
    assert "add_sub" in table.stdout and "1, 2, 3" in table.stdout


def test_help_starts_without_heavy_imports() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from tcli.main import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = sorted(m for m in ('numpy', 'torch', 'grpc', 'onnxruntime', 'google.protobuf') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == ""
