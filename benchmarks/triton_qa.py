"""Run subtests of Triton's own python-backend qa (qa/L0_backend_python in a checkout of
triton-inference-server/server) against tcli's `tritonserver` or the real one, and count the cases
that pass.

Each subtest's test.sh runs as Triton's top-level test.sh runs it, `(cd SUBTEST && bash -ex test.sh)`,
with the environment that script exports (TRITON_DIR, SERVER, BACKEND_DIR, MODELDIR, DATADIR, ...). The
qa files are never edited: they are copied to a scratch folder and these adaptations are made around
them:
- `$TRITON_DIR/bin/tritonserver` is a small script that starts the chosen server with the qa's flags
  and `--exit-on-error=false --strict-readiness=false`, so a model that cannot load here fails
  alone: the qa's GPU models, and on real Triton those importing torch (its python stub's
  environment has none), where strict readiness kept the server from ever being ready for test.sh;
- `pip`/`pip3` on PATH do nothing (the qa swaps torch builds: never in the project's venv), and
  `git clone .../python_backend` copies a local checkout of triton-inference-server/python_backend;
- `python3` is this interpreter (tritonclient, pytest and torch come from the project's venv);
- the qa's shared-memory leak probe is skipped, as the qa skips it on Jetson and Windows: it needs
  `triton_shm_monitor`, a module built with Triton's python backend, reading Triton's own regions.

A case is a pytest test (every pytest run of the subtest, recorded by a small plugin; a test run twice
counts twice; one still waiting after $TRITON_QA_CASE_TIMEOUT seconds, 300 by default, fails: some
qa clients wait on their stream without a timeout) or a shell check: each call of a
`verify_*`/`check_*` function the subtest's test.sh defines (e.g. logging's `verify_log_counts 4 3`),
failed when it prints "Test Failed".

    python benchmarks/triton_qa.py --checkout /tmp/triton-2.51 --python-backend /tmp/pb-r24.10 \\
        --server tcli --server triton argument_validation logging

The qa's servers listen on the fixed ports 8000-8002, so one subtest runs at a time. Checkouts:
`git archive v2.51.0 qa/L0_backend_python qa/python_models qa/common` of the server repository and
`git archive r24.10` of python_backend.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TCLI_LAUNCHER = Path(sys.executable).parent / "tritonserver"
REFERENCE = Path(os.environ.get("TRITON_REFERENCE_DIR") or Path.home() / ".cache" / "triton-reference")
# the subtests Triton's test.sh runs on Linux, less `env` (it downloads miniconda) and `restart`
SUBTESTS = [
    "ensemble",
    "bls",
    "decoupled",
    "response_sender",
    "variants",
    "io",
    "python_based_backends",
    "async_execute",
    "lifecycle",
    "argument_validation",
    "logging",
    "custom_metrics",
    "model_control",
    "examples",
    "request_rescheduling",
]

# records each pytest test's outcome, one JSON line per test, to $TRITON_QA_RESULTS
_PLUGIN = """
import json, os, signal, sys

import pytest

_outcomes = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # a client that waits without a timeout (queue.get()) gives up here, failing its case
    limit = int(os.environ.get("TRITON_QA_CASE_TIMEOUT", "300"))

    def expire(signum, frame):
        raise TimeoutError(f"triton_qa: no answer within {limit} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

def pytest_configure(config):
    # the shm-leak probe, skipped as on Jetson and Windows: it needs triton_shm_monitor, a module
    # built with Triton's python backend that reads Triton's own region names
    sys.path.append(os.environ["TRITON_QA_COMMON"])
    import shm_util
    shm_util._skip_shm_leak_probe = True

def pytest_runtest_logreport(report):
    outcome = _outcomes.get(report.nodeid)
    if report.failed:
        outcome = "failed"
    elif report.skipped and outcome is None:
        outcome = "skipped"
    elif report.passed and report.when == "call" and outcome is None:
        outcome = "passed"
    _outcomes[report.nodeid] = outcome

def pytest_sessionfinish(session):
    xml = getattr(session.config.option, "xmlpath", None) or ""
    with open(os.environ["TRITON_QA_RESULTS"], "a") as f:
        for nodeid, outcome in _outcomes.items():
            f.write(json.dumps({"run": os.path.basename(xml), "case": nodeid,
                                "outcome": outcome or "failed"}) + "\\n")
"""

_PIP = """#!/bin/sh
echo "triton_qa: skipped: pip $*" >&2
"""

_GIT = """#!/bin/bash
# `git clone <org>/python_backend -b TAG` copies the local checkout; anything else is real git
if [ "$1" = clone ] && [[ "$2" == */python_backend ]]; then
    cp -r "$TRITON_QA_PYTHON_BACKEND" python_backend
    exit $?
fi
exec /usr/bin/git "$@"
"""


EXTRA_FLAGS = "--exit-on-error=false --strict-readiness=false"  # after the qa's own flags
QA_PORTS = (8000, 8001, 8002)  # the qa's clients and test.sh use these, fixed
SUBTEST_TIMEOUT = 3600.0


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _wait_for_ports(timeout: float = 600.0) -> None:
    """Until 8000-8002 are free (another server on this machine may hold them for a while)."""
    deadline = time.monotonic() + timeout
    while busy := [port for port in QA_PORTS if not _free(port)]:
        if time.monotonic() > deadline:
            raise SystemExit(f"triton_qa: port(s) {busy} still in use: the qa's servers need 8000-8002")
        time.sleep(1.0)  # polling interval


@dataclass
class Outcome:
    subtest: str
    server: str
    cases: list[tuple[str, str]] = field(default_factory=list)  # (case, passed/failed/skipped)
    exit_code: int = 0
    port_clash: bool = False  # a server of the run found a qa port taken: rerun the subtest

    @property
    def passed(self) -> int:
        return sum(1 for _, outcome in self.cases if outcome == "passed")

    @property
    def total(self) -> int:
        return sum(1 for _, outcome in self.cases if outcome != "skipped")


def _server_script(server: str, tcli_path: Path) -> str:
    if server == "triton":
        target = REFERENCE / "bin" / "tritonserver"
        return f'#!/bin/bash\nexec "{target}" "$@" {EXTRA_FLAGS}\n'
    return f'#!/bin/bash\nexport PYTHONPATH="{tcli_path}"\nexec "{TCLI_LAUNCHER}" "$@" {EXTRA_FLAGS}\n'


def _layout(scratch: Path, checkout: Path, server: str, tcli_path: Path) -> tuple[Path, Path]:
    """The qa copied into `scratch`, the fake TRITON_DIR and the PATH shims; returns (qa, triton_dir)."""
    qa = scratch / "qa"
    for part in ("L0_backend_python", "python_models", "common"):
        shutil.copytree(checkout / "qa" / part, qa / part, symlinks=True)
    triton_dir = scratch / "triton"
    (triton_dir / "bin").mkdir(parents=True)
    launcher = triton_dir / "bin" / "tritonserver"
    launcher.write_text(_server_script(server, tcli_path))
    launcher.chmod(0o755)
    (triton_dir / "backends" / "python").mkdir(parents=True)
    shims = scratch / "shims"
    shims.mkdir()
    for name, text in (("pip", _PIP), ("pip3", _PIP), ("git", _GIT)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    for name in ("python", "python3"):
        (shims / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (shims / name).chmod(0o755)
    (scratch / "plugin").mkdir()
    (scratch / "plugin" / "_triton_qa_record.py").write_text(_PLUGIN)
    return qa, triton_dir


def _checks(trace: str, test_sh: str) -> list[tuple[str, str]]:
    """The shell checks in an xtrace made with PS4='+${FUNCNAME[0]:-main}: ': each top-level call of
    a verify_*/check_* function of `test_sh`, failed when its body echoed "Test Failed"."""
    names = set(re.findall(r"^\s*(?:function\s+)?((?:verify|check)_\w+)\s*\(\)", test_sh, re.M))
    checks: list[list[str]] = []
    current: list[str] | None = None
    for line in trace.splitlines():
        match = re.match(r"^\++(\w+): (.*)$", line)
        if match is None:
            continue
        func, command = match.groups()
        if func == "main":
            current = None
            word = command.split(" ", 1)[0]
            if word in names:
                current = [command, "passed"]
                checks.append(current)
        elif current is not None and func in names and "Test Failed" in command:
            current[1] = "failed"
    seen: dict[str, int] = {}
    named = []
    for command, outcome in checks:
        seen[command] = seen.get(command, 0) + 1
        suffix = f"#{seen[command]}" if seen[command] > 1 else ""
        named.append((f"{command}{suffix}", outcome))
    return named


def run_subtest(
    subtest: str, server: str, checkout: Path, python_backend: Path, tcli_path: Path, keep: Path | None
) -> Outcome:
    _wait_for_ports()
    scratch = Path(tempfile.mkdtemp(prefix=f"triton_qa_{subtest}_{server}_"))
    try:
        qa, triton_dir = _layout(scratch, checkout, server, tcli_path)
        home = qa / "L0_backend_python"
        results = scratch / "results.jsonl"
        env = dict(os.environ)
        env.update(
            PATH=f"{scratch / 'shims'}:{env.get('PATH', '')}",
            PYTHONPATH=str(scratch / "plugin"),
            PYTEST_PLUGINS="_triton_qa_record",
            TRITON_QA_RESULTS=str(results),
            TRITON_QA_COMMON=str(qa / "common"),
            TRITON_QA_PYTHON_BACKEND=str(python_backend),
            NVIDIA_TRITON_SERVER_VERSION="24.10",
            REPO_VERSION="24.10",
            PYTHON_BACKEND_REPO_TAG="r24.10",
            DATADIR=str(scratch / "data"),
            TRITON_DIR=str(triton_dir),
            SERVER=str(triton_dir / "bin" / "tritonserver"),
            BACKEND_DIR=str(REFERENCE / "backends" if server == "triton" else triton_dir / "backends"),
            MODELDIR=str(home),
            TEST_JETSON="0",
            TEST_WINDOWS="0",
            CUDA_VISIBLE_DEVICES="0",
            PYTHON_ENV_VERSION="11",
        )
        env.pop("VIRTUAL_ENV", None)
        # as Triton's test.sh: `(cd SUBTEST && bash -ex test.sh)`, with a PS4 naming the function
        script = "PS4='+${FUNCNAME[0]:-main}: '; set -ex; source ./test.sh"
        trace_path = scratch / "trace.log"
        with trace_path.open("w") as trace:
            # a session of its own: whatever test.sh leaves running (a server) ends with it
            proc = subprocess.Popen(
                ["bash", "-c", script],
                cwd=home / subtest,
                env=env,
                stdout=trace,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                exit_code = proc.wait(timeout=SUBTEST_TIMEOUT)
            except subprocess.TimeoutExpired:
                exit_code = -int(signal.SIGKILL)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        outcome = Outcome(subtest, server, exit_code=exit_code)
        logs = (path.read_text(errors="replace") for path in (home / subtest).rglob("*.log"))
        outcome.port_clash = any("already in use" in text for text in logs)
        if results.exists():
            for line in results.read_text().splitlines():
                record = json.loads(line)
                case = record["case"].split("::", 1)[-1]
                label = f"{record['run']}:{case}" if record["run"] else case
                outcome.cases.append((label, record["outcome"]))
        outcome.cases += _checks(
            trace_path.read_text(errors="replace"), (home / subtest / "test.sh").read_text()
        )
        return outcome
    finally:
        if keep is not None:
            target = keep / f"{subtest}.{server}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(scratch, target, symlinks=True, ignore=shutil.ignore_patterns("python_backend"))
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subtests", nargs="*", help=f"default: {' '.join(SUBTESTS)}")
    parser.add_argument("--checkout", type=Path, required=True, help="holds qa/L0_backend_python")
    parser.add_argument("--python-backend", type=Path, required=True, help="a python_backend checkout")
    parser.add_argument(
        "--server", action="append", choices=["tcli", "triton"], help="tcli (default), triton, or both"
    )
    parser.add_argument("--tcli-path", type=Path, default=ROOT, help="PYTHONPATH of tcli's server")
    parser.add_argument("--keep", type=Path, help="copy each run's scratch folder (logs) here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = parser.parse_args()
    servers = args.server or ["tcli"]
    table: list[tuple[str, dict[str, Outcome]]] = []
    for subtest in args.subtests or SUBTESTS:
        row: dict[str, Outcome] = {}
        for server in servers:
            outcome = run_subtest(
                subtest,
                server,
                args.checkout.resolve(),
                args.python_backend.resolve(),
                args.tcli_path,
                args.keep,
            )
            row[server] = outcome
            clash = " PORT CLASH: a qa port was taken by another server; rerun" if outcome.port_clash else ""
            print(
                f"{subtest} [{server}]: {outcome.passed}/{outcome.total} (test.sh exit {outcome.exit_code}){clash}",
                flush=True,
            )
            for case, result in outcome.cases:
                if args.verbose or result == "failed":
                    print(f"    {result:7} {case}", flush=True)
        table.append((subtest, row))
    print()
    print("| subtest | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    for subtest, row in table:
        print(f"| {subtest} | " + " | ".join(f"{row[s].passed}/{row[s].total}" for s in servers) + " |")
    for server in servers:
        passed = sum(row[server].passed for _, row in table)
        total = sum(row[server].total for _, row in table)
        print(f"{server}: {passed} passed, {total - passed} failed")


if __name__ == "__main__":
    main()
