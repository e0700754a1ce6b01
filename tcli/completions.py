"""Shell completion scripts for bash, zsh and fish, generated from the Typer app.

    python -m tcli.completions            # rewrite completions/ (also: make completions)
    python -m tcli.completions --check    # exit 1 when completions/ is stale

The scripts ask `tcli` itself for candidates at completion time, so new commands and options complete
without regenerating; regenerating is needed only when the completion mechanism changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHELLS = {"bash": "tcli.bash", "zsh": "_tcli", "fish": "tcli.fish"}
FOLDER = Path(__file__).resolve().parents[1] / "completions"


def script(shell: str) -> str:
    """The script Typer generates for `shell` (asked of the installed `tcli`, as a user would)."""
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    tcli = Path(sys.executable).parent / "tcli"  # the console script, so the scripts name `tcli`
    done = subprocess.run(
        [str(tcli), "--show-completion", shell], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for shell, name in SHELLS.items():
        path = FOLDER / name
        text = script(shell)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            FOLDER.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale completion scripts: {', '.join(stale)}; run `make completions`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
