"""Where scenario 4a's start-up time goes since python instances run in processes of their own
(issue 20): `tcli serve model_repository` launched to ready as it is, and with every python model
opted in to the server process (TCLI_INSTANCE_PROCESS "false" in a copy of the repository),
alternately, tcli's modules byte-compiled as 4a has them. Also: the CPU one instance process spends
importing what it hosts a model with, before the model's own code.

    .venv/bin/python benchmarks/startup_modes.py [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import start_tcli
from benchmarks.repos import EXAMPLES, read_config, write_config
from benchmarks.startup import installed_bytecode


def in_server_copy(target: Path) -> int:
    """The example repository with every python model in the server process; returns their count."""
    shutil.copytree(EXAMPLES, target, ignore=shutil.ignore_patterns("__pycache__"))
    python = 0
    for folder in sorted(p for p in target.iterdir() if (p / "config.pbtxt").is_file()):
        config = read_config(folder)
        if config.backend == "python":
            config.parameters["TCLI_INSTANCE_PROCESS"].string_value = "false"
            write_config(folder, config)
            python += 1
    return python


def ready(repo: Path, log: Path) -> tuple[float, int]:
    """Seconds to ready, and the processes under the server then."""
    server = start_tcli([repo], log)
    try:
        seconds = server.wait()
        return seconds, len(psutil.Process(server.process.pid).children(recursive=True))
    finally:
        server.stop()


def worker_import_cpu() -> float:
    """CPU seconds (user + system) of a fresh interpreter importing the instance process's module."""
    code = "import os, server.backends.python.process_worker; t = os.times(); print(t.user + t.system)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="tcli-startup-") as tmp, installed_bytecode():
        work = Path(tmp)
        count = in_server_copy(work / "in-server")
        times: dict[str, list[float]] = {"processes (default)": [], "in server": []}
        children: dict[str, int] = {}
        for turn in range(runs):
            order = ["processes (default)", "in server"][:: 1 if turn % 2 == 0 else -1]
            for mode in order:
                repo = EXAMPLES if mode.startswith("processes") else work / "in-server"
                seconds, processes = ready(repo, work / f"{turn}-{mode}.log")
                times[mode].append(seconds)
                children[mode] = processes
        imports = [worker_import_cpu() for _ in range(3)]
    print(f"{count} python models in model_repository")
    for mode, taken in times.items():
        listed = ", ".join(f"{s:.2f}" for s in taken)
        print(
            f"{mode:20} ready median {statistics.median(taken):.2f} s ({listed}); "
            f"{children[mode]} processes under the server"
        )
    print(f"one instance process's imports: {statistics.median(imports):.2f} s CPU (median of 3)")


if __name__ == "__main__":
    main()
