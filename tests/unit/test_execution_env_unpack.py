"""Unpacking an execution environment's archive into the cache (server/backends/python/execution_env.py):
once per content, where conda-pack's bin/conda-unpack then runs; and what an unusable one says."""

from __future__ import annotations

import sys
import tarfile
import threading
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from server.backends.python import execution_env
from server.protocol.errors import TritonError

CONDA_UNPACK = "import os\nopen('conda-unpacked-in', 'w').write(os.getcwd())\n"


def _config(env_path: str) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig(name="m", backend="python")
    config.parameters[execution_env.PARAMETER].string_value = env_path
    return config


def _archive(where: Path) -> Path:
    """A conda-pack-like archive: bin/python (here the base interpreter) and bin/conda-unpack."""
    env = where / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}")
    (env / "bin" / "conda-unpack").write_text(CONDA_UNPACK)
    archive = where / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as packed:
        packed.add(env, arcname=".")
    return archive


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(execution_env.CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_an_archive_unpacks_once_into_the_cache_and_conda_unpack_runs_there(
    tmp_path: Path, cache: Path
) -> None:
    archive = _archive(tmp_path)
    outcomes: list[str] = []

    def load() -> None:
        try:
            environment = execution_env.prepare(_config(str(archive)), tmp_path)
            outcomes.append(str(environment.root if environment else None))
        except TritonError as error:  # the base interpreter may lack numpy: said the same way each time
            outcomes.append(error.message)

    loads = [threading.Thread(target=load) for _ in range(4)]  # concurrent loads of one archive
    for thread in loads:
        thread.start()
    for thread in loads:
        thread.join(120)
    unpacked = [p for p in cache.iterdir() if p.is_dir() and (p / ".tcli-unpacked").exists()]
    assert len(unpacked) == 1
    assert (unpacked[0] / "conda-unpacked-in").read_text() == str(unpacked[0])
    assert len(outcomes) == 4 and len(set(outcomes)) == 1, outcomes


def test_a_missing_environment_is_named(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(TritonError) as failed:
        execution_env.prepare(_config("$$TRITON_MODEL_DIRECTORY/env.tar.gz"), tmp_path / "model")
    assert failed.value.message == (
        f"python model 'm': {execution_env.PARAMETER} '{tmp_path}/model/env.tar.gz' does not exist"
    )


def test_a_model_without_the_parameter_has_no_environment(tmp_path: Path) -> None:
    config = model_config_pb2.ModelConfig(name="m", backend="python")
    assert execution_env.prepare(config, tmp_path) is None
    assert execution_env.prepare(_config(""), tmp_path) is None  # empty: none, as in Triton
    assert execution_env.process_context(None) is None


def test_a_cache_that_cannot_be_written_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(execution_env.CACHE_VARIABLE, str(blocker / "cache"))
    with pytest.raises(TritonError) as failed:
        execution_env.prepare(_config(str(archive)), tmp_path)
    assert failed.value.message.startswith(
        f"python model 'm': the execution environment cache {blocker}/cache cannot be written ("
    )
    assert failed.value.message.endswith(f"set {execution_env.CACHE_VARIABLE} to a writable folder")
