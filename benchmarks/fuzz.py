"""The fuzz tests (tests/integration/test_fuzz.py) for longer, with a seed: HTTP infer bodies, gRPC
infer messages, model-control config overrides and config.pbtxt text, each target given --examples
cases (the test suite gives it 150, derandomized).

    .venv/bin/python benchmarks/fuzz.py [--examples 3000] [--seed N]

Prints, per target, the cases hypothesis tried and how many failed, the seed and the time taken; a
failure prints hypothesis's minimal failing case. Every request goes to a `tcli serve` on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = "tests/integration/test_fuzz.py"
# pytest's summary line of a failed test: "FAILED tests/...::test_name[param] - ..."
FAILED = re.compile(r"^FAILED \S+::(\S+)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=3000, help="cases per target (default 3000)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a random one)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "cases.json"
        env = {**os.environ, "TCLI_FUZZ_EXAMPLES": str(args.examples), "TCLI_FUZZ_SEED": str(seed)}
        env["TCLI_FUZZ_REPORT"] = str(report)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", TESTS]
        command.append(f"--hypothesis-seed={seed}")
        started = time.monotonic()
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        took = time.monotonic() - started
        cases: dict[str, int] = json.loads(report.read_text()) if report.exists() else {}
    failed = [m.group(1) for line in run.stdout.splitlines() if (m := FAILED.match(line))]
    print(f"fuzz: seed {seed}, up to {args.examples} examples per target, {took:.0f} s")
    print(f"{'target':34} {'cases':>8}")
    for target, count in cases.items():
        print(f"{target:34} {count:>8,}")
    print(f"{'total':34} {sum(cases.values()):>8,}  failed tests: {len(failed)} {' '.join(failed)}")
    if run.returncode != 0:
        print(run.stdout[-6000:])
        print(run.stderr[-2000:], file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
