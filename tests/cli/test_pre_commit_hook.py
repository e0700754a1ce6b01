"""The pre-commit hook other repositories use runs `tcli repo validate` with its configured args."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.cli.conftest import ROOT
from tests.repo_builder import ADD_SUB_CONFIG, add_python_add_sub


def _hook() -> dict[str, object]:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    return hook


def _run(hook: dict[str, object], cwd: Path) -> subprocess.CompletedProcess[str]:
    entry = shlex.split(str(hook["entry"]))
    tcli = Path(sys.executable).parent / entry[0]
    command = [str(tcli), *entry[1:], *[str(a) for a in hook.get("args", [])]]  # type: ignore[attr-defined]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_hook_passes_on_a_valid_repository_and_fails_on_a_broken_one(tmp_path: Path) -> None:
    hook = _hook()
    assert hook["id"] == "tcli-repo-validate"
    assert hook["pass_filenames"] is False
    add_python_add_sub(tmp_path / "model_repository")
    assert _run(hook, tmp_path).returncode == 0
    broken = ADD_SUB_CONFIG.replace("max_batch_size: 8", "max_batch_size: -8")
    (tmp_path / "model_repository" / "add_sub" / "config.pbtxt").write_text(broken)
    failed = _run(hook, tmp_path)
    assert failed.returncode == 1
    assert "'max_batch_size' must be non-negative value for add_sub" in failed.stdout
