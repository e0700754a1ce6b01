"""Execution environments, as Triton's python backend has them (issue 27, item 3): a model whose config
sets EXECUTION_ENV_PATH (a venv-pack archive, the folder it unpacks to, `$$TRITON_MODEL_DIRECTORY/...`)
runs under that environment's python, and imports a package that only the environment has. The
environments are real: a venv with numpy from PyPI (pip's cache) and a small package pip-installed
from a local wheel, packed with venv-pack; each is built once per test session.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.serve_process import TCLI, ServeProcess

ONLY_HERE = "tcli_only_in_env"  # the package only the environment has
MAGIC = 27

ENV_MODEL = f"""
import os
import sys
import numpy as np
import {ONLY_HERE}
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            found = [sys.prefix, np.__file__, os.environ.get("VIRTUAL_ENV", "")]
            prefix = np.array([text.encode() for text in found], dtype=np.object_)
            answers.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", (x + {ONLY_HERE}.MAGIC).astype(np.float32)),
                pb_utils.Tensor("PREFIX", prefix),
            ]))
        return answers
"""


AUTO_COMPLETE = """

def _complete(config):
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_output({"name": "PREFIX", "data_type": "TYPE_STRING", "dims": [3]})
    config.set_max_batch_size(0)
    return config


TritonPythonModel.auto_complete_config = staticmethod(_complete)
"""


def test_the_instance_imports_the_environments_numpy(env_server: tuple[ServeProcess, Path]) -> None:
    """The server's site-packages never reach the instance: its numpy is the environment's own."""
    server, cache = env_server
    numpy_file = Path(_ask(server, "by_path", which=1)[1])
    assert numpy_file.is_relative_to(cache), numpy_file


def _config(name: str, env_path: str | None) -> str:
    config = f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }}, {{ name: "PREFIX" data_type: TYPE_STRING dims: [ 3 ] }} ]
"""
    if env_path is not None:
        config += f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env_path}" }} }}\n'
    return config


def _model(repository: Path, name: str, env_path: str | None, source: str = ENV_MODEL) -> Path:
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(_config(name, env_path))
    (folder / "1" / "model.py").write_text(source)
    return folder


def _venv(where: Path, python: str = sys.executable) -> Path:
    """A venv without pip (fast): packages go in with the server's pip (--python)."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    return where


def _pip(env: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", *args],
        check=True,
        timeout=300,
    )


@pytest.fixture(scope="session")
def built_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A venv with numpy and ONLY_HERE, its venv-pack archive, and that archive unpacked."""
    try:
        import venv_pack  # type: ignore[import-untyped]
    except ImportError:
        pytest.skip("venv-pack is not installed (pip install venv-pack, in tcli's test extra)")
    root = tmp_path_factory.mktemp("execution_env")
    env = _venv(root / "env")
    # numpy at the server's version (pip's cache has it), and the local package's wheel
    _pip(env, "--no-deps", f"numpy=={np.__version__}", str(_wheel(root)))
    archive = root / "env.tar.gz"
    venv_pack.pack(prefix=str(env), output=str(archive), compress_level=1, verbose=False)
    unpacked = root / "unpacked"
    with tarfile.open(archive) as packed:
        packed.extractall(unpacked, filter="tar")
    return {"env": env, "archive": archive, "unpacked": unpacked}


def _wheel(where: Path) -> Path:
    """A wheel of ONLY_HERE, written by hand (building one with setuptools takes seconds)."""
    wheel = where / f"{ONLY_HERE}-1.0-py3-none-any.whl"
    info = f"{ONLY_HERE}-1.0.dist-info"
    files = {
        f"{ONLY_HERE}/__init__.py": f"MAGIC = {MAGIC}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {ONLY_HERE}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tcli-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every server and `tcli repo validate` of these tests unpack archives (not ~/.cache)."""
    return tmp_path_factory.mktemp("env_cache")


@pytest.fixture(scope="session")
def numpyless_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("numpyless") / "env")


def _older_python() -> str | None:
    """A Python older than tcli's 3.11 on this machine (pyenv's), if any."""
    for root in sorted(Path.home().glob(".pyenv/versions/3.*"), reverse=True):
        minor = root.name.split(".")[1]
        python = root / "bin" / f"python3.{minor}"
        if minor.isdigit() and 8 <= int(minor) < 11 and python.exists():
            return str(python)
    return None


@pytest.fixture(scope="module")
def env_server(
    tmp_path_factory: pytest.TempPathFactory, built_env: dict[str, Path], numpyless_env: Path, env_cache: Path
) -> Iterator[tuple[ServeProcess, Path]]:
    """One server: the archive by absolute path and (a copy) by $$TRITON_MODEL_DIRECTORY, loaded
    together; the unpacked folder; a model completing its config there; an environment without
    numpy; one with too old a Python; a model asking for the environment and the server process."""
    repository = tmp_path_factory.mktemp("env_repository")
    cache = env_cache
    _model(repository, "by_path", str(built_env["archive"]))
    copied = _model(repository, "in_model_dir", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    shutil.copyfile(built_env["archive"], copied / "env.tar.gz")
    _model(repository, "unpacked", str(built_env["unpacked"]))
    completes = _model(repository, "completes", str(built_env["unpacked"]), ENV_MODEL + AUTO_COMPLETE)
    (completes / "config.pbtxt").write_text(
        'backend: "python"\n'
        f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{built_env["unpacked"]}" }} }}\n'
    )
    _model(repository, "no_numpy", str(numpyless_env))
    in_server = _model(repository, "in_server", str(built_env["unpacked"]))
    with (in_server / "config.pbtxt").open("a") as config:
        config.write('parameters { key: "TCLI_INSTANCE_PROCESS" value: { string_value: "false" } }\n')
    older = _older_python()
    if older is not None:
        _model(repository, "old_python", str(_venv(repository.parent / "old_env", older)))
    server = ServeProcess(
        "--model-repository",
        str(repository),
        "--exit-on-error=false",
        "--model-load-thread-count=4",
        # the server's python models would run in the server process: these still run in their environment
        "--backend-config=python,instance-process=false",
        env={"TCLI_EXECUTION_ENV_CACHE": str(cache)},
    )
    try:
        yield server, cache
    finally:
        server.stop()


def _ask(server: ServeProcess, model: str, which: int = 0) -> tuple[np.ndarray, str]:
    """The model's answer to [1, 2], and its sys.prefix (which=1: its numpy's file, 2: $VIRTUAL_ENV)."""
    client = httpclient.InferenceServerClient(server.http_url)
    given = httpclient.InferInput("X", [2], "FP32")
    given.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    result = client.infer(model, [given])
    prefix = result.as_numpy("PREFIX")
    assert prefix is not None
    return result.as_numpy("Y"), prefix[which].decode()


def _reason(server: ServeProcess, model: str) -> str:
    index = httpx.post(f"http://{server.http_url}/v2/repository/index", json={}).json()
    (entry,) = [e for e in index if e["name"] == model]
    assert entry.get("state") == "UNAVAILABLE", entry
    return str(entry["reason"])


@pytest.mark.parametrize("model", ["by_path", "in_model_dir"])
def test_an_archived_environment_runs_the_model_from_the_cache(
    env_server: tuple[ServeProcess, Path], model: str
) -> None:
    server, cache = env_server
    assert importlib.util.find_spec(ONLY_HERE) is None  # the server's python (this one) lacks it
    answer, prefix = _ask(server, model)
    assert answer.tolist() == [1.0 + MAGIC, 2.0 + MAGIC]
    assert Path(prefix).parent == cache  # the unpacked copy, not the venv the archive was made from
    assert _ask(server, model, which=2)[1] == prefix  # activated: VIRTUAL_ENV is the environment


def test_two_models_with_one_archive_share_one_unpacked_copy(env_server: tuple[ServeProcess, Path]) -> None:
    server, cache = env_server
    prefixes = {_ask(server, model)[1] for model in ("by_path", "in_model_dir")}
    assert len(prefixes) == 1
    unpacked = [p for p in cache.iterdir() if (p / ".tcli-unpacked").exists()]
    assert [str(p) for p in unpacked] == list(prefixes)


def test_an_unpacked_environment_is_used_in_place(
    env_server: tuple[ServeProcess, Path], built_env: dict[str, Path]
) -> None:
    answer, prefix = _ask(env_server[0], "unpacked")
    assert answer.tolist() == [1.0 + MAGIC, 2.0 + MAGIC]
    assert Path(prefix) == built_env["unpacked"].resolve()


def test_an_environment_without_numpy_fails_the_load_in_one_line(
    env_server: tuple[ServeProcess, Path], numpyless_env: Path
) -> None:
    reason = _reason(env_server[0], "no_numpy")
    version = ".".join(map(str, sys.version_info[:3]))
    assert f"execution environment '{numpyless_env}' (Python {version}) lacks numpy" in reason
    assert "\n" not in reason and "Traceback" not in reason and "Error:" not in reason


def test_an_environment_cannot_run_in_the_server_process(env_server: tuple[ServeProcess, Path]) -> None:
    reason = _reason(env_server[0], "in_server")
    assert 'sets EXECUTION_ENV_PATH and TCLI_INSTANCE_PROCESS "false"' in reason
    assert "remove one of them" in reason


def test_an_environment_with_too_old_a_python_fails_the_load(env_server: tuple[ServeProcess, Path]) -> None:
    older = _older_python()
    if older is None:
        pytest.skip("no Python older than 3.11 on this machine to build such an environment with")
    reason = _reason(env_server[0], "old_python")
    assert "old_env' has Python 3." in reason and "needs Python 3.11 or newer" in reason


def test_a_slow_instance_process_fails_the_load_after_stub_timeout_seconds(
    tmp_path: Path, built_env: dict[str, Path]
) -> None:
    # an environment whose python never comes up for an instance (it answers the server's check)
    slow = tmp_path / "slow_env"
    (slow / "bin").mkdir(parents=True)
    (slow / "bin" / "python").write_text(
        "#!/bin/sh\n"
        'case "$*" in *multiprocessing-fork*) exec sleep 600 ;; esac\n'
        f'exec "{built_env["env"]}/bin/python" "$@"\n'
    )
    (slow / "bin" / "python").chmod(0o755)
    repository = tmp_path / "repository"
    _model(repository, "slow", str(slow))
    server = ServeProcess(
        "--model-repository",
        str(repository),
        "--exit-on-error=false",
        "--backend-config=python,stub-timeout-seconds=2",
        env={"TCLI_EXECUTION_ENV_CACHE": str(tmp_path / "cache")},
    )
    try:
        reason = _reason(server, "slow")
    finally:
        server.stop()
    assert "instance 'slow_0': its process did not start within 2 s" in reason
    assert "stub-timeout-seconds" in reason


def _validate(repository: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TCLI), "repo", "validate", str(repository)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1", "TCLI_EXECUTION_ENV_CACHE": str(cache)},
    )


def test_repo_validate_checks_execution_env_path(
    tmp_path: Path, built_env: dict[str, Path], env_cache: Path
) -> None:
    repository = tmp_path / "repository"
    good = _model(repository, "good", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    shutil.copyfile(built_env["archive"], good / "env.tar.gz")
    _model(repository, "missing", "$$TRITON_MODEL_DIRECTORY/nowhere.tar.gz")
    not_env = _model(repository, "not_env", "$$TRITON_MODEL_DIRECTORY/folder")
    (not_env / "folder").mkdir()
    not_archive = _model(repository, "not_archive", "$$TRITON_MODEL_DIRECTORY/env.txt")
    (not_archive / "env.txt").write_text("not an environment")
    no_activate = _model(repository, "no_activate", "$$TRITON_MODEL_DIRECTORY/env")
    (no_activate / "env" / "bin").mkdir(parents=True)
    (no_activate / "env" / "bin" / "python").symlink_to(built_env["env"] / "bin" / "python")
    result = _validate(repository, env_cache)
    out = " ".join(result.stdout.split())
    assert result.returncode != 0, result.stdout
    line = 7  # of the parameters line in _config's text
    assert (
        f"missing/config.pbtxt:{line}" in out
        and f"{repository}/missing/nowhere.tar.gz' does not exist" in out
    )
    assert f"not_env/config.pbtxt:{line}" in out and "is a folder without bin/python" in out
    assert f"not_archive/config.pbtxt:{line}" in out and "is neither a folder nor a tar archive" in out
    assert f"no_activate/config.pbtxt:{line}" in out and "has no bin/activate" in out  # a warning
    assert "good/config.pbtxt" not in out  # the real archive passes (and auto-complete ran in it)


def test_auto_complete_runs_under_the_environment(env_server: tuple[ServeProcess, Path]) -> None:
    """auto_complete_config needs model.py imported, and its imports exist only in the environment."""
    server = env_server[0]
    config = httpx.get(f"http://{server.http_url}/v2/models/completes/config").json()
    assert [i["name"] for i in config["input"]] == ["X"]
    assert [o["name"] for o in config["output"]] == ["Y", "PREFIX"]
    assert _ask(server, "completes")[0].tolist() == [1.0 + MAGIC, 2.0 + MAGIC]
