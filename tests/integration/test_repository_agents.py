"""Repository agents: the checksum agent with Triton's texts, agents of the user's own from a
--repoagent-directory told of every action in Triton's order, an agent that hands the model a new
location, and an unknown agent named with where tcli looked."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from server.protocol.errors import TritonError
from server.repository.manager import ControlMode, ModelManager

ROOT = Path(__file__).resolve().parents[2]
ADD_SUB = ROOT / "model_repository" / "add_sub"


def with_agents(repo: Path, agents: str, name: str = "add_sub") -> Path:
    """add_sub in `repo` with `agents` (the text inside model_repository_agents { agents [ ... ] })."""
    shutil.copytree(ADD_SUB, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    config = repo / name / "config.pbtxt"
    config.write_text(
        config.read_text().replace('name: "add_sub"', f'name: "{name}"')
        + f"\nmodel_repository_agents {{ agents [ {agents} ] }}\n"
    )
    return repo / name


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def versions(manager: ModelManager, name: str = "add_sub") -> list[tuple[str, str]]:
    return [(row.get("state", ""), row.get("reason", "")) for row in manager.index() if row["name"] == name]


def test_checksum_agent_loads_a_model_whose_files_match(tmp_path: Path) -> None:
    model = with_agents(
        tmp_path, '{ name: "checksum", parameters { key: "MD5:1/model.py" value: "DIGEST" } }'
    )
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace("DIGEST", md5(model / "1" / "model.py")))
    manager = ModelManager([tmp_path])
    manager.load_startup()
    try:
        assert versions(manager) == [("READY", "")]
    finally:
        manager.shutdown()


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        (
            '{ key: "MD5:1/model.py" value: "0123456789abcdef0123456789abcdef" }',
            "Mismatched MD5 hash for file 1/model.py, expect: 0123456789abcdef0123456789abcdef, got: ",
        ),
        (
            '{ key: "md5:1/missing.py" value: "00" }',
            "failed to open text file for read 1/missing.py: No such file",
        ),
        ('{ key: "SHA256:1/model.py" value: "00" }', "Unsupported checksum algorithm: SHA256"),
        ('{ key: "1/model.py" value: "00" }', "failed to parse key: 1/model.py"),
    ],
)
def test_checksum_agent_refuses_a_model_with_triton_texts(
    tmp_path: Path, parameters: str, reason: str
) -> None:
    with_agents(tmp_path, f'{{ name: "checksum", parameters {parameters} }}')
    manager = ModelManager([tmp_path], ControlMode.EXPLICIT)
    try:
        with pytest.raises(TritonError) as error:
            manager.load("add_sub")
        assert "failed to load 'add_sub'" in error.value.message
        [(state, why)] = versions(manager)
        assert state == "UNAVAILABLE" and reason in why, why
    finally:
        manager.shutdown()


def test_an_unknown_agent_is_named_with_where_tcli_looked(tmp_path: Path) -> None:
    with_agents(tmp_path / "repo", '{ name: "decrypt" }')
    agents = tmp_path / "agents"
    agents.mkdir()
    manager = ModelManager([tmp_path / "repo"], repoagent_directories=[agents])
    manager.load_startup()
    try:
        [(state, why)] = versions(manager)
        assert state == "UNAVAILABLE"
        assert "unable to find repo agent 'decrypt'" in why
        assert str(agents / "decrypt" / "agent.py") in why and "tcli.repository_agents" in why
    finally:
        manager.shutdown()


RECORDER = """
import json
from pathlib import Path

from server.repository.agents.base import RepositoryAgent


class TritonRepoAgent(RepositoryAgent):
    def model_action(self, model, action):
        log = Path(model.parameters["log"])
        with log.open("a") as file:
            file.write(json.dumps([self.name, action.value, model.artifact_type.value]) + "\\n")
        if action.value == "LOAD" and model.parameters.get("fail"):
            raise ValueError(model.parameters["fail"])
"""


def recorder_agents(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "agents"
    for name in names:
        (directory / name).mkdir(parents=True)
        (directory / name / "agent.py").write_text(RECORDER)
    return directory


def recorded(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_agents_are_told_of_every_action_in_tritons_order(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"
    directory = recorder_agents(tmp_path, "first", "second")
    params = f'parameters {{ key: "log" value: "{log}" }}'
    with_agents(tmp_path / "repo", f'{{ name: "first", {params} }}, {{ name: "second", {params} }}')
    manager = ModelManager([tmp_path / "repo"], ControlMode.EXPLICIT, repoagent_directories=[directory])
    try:
        manager.load("add_sub")
        assert versions(manager) == [("READY", "")]
        assert recorded(log) == [
            ["first", "LOAD", "FILESYSTEM"],
            ["second", "LOAD", "FILESYSTEM"],
            ["second", "LOAD_COMPLETE", "FILESYSTEM"],
            ["first", "LOAD_COMPLETE", "FILESYSTEM"],
        ]
        log.unlink()
        manager.unload("add_sub")
        manager.shutdown()  # the unload's agents run off the caller's thread; shutdown waits for none
        _wait_for_lines(log, 4)
        assert recorded(log) == [
            ["first", "UNLOAD", "FILESYSTEM"],
            ["second", "UNLOAD", "FILESYSTEM"],
            ["second", "UNLOAD_COMPLETE", "FILESYSTEM"],
            ["first", "UNLOAD_COMPLETE", "FILESYSTEM"],
        ]
    finally:
        manager.shutdown()


def _wait_for_lines(path: Path, count: int, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not get {count} lines")


def test_an_agent_that_fails_load_fails_the_model_and_the_agents_before_it_hear_load_fail(
    tmp_path: Path,
) -> None:
    log = tmp_path / "actions.jsonl"
    directory = recorder_agents(tmp_path, "first", "second")
    params = f'key: "log" value: "{log}"'
    with_agents(
        tmp_path / "repo",
        f'{{ name: "first", parameters {{ {params} }} }}, '
        f'{{ name: "second", parameters [ {{ {params} }}, {{ key: "fail" value: "key not found" }} ] }}',
    )
    manager = ModelManager([tmp_path / "repo"], ControlMode.EXPLICIT, repoagent_directories=[directory])
    try:
        with pytest.raises(TritonError):
            manager.load("add_sub")
        [(state, why)] = versions(manager)
        assert state == "UNAVAILABLE" and "key not found" in why
        assert recorded(log) == [
            ["first", "LOAD", "FILESYSTEM"],
            ["second", "LOAD", "FILESYSTEM"],
            ["first", "LOAD_FAIL", "FILESYSTEM"],
        ]
    finally:
        manager.shutdown()


RELOCATOR = '''
import shutil

from server.repository.agents.base import ArtifactType, RepositoryAgent


class TritonRepoAgent(RepositoryAgent):
    """'Decrypts' a model: a copy where model.py adds 1000 to OUTPUT0."""

    def model_action(self, model, action):
        if action.value != "LOAD":
            return
        target = model.acquire_mutable_location()
        shutil.copytree(model.location, target, dirs_exist_ok=True)
        source = target / "1" / "model.py"
        source.write_text(source.read_text().replace("np.add(in0, in1)", "(np.add(in0, in1) + 1000)"))
        model.update_location(ArtifactType.FILESYSTEM, target)
        model.state["copy"] = str(target)
'''


def test_an_agent_can_hand_the_model_a_new_location_which_goes_at_unload(tmp_path: Path) -> None:
    import asyncio

    import numpy as np

    from server.protocol.types import InferenceRequest, Tensor
    from server.service import InferenceService

    directory = tmp_path / "agents"
    (directory / "decrypt").mkdir(parents=True)
    (directory / "decrypt" / "agent.py").write_text(RELOCATOR)
    with_agents(tmp_path / "repo", '{ name: "decrypt" }')
    manager = ModelManager([tmp_path / "repo"], ControlMode.EXPLICIT, repoagent_directories=[directory])
    try:
        manager.load("add_sub")
        a = np.ones(4, np.float32)
        request = InferenceRequest(
            "add_sub", inputs=[Tensor("INPUT0", "FP32", (4,), a), Tensor("INPUT1", "FP32", (4,), a)]
        )
        response = asyncio.run(InferenceService(manager).infer(request))
        assert response.outputs[0].data.tolist() == [1002.0] * 4
        chain = manager.models()["add_sub"].agents
        assert chain is not None
        [(_, agent_model)] = chain._steps
        copy = Path(agent_model.state["copy"])
        assert copy.is_dir()
        chain.unload()
        assert not copy.exists()
    finally:
        manager.shutdown()


def test_a_model_in_s3_reaches_the_checksum_agent_as_its_downloaded_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.object_storage import s3_env, s3_server, upload_folder

    model = with_agents(
        tmp_path, '{ name: "checksum", parameters { key: "MD5:1/model.py" value: "DIGEST" } }'
    )
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace("DIGEST", md5(model / "1" / "model.py")))
    s3_env(monkeypatch)
    with s3_server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="checked")
        upload_folder(client, "checked", model, "repo/add_sub")
        manager = ModelManager([s3.url("checked", "repo")])
        manager.refresh()
        manager.load_startup()
        try:
            assert versions(manager) == [("READY", "")]
        finally:
            manager.shutdown()


def test_an_installed_package_provides_an_agent_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `pip install` of a package declaring [project.entry-points."tcli.repository_agents"] leaves
    on sys.path: its module and a dist-info folder naming the entry point."""
    from server.repository.agents import registry

    site = tmp_path / "site"
    (site / "acme_agents").mkdir(parents=True)
    (site / "acme_agents" / "__init__.py").write_text(RECORDER)
    dist = site / "acme_agents-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-agents\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tcli.repository_agents]\naudit = acme_agents:TritonRepoAgent\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_agents", {})
    log = tmp_path / "actions.jsonl"
    with_agents(tmp_path / "repo", f'{{ name: "audit", parameters {{ key: "log" value: "{log}" }} }}')
    manager = ModelManager([tmp_path / "repo"], ControlMode.EXPLICIT)
    try:
        manager.load("add_sub")
        assert versions(manager) == [("READY", "")]
        assert recorded(log)[0] == ["audit", "LOAD", "FILESYSTEM"]
    finally:
        manager.shutdown()
