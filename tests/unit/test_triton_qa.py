"""benchmarks/triton_qa.py's python_test: the part of L0_backend_python/test.sh it runs; L0_python_api's
folder as the runner lays it out: core's test files beside the qa's, and the `tritonserver` and
`tritonfrontend` its clients import being tcli's; L0_decoupled's two trials' repositories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.triton_qa import _decoupled_python_models, _example_runs, _python_api, _python_test_script

# shaped as Triton's top-level test.sh: header, interpreter checks, models, one client run, more servers
TEST_SH = """\
SERVER_ARGS="--model-repository=${MODELDIR}/models"
CLIENT_PY=./python_test.py
source ../common/util.sh
rm -fr *.log ./models
python3 --version | grep "3.10" > /dev/null
(bash -ex setup_python_enviroment.sh)
mkdir -p models/identity_fp32/1/
cp ../python_models/identity_fp32/model.py ./models/identity_fp32/1/model.py
run_server
python3 -m pytest --junitxml=L0_backend_python.report.xml $CLIENT_PY >> $CLIENT_LOG 2>&1
set -e

kill_server

run_server
kill -9 $SERVER_PID
kill_server
"""


def test_python_test_runs_the_header_the_models_and_one_client_run() -> None:
    script = _python_test_script(TEST_SH).splitlines()

    assert script[:4] == TEST_SH.splitlines()[:4]  # header up to `rm -fr *.log ./models`
    assert not any("setup_python_enviroment" in line or "--version" in line for line in script)
    assert script[4] == "mkdir -p models/identity_fp32/1/"
    assert script[-1] == "kill_server"
    assert script.count("run_server") == 1  # not the non-graceful exit and later servers
    assert "kill -9 $SERVER_PID" not in script


def test_each_example_run_is_a_case_failed_by_its_own_failure_message() -> None:
    trace = "\n".join(
        [
            "++main: CLIENT_LOG=../examples_add_sub_client.log",
            "++main: python3 examples/add_sub/client.py",
            "++main: CLIENT_LOG=../examples_jax_client.log",
            "++main: echo -e '\\n***\\n*** Failed to verify jax example. \\n***'",
            "++main: echo -e '\\n***\\n*** Failed to verify jax example. \\n***'",
            "++main: CLIENT_LOG=../examples_model_instance_kind.log",
            "++main: grep PASS ../examples_model_instance_kind.log",
        ]
    )
    assert _example_runs(trace) == [
        ("examples_add_sub", "passed"),
        ("examples_jax", "failed"),
        ("examples_model_instance_kind", "passed"),
    ]


def test_python_api_gets_cores_tests_and_tcli_under_tritons_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = tmp_path / "core" / "python" / "test"
    (core / "test_api_models" / "test").mkdir(parents=True)
    (core / "test_api.py").write_text("# core's")
    monkeypatch.setenv("TRITON_QA_CORE", str(tmp_path / "core"))
    suite = tmp_path / "L0_python_api"
    suite.mkdir()
    _python_api(suite, "tcli")
    assert (suite / "test_api.py").read_text() == "# core's" and (suite / "test_api_models" / "test").is_dir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    probe = "import tritonserver, tritonfrontend; print(tritonserver.MemoryAllocator.__module__, tritonfrontend.KServeHttp.Server.__name__)"
    answer = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert answer.stdout.split() == ["tcli.inprocess._allocators", "KServeHttp"]
    other = tmp_path / "triton_side"
    other.mkdir()
    _python_api(other, "triton")  # real Triton's own packages, were they installed
    assert not (other / "tritonserver.py").exists()


def test_decoupled_custom_trial_names_tritons_backends_and_the_python_trial_the_examples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = tmp_path / "python_backend" / "examples" / "decoupled"
    examples.mkdir(parents=True)
    for model in ("repeat", "square"):
        (examples / f"{model}_model.py").write_text(f"# {model} example")
        (examples / f"{model}_config.pbtxt").write_text(
            f'name: "{model}_int32"\nbackend: "python"\ninstance_group [{{ kind: KIND_CPU }}]\n'
        )
    monkeypatch.setenv("TRITON_QA_PYTHON_BACKEND", str(tmp_path / "python_backend"))
    suite = tmp_path / "triton" / "qa" / "L0_decoupled"
    (suite / "models" / "fan_repeat").mkdir(parents=True)
    _decoupled_python_models(suite, "tcli")

    custom = (suite / "models" / "repeat_int32" / "config.pbtxt").read_text()
    assert 'backend: "repeat"' in custom and "instance_group" not in custom  # src/test/models' config
    assert 'backend: "python"' in (suite / "python_models" / "repeat_int32" / "config.pbtxt").read_text()
    assert (suite / "python_models" / "square_int32" / "1" / "model.py").read_text() == "# square example"
    assert (suite / "python_models" / "fan_repeat" / "1").is_dir()
    for backend in ("repeat", "square", "pytorch"):
        compile((tmp_path / "triton" / "backends" / backend / "model.py").read_text(), backend, "exec")
