"""tritonserver's whole command line: Triton's own chart arguments start tcli (also under the name
`tritonserver`), every 2.51 flag is known in both --flag=value and --flag value forms, the flags
tcli implements work, GPU and C++ tuning flags are named in one warning line, and flags whose absence
would mislead (other front ends) are refused."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tcli import serve_flags
from tests.cli.conftest import run_tcli
from tests.integration.serve_process import ServeProcess
from tests.reference import find_reference_triton

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(
        EXAMPLES / "add_sub", tmp_path / "repo" / "add_sub", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tmp_path / "repo"


def test_tritons_chart_arguments_start_tritonserver(repo: Path) -> None:
    server = ServeProcess(
        f"--model-store={repo}",
        "--model-control-mode=poll",
        "--repository-poll-secs=5",
        "--strict-model-config=false",
        "--log-verbose=1",
        "--pinned-memory-pool-byte-size=0",
        "--cuda-memory-pool-byte-size",
        "0:0",
        program="tritonserver",
    )
    try:
        assert get(f"http://{server.http_url}/v2/health/ready")[0] == 200
        assert get(f"http://{server.http_url}/v2/models/add_sub/ready")[0] == 200
        [warning] = [line for line in server.output().splitlines() if "accepted without effect" in line]
        assert "--pinned-memory-pool-byte-size" in warning and "--cuda-memory-pool-byte-size" in warning
    finally:
        assert server.stop() == 0


def test_every_tritonserver_251_flag_is_known() -> None:
    binary = find_reference_triton()
    if binary is None:
        pytest.skip("real Triton 2.51 is not installed (../shared/reference/setup-triton.sh)")
    text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60).stdout
    triton = {match for match in re.findall(r"^  --([a-z0-9-]+)", text, re.MULTILINE)} - {"help"}
    help_text = run_tcli("serve", "--help").stdout
    declared = set(re.findall(r"--([a-z0-9-]+)", help_text))
    unknown = sorted(triton - declared - set(serve_flags.FLAGS))
    assert not unknown, f"tritonserver flags tcli serve does not know: {unknown}"


def test_extra_flags_are_read_in_both_forms() -> None:
    positional, found = serve_flags.read_extra_flags(
        ["repo", "--http-thread-count=8", "--host-policy", "gpu0,numa-node=0", "--allow-sagemaker=false"]
    )
    assert positional == ["repo"]
    assert found == {
        "http-thread-count": ["8"],
        "host-policy": ["gpu0,numa-node=0"],
        "allow-sagemaker": ["false"],
    }
    with pytest.raises(serve_flags.FlagError, match="No such option: --no-such-flag"):
        serve_flags.read_extra_flags(["--no-such-flag=1"])
    with pytest.raises(serve_flags.FlagError, match="needs a value"):
        serve_flags.read_extra_flags(["--host-policy"])


@pytest.mark.parametrize("flag", ["--allow-vertex-ai=true", "--allow-sagemaker=true"])
def test_flags_whose_absence_would_mislead_are_refused(repo: Path, flag: str) -> None:
    result = run_tcli("serve", str(repo), flag)
    assert result.returncode == 2
    assert flag.split("=")[0] in result.stderr and "not implemented by tcli" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_failing_at_start_up_exits_unless_told_otherwise(repo: Path) -> None:
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('backend: "python"\nnot_a_field: 1\n')
    result = run_tcli("serve", str(repo), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    assert result.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in result.stderr
    server = ServeProcess(str(repo), "--exit-on-error=false")
    try:  # as Triton: the model whose config cannot be read is not a model, so the server is ready
        assert get(f"http://{server.http_url}/v2/health/ready")[0] == 200
        assert get(f"http://{server.http_url}/v2/models/add_sub/ready")[0] == 200
    finally:
        server.stop()


def test_a_load_model_no_repository_holds_fails_start_up_as_in_triton(repo: Path) -> None:
    flags = ["--model-control-mode=explicit", "--load-model=does-not-exist"]
    result = run_tcli(
        "serve", str(repo), *flags, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"
    )
    assert result.returncode == 1
    assert "failed to poll model 'does-not-exist': model not found in any model repository." in result.stderr
    assert "error: creating server: Internal - failed to load all models" in result.stderr
    server = ServeProcess(str(repo), *flags, "--exit-on-error=false")
    try:
        assert get(f"http://{server.http_url}/v2/health/live")[0] == 200
    finally:
        server.stop()


def test_a_missing_repository_with_exit_on_error_false_keeps_the_server_live(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert run_tcli("serve", str(missing), "--http-port", "0").returncode == 1  # exit-on-error: as Triton
    server = ServeProcess(str(missing), "--exit-on-error=false")
    try:  # as Triton: live, not ready, the endpoints up
        assert get(f"http://{server.http_url}/v2/health/live")[0] == 200
        assert get(f"http://{server.http_url}/v2/health/ready")[0] == 400
        assert "failed to read model repository" in server.output()
    finally:
        server.stop()


def test_server_flags_that_tcli_implements(repo: Path, tmp_path: Path) -> None:
    # an ONNX model without a config: auto-completed, with --backend-config's default batch size
    shutil.copytree(EXAMPLES / "simple" / "1", repo / "auto" / "1")
    # a custom config picked by --model-config-name
    (repo / "add_sub" / "configs").mkdir()
    custom = (
        (repo / "add_sub" / "config.pbtxt")
        .read_text()
        .replace("instance_group [ { kind: KIND_CPU } ]", "instance_group [ { count: 2 kind: KIND_CPU } ]")
    )
    (repo / "add_sub" / "configs" / "two.pbtxt").write_text(custom)
    # a model whose config does not parse: its error line goes to the log file
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('backend: "python"\nnot_a_field: 1\n')
    log = tmp_path / "server.log"
    server = ServeProcess(
        str(repo),
        "--exit-on-error=false",
        "--id=edge-7",
        "--model-config-name=two",
        "--backend-config=onnxruntime,default-max-batch-size=16",
        "--allow-cpu-metrics=false",
        "--log-format=ISO8601",
        "--log-info=false",
        f"--log-file={log}",
    )
    try:
        base = f"http://{server.http_url}"
        assert json.loads(get(f"{base}/v2")[1])["name"] == "edge-7"
        assert json.loads(get(f"{base}/v2/models/auto/config")[1])["max_batch_size"] == 16
        groups = json.loads(get(f"{base}/v2/models/add_sub/config")[1])["instance_group"]
        assert [g["count"] for g in groups] == [2]
        metrics = get(f"http://127.0.0.1:{_metrics_port(server)}/metrics")[1].decode()
        assert "nv_inference_count" in metrics and "nv_cpu_utilization" not in metrics
        logging = json.loads(get(f"{base}/v2/logging")[1])
        assert (logging["log_format"], logging["log_info"], logging["log_file"]) == (
            "ISO8601",
            False,
            str(log),
        )
    finally:
        server.stop()
    lines = log.read_text().splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [WE] ", line) for line in lines), lines[
        :3
    ]


def _metrics_port(server: ServeProcess) -> int:
    match = re.search(r"metrics on [\d.]+:(\d+)", server.output())
    assert match, server.output()
    return int(match.group(1))


def test_disable_auto_complete_config_needs_a_complete_config(repo: Path) -> None:
    shutil.copytree(EXAMPLES / "simple" / "1", repo / "auto" / "1")
    for flag in ("--disable-auto-complete-config", "--strict-model-config=true"):
        result = run_tcli(
            "serve", str(repo), flag, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"
        )
        assert result.returncode == 1, flag
        assert "failed to load 'auto'" in result.stderr, result.stderr[-2000:]


def test_tritons_openai_front_end_flags_are_accepted() -> None:
    """A command line written for Triton's OpenAI front end (openai_frontend/main.py) starts tcli:
    the flags tcli implements are its options, the others named in the warning line."""
    positional, found = serve_flags.read_extra_flags(
        ["repo", "--backend", "vllm", "--enable-kserve-frontends", "--tool-call-parser=llama3"]
    )
    assert positional == ["repo"]
    assert found == {"backend": ["vllm"], "enable-kserve-frontends": [""], "tool-call-parser": ["llama3"]}
    warning = serve_flags.warning_line(found)
    assert warning is not None and "--backend" in warning and "--tool-call-parser" in warning
