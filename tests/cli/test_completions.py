"""Shell completions: the committed scripts match what the Typer app generates, and the bash script
really completes commands and options when sourced in bash."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT


def test_committed_scripts_are_current() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tcli.completions", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr + " (run `make completions` and commit completions/)"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("tcli re", "repo"),
        ("tcli repo va", "validate"),
        ("tcli serve --model-control", "--model-control-mode"),
    ],
)
def test_bash_completion_completes_commands_and_options(words: str, expected: str) -> None:
    bin_dir = Path(sys.executable).parent
    script = (
        f'export PATH="{bin_dir}:$PATH"\n'
        f"source {ROOT / 'completions' / 'tcli.bash'}\n"
        f"COMP_WORDS=({words}); COMP_CWORD={len(words.split()) - 1}\n"
        "_tcli_completion tcli\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout.split()
