"""`tcli model ...` against a running tcli server, as a user drives it: tables, JSON, load/unload with a
config override, and one-line errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import ROOT, run_tcli


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("repo")
    for name in ("simple", "add_sub"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    settings = ServerSettings(
        [repo], ControlMode.EXPLICIT, load_models=["simple"], http_port=0, metrics_port=0, allow_grpc=False
    )
    with Server(settings) as running:
        yield running


def tcli(server: Server, *args: str) -> tuple[int, str, str]:
    done = run_tcli("model", *args, "-u", f"localhost:{server.http_port}")
    return done.returncode, done.stdout, done.stderr


def test_list_and_status(server: Server) -> None:
    code, out, _ = tcli(server, "list", "--format", "json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["simple"]["state"] == "READY"
    assert rows["add_sub"] == {"name": "add_sub"}  # never loaded, as Triton lists it
    code, out, _ = tcli(server, "list")
    assert code == 0 and "simple" in out and "READY" in out
    code, out, _ = tcli(server, "status", "simple")
    assert code == 0 and "simple: READY" in out


def test_status_of_every_model_and_unknown_names_get_a_suggestion(server: Server) -> None:
    # as Triton's index lists every model, status without a name shows them all
    code, out, _ = tcli(server, "status", "--format", "json")
    assert code == 0
    statuses = {s["name"]: s for s in json.loads(out)}
    assert statuses["simple"]["ready"] is True and statuses["add_sub"]["ready"] is False
    code, out, _ = tcli(server, "status")
    assert code == 0 and "models ready" in out and "simple" in out and "add_sub" in out
    # a misspelt name: one line, one wording, the closest name offered
    for args in (["status", "simpel"], ["load", "simpel"]):
        code, _, err = tcli(server, *args)
        assert code == 1 and err.count("\n") == 1, err
        assert "model 'simpel' is not in the server's repositories: did you mean 'simple'?" in err
    done = run_tcli(
        "perf", "-m", "ad_sub", "-u", f"localhost:{server.http_port}", "--measurement-interval", "100"
    )
    assert done.returncode == 1 and "failed to get model metadata" in done.stderr
    assert "did you mean 'add_sub'?" in done.stderr and done.stderr.count("\n") == 1


def test_load_with_config_override_then_unload(server: Server, tmp_path: Path) -> None:
    override = tmp_path / "config.pbtxt"
    text = (ROOT / "model_repository" / "add_sub" / "config.pbtxt").read_text()
    assert "instance_group [ { kind: KIND_CPU } ]" in text
    override.write_text(
        text.replace(
            "instance_group [ { kind: KIND_CPU } ]", "instance_group [ { kind: KIND_CPU count: 2 } ]"
        )
    )
    code, out, err = tcli(server, "load", "add_sub", "--config", str(override))
    assert code == 0, err
    code, out, _ = tcli(server, "config", "add_sub", "--format", "json")
    assert json.loads(out)["instance_group"][0]["count"] == 2
    code, out, _ = tcli(server, "config", "add_sub")
    assert 'backend: "python"' in out  # pbtxt by default
    code, out, _ = tcli(server, "unload", "add_sub")
    assert code == 0 and "unloaded 'add_sub'" in out
    code, out, _ = tcli(server, "status", "add_sub", "--format", "json")
    assert json.loads(out)["ready"] is False


def test_metadata_and_stats(server: Server) -> None:
    code, out, _ = tcli(server, "metadata", "simple")
    assert code == 0 and "INPUT0" in out and "[-1, 16]" in out
    code, out, _ = tcli(server, "stats", "simple", "--format", "json")
    assert code == 0
    (stats,) = json.loads(out)["model_stats"]
    assert stats["name"] == "simple"
    code, out, _ = tcli(server, "stats")
    assert code == 0 and "Inference statistics" in out


def test_errors_are_one_line(server: Server, tmp_path: Path) -> None:
    code, _, err = tcli(server, "metadata", "nope")
    assert code == 1 and err.strip() == "error: Request for unknown model: 'nope' is not found"
    code, _, err = tcli(server, "load", "simple", "--config", str(tmp_path / "missing.pbtxt"))
    assert code == 1 and "not found" in err
    done = run_tcli("model", "list", "-u", "localhost:1")
    assert done.returncode == 1 and "cannot reach" in done.stderr and "Traceback" not in done.stderr


def test_load_outside_explicit_mode_names_the_mode_and_the_fix(tmp_path: Path) -> None:
    """Triton's words say 'polling' whatever the mode; tcli keeps them and adds the mode and the fix."""
    shutil.copytree(ROOT / "model_repository" / "simple", tmp_path / "simple")
    settings = ServerSettings([tmp_path], ControlMode.NONE, http_port=0, metrics_port=0, allow_grpc=False)
    with Server(settings) as running:
        done = run_tcli("model", "load", "simple", "-u", f"localhost:{running.http_port}")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: explicit model load / unload is not allowed if polling is enabled (this server runs with "
        "--model-control-mode none; start it with --model-control-mode explicit to load and unload models)"
    )
