"""Does reloading a model grow the server's memory? (issue 14: the hour-long soak grew 10.3% while
one model's config was rewritten and reloaded each minute.) Serves `simple` (ONNX) in explicit mode
and reloads it N times, printing the resident memory of the server and its child processes.

    .venv/bin/python benchmarks/reload_memory.py [--reloads 160]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import start_tcli
from benchmarks.repos import copy_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reloads", type=int, default=160)
    reloads = parser.parse_args().reloads
    with tempfile.TemporaryDirectory(prefix="tcli-reload-") as tmp:
        repo = Path(tmp) / "repo"
        copy_examples(repo, ("simple",))
        extra = ("--model-control-mode", "explicit", "--load-model", "simple")
        server = start_tcli([repo], Path(tmp) / "tcli.log", extra=extra)
        try:
            server.wait()
            print(f"start {server.rss_bytes() / 2**20:.1f} MB")
            for done in range(1, reloads + 1):
                status = server.load("simple")
                if status != 200:
                    raise SystemExit(f"reload {done} answered {status}; see {server.log_path}")
                if done % 20 == 0:
                    print(f"{done} reloads {server.rss_bytes() / 2**20:.1f} MB", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
