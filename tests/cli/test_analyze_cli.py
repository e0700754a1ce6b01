"""`tcli analyze` as a user runs it, on a python model whose cost is known: each execution of n
requests sleeps 34 + 8.5n ms. With a 20 ms queue delay a batch forms once full even when a busy
machine spreads the requests' arrival (with 3 ms, a request that missed its batch waited a whole
round, which pushed p99 past the budget at concurrency 8 on a loaded machine). Within a 99 ms p99
budget (concurrency 1, 2, 4, 8, 16; at most 2 instances and max batch size 8):
- 2 instances x max batch 4 at concurrency 8 run a full batch each, 34 + 34 = 68 ms: 118 infer/s;
  at concurrency 16 they need two rounds, 136 ms;
- max batch 2 at concurrency 8 needs two rounds of 51 ms, 102 ms, over the budget, so its best is
  concurrency 4: 4 / 51 ms = 78/s; one instance x 4 reaches 4 / 68 ms = 59/s;
- a batch of 8 takes 102 ms, over the budget whatever the concurrency, so max batch 8 is best where
  its batches are 4 or fewer: at most as good as max batch 4 (a tie goes to the smaller), and
  below concurrency 8 its batches wait out the queue delay.
So the optimum is 2 instances, max batch size 4, half again ahead of the next. The costs are chosen
so that each rival is ruled out by the budget rather than by a throughput gap: a busy machine adds
latency, never removes it, and a slow load generator loses time between the optimum's rounds (its
instances wait for the next requests) but not at max batch 2's concurrency 8, whose requests queue;
on a loaded CI machine that once brought the two within 10%. The optimum's p99 (68 ms and the
machine's noise) sits 31 ms inside the budget. Max batch 8 reaches the same optimum at concurrency 8
when the batcher hands each instance 4 of the 8 requests; the two then measure within the noise,
and the tie goes to max batch 4 unless one window's noise parts them by more than 10%: both are
accepted. The instances run in processes of their own: in the server process they share the GIL
with the in-process load generator, which adds milliseconds of noise to every p99.
Windows are short and the stability band wide so that each level takes three windows; no test
asserts a speed."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import ROOT, run_tcli
from tests.waiting import wait_until

# the model README.md's analyze example uses, as shipped
SLEEPY = ROOT / "examples" / "analyze_repository" / "sleepy"
ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "sleepy" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" }
} ] }
"""
# 100 ms windows, never stretched; any three windows count as stable
FAST = ["-p", "100", "--measurement-request-count", "0", "-s", "1000", "-r", "5"]
SPACE = [
    "--latency-budget", "99",
    "--max-instance-count", "2",
    "--max-batch-size", "8",
    "--dynamic-batching", "on",
    "--queue-delays", "20000",
    "--python-placement", "process",
    "--max-concurrency", "16",
]  # fmt: skip
# brute mode over 2 instances and every max batch size (the instance count is quick mode's to climb)
BRUTE = [*SPACE, "--mode", "brute", "--min-instance-count", "2"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("analyze") / "repo"
    shutil.copytree(SLEEPY, root / "sleepy", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return root


def is_optimum(instances: int, max_batch: int, concurrency: int) -> bool:
    """The formula's optimum: 2 instances running batches of 4 (max batch 8 only where it serves
    batches of 4, at concurrency 8 or below)."""
    return instances == 2 and (max_batch == 4 or (max_batch == 8 and concurrency <= 8))


def analyze(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_tcli("analyze", "-m", "sleepy", str(repo), *FAST, *args, cwd=tmp_path)


def test_quick_finds_the_known_optimum_and_writes_a_repository_that_serves(
    repo: Path, tmp_path: Path
) -> None:
    out, chart = tmp_path / "out", tmp_path / "sleepy.png"
    done = analyze(repo, tmp_path, *SPACE, "--output-dir", str(out), "--plot", str(chart))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "quick search" in text and "p99 <= 99 ms" in text
    found = re.search(
        r"best for sleepy: (\d) x batch (\d), dynamic \(delay 20000 µs\), process: [\d.]+ infer/s at "
        r"concurrency (\d+)",
        text,
    )
    assert found, text
    instances, batch, concurrency = (int(g) for g in found.groups())
    assert is_optimum(instances, batch, concurrency), text
    table_rows = [line for line in text.splitlines() if line.startswith("│")]
    assert table_rows[0].split("│")[1].strip() == "1" and f"2 x batch {batch}" in table_rows[0]
    # the front is marked (the best itself may sit just off it: a tie within the noise goes to the
    # cheaper config, as it does here between max batch 4 and 8, which serve concurrency 8 alike)
    assert any("*" in row.split("│")[7] for row in table_rows)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # OUT is a repository: the best config and the version folder beside it, valid, diffed
    written = (out / "sleepy" / "config.pbtxt").read_text()
    assert f"max_batch_size: {batch}" in written and "count: 2" in written
    assert "max_queue_delay_microseconds: 20000" in written
    assert 'key: "TCLI_INSTANCE_PROCESS"' in written and 'string_value: "true"' in written
    assert (out / "sleepy" / "1" / "model.py").read_text() == (SLEEPY / "1" / "model.py").read_text()
    assert f"wrote {out / 'sleepy' / 'config.pbtxt'} (valid" in text
    assert f"-max_batch_size: 1\n+max_batch_size: {batch}" in text
    checked = run_tcli("repo", "validate", str(out))
    assert checked.returncode == 0, checked.stdout
    import tcli.inprocess as tritonserver

    with tritonserver.Server(model_repository=str(out)) as server:
        model = server.model("sleepy")
        assert model.config()["max_batch_size"] == batch
        assert model.config()["instance_group"][0]["count"] == 2
        data = np.arange(4, dtype=np.float32).reshape(1, 4)
        (response,) = list(model.infer(inputs={"INPUT0": data}))
        assert np.array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), data)


def test_brute_finds_the_same_optimum_and_a_rerun_resumes_everything(repo: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "brute.json"
    done = analyze(repo, tmp_path, *BRUTE, "--format", "json", "--checkpoint", str(checkpoint))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["search"] == "brute" and report["measured"] == 4 and report["resumed"] == 0
    # no terminal: a line per config on stderr, so that a long search is never silent
    progress = [line for line in done.stderr.splitlines() if line.startswith("analyze sleepy: ")]
    assert [line.split(" configs")[0] for line in progress] == [f"analyze sleepy: {n}/4" for n in range(1, 5)]
    assert all("ETA " in line for line in progress) and "ETA 0:00:00" in progress[-1]
    best = report["best"]["config"]
    assert best["dynamic_batching"], done.stdout
    assert is_optimum(best["instance_count"], best["max_batch_size"], report["best"]["concurrency"]), (
        done.stdout
    )
    assert report["best"]["meets"] and report["best"]["p99_ms"] <= 99
    configs = report["configs"]
    assert configs[0] == report["best"] and sum(c["front"] for c in configs) >= 1
    for row in configs:
        assert [level["concurrency"] for level in row["levels"]] == [1, 2, 4, 8, 16][: len(row["levels"])]
    saved = json.loads(checkpoint.read_text())["measured"]
    assert len(saved) == 4

    # the same command again: everything comes from the checkpoint, as CSV this time
    # (and the best config written beside links to the model's version folders)
    out = tmp_path / "linked"
    again = analyze(
        repo, tmp_path, *BRUTE, "--format", "csv", "--checkpoint", str(checkpoint),
        "--output-dir", str(out), "--link",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    version = out / "sleepy" / "1"
    assert version.is_symlink() and version.resolve() == (repo / "sleepy" / "1").resolve()
    assert f"max_batch_size: {best['max_batch_size']}" in (out / "sleepy" / "config.pbtxt").read_text()
    rows = list(csv.DictReader(again.stdout.splitlines()))
    assert len(rows) == 4 and rows[0]["rank"] == "1"
    assert (rows[0]["instance_count"], rows[0]["max_batch_size"]) == ("2", str(best["max_batch_size"]))
    assert rows[0]["throughput"] == f"{report['best']['throughput']:.3f}"  # the very numbers measured before


def test_an_interrupted_search_resumes_where_it_stopped(repo: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "resume.json"
    args = [
        "analyze", "-m", "sleepy", str(repo), *FAST, "--mode", "brute", "--max-instance-count", "1",
        "--max-batch-size", "4", "--dynamic-batching", "on", "--queue-delays", "3000",
        "--python-placement", "server", "--max-concurrency", "4", "--checkpoint", str(checkpoint),
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    first = subprocess.Popen(
        [sys.executable, "-m", "tcli.main", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def saved() -> int:
        try:
            return len(json.loads(checkpoint.read_text())["measured"])
        except (OSError, ValueError):
            return 0

    wait_until(lambda: saved() >= 1, "the first config in the checkpoint", timeout=60)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    assert f"the configs measured so far are in {checkpoint}: run the same command again to resume" in err
    measured_before = saved()
    assert 1 <= measured_before < 3

    done = run_tcli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # it says that it resumes, and from where, never silently
    assert (
        f"resuming from {checkpoint}: {measured_before} config(s) measured by an earlier run" in done.stdout
    )
    assert f"3 configs measured (brute search, {measured_before} from the checkpoint)" in done.stdout
    assert saved() == 3


def test_a_budget_no_config_meets_says_so_and_names_the_closest(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = analyze(
        repo, tmp_path, "--latency-budget", "1", "--max-instance-count", "1", "--max-batch-size", "2",
        "--dynamic-batching", "off", "--python-placement", "server", "--max-concurrency", "2",
        "--output-dir", str(out), "--fresh",
    )  # fmt: skip
    assert done.returncode == 1
    assert "no config of model 'sleepy' meets p99 <= 1 ms; the closest is 1 x batch " in done.stderr
    assert "relax the constraints or widen the search" in done.stderr
    assert "Traceback" not in done.stderr
    rows = [line.split("│") for line in done.stdout.splitlines() if line.startswith("│")]
    assert rows and all(row[8].strip() == "no" for row in rows)  # the table still shows what was measured
    assert not out.exists()  # nothing is written when nothing qualifies
    # the default checkpoint stays out of the folder the command ran in (often a source checkout)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".checkpoint.json")]


def test_an_ensemble_is_analyzed_through_its_composing_models(repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_tcli(
        "analyze", "-m", "pipeline", str(repo), *FAST, "--max-instance-count", "1", "--max-batch-size", "1",
        "--dynamic-batching", "off", "--python-placement", "server", "--max-concurrency", "1",
        "--output-dir", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "model 'pipeline' is an ensemble: tcli analyze measures its composing models one by one"
        in done.stdout
    )
    assert ": sleepy" in done.stdout and "best for sleepy:" in done.stdout
    assert (out / "pipeline" / "config.pbtxt").is_file() and (out / "sleepy" / "1" / "model.py").is_file()
    assert run_tcli("repo", "validate", str(out)).returncode == 0


# A model that is fast in-process and slow when served over HTTP, by a margin no machine's speed
# changes: it tells the two apart by whether its process holds an established TCP connection (the
# in-process measurement opens none; the check over HTTP serves one to its load generator).
# In-process each execution sleeps 5 ms, its 4 instances side by side: 4 requests in flight take
# 5 ms. Served, each execution sleeps 40 ms and they take turns (a lock file): 4 in flight wait
# 160 ms, 2 wait 80 ms and 1 waits 40 ms. So within a 120 ms budget in-process the best is
# concurrency 4 (4 in flight at 5 ms each), and served it is 2 (or 1, should a stall push 2 over).
SLOW_OVER_HTTP_PY = """
import fcntl
import os
import socket
import time

import triton_python_backend_utils as pb_utils


def serving_a_tcp_client():
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as held:
                if held.family in (socket.AF_INET, socket.AF_INET6) and held.type == socket.SOCK_STREAM:
                    held.getpeername()  # a listening socket has no peer
                    return True
        except OSError:
            continue
    return False


class TritonPythonModel:
    def initialize(self, args):
        self.lock_path = os.path.join(args["model_repository"], "served.lock")

    def execute(self, requests):
        if serving_a_tcp_client():
            with open(self.lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                time.sleep(0.040)
        else:
            time.sleep(0.005)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
SLOW_OVER_HTTP_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_the_best_config_is_served_over_http_and_recommended_where_it_meets_the_budget(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    (repo / "slow_over_http" / "1").mkdir(parents=True)
    (repo / "slow_over_http" / "1" / "model.py").write_text(SLOW_OVER_HTTP_PY)
    (repo / "slow_over_http" / "config.pbtxt").write_text(SLOW_OVER_HTTP_CONFIG)
    out = tmp_path / "out"
    done = run_tcli(
        "analyze", "-m", "slow_over_http", str(repo), *FAST, "--mode", "brute", "--latency-budget", "120",
        "--min-instance-count", "4", "--max-instance-count", "4", "--python-placement", "server",
        "--max-concurrency", "4", "--format", "json", "--output-dir", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    best = report["best"]
    assert report["measured"] == 1 and report["checked_over_http"] == 1
    # in-process it met the budget at concurrency 4; served over HTTP it did not, and one level down
    # (or two) it does: that is the concurrency recommended, with the figures served there
    assert best["concurrency"] == 4 and best["p99_ms"] <= 120, done.stdout
    served = best["served"]
    assert served["protocol"] == "http" and served["meets"], done.stdout
    assert served["concurrency"] in (1, 2) and report["recommended_concurrency"] == served["concurrency"]
    assert served["p99_ms"] <= 120
    missed = [level for level in served["levels"] if level["concurrency"] == 4]
    assert missed and missed[0]["p99_ms"] > 120, done.stdout
    assert "over HTTP: serving 4 x no batching, in-server to check its figures" in done.stderr
    assert (
        f"best for slow_over_http: 4 x no batching, in-server: {served['throughput']:.1f} infer/s at "
        f"concurrency {served['concurrency']}, p99 {served['p99_ms']:.2f} ms, verified over HTTP (in-process: "
    ) in done.stderr
    assert "count: 4" in (out / "slow_over_http" / "config.pbtxt").read_text()


@pytest.fixture
def explicit_server(repo: Path) -> Iterator[Server]:
    settings = ServerSettings(
        [repo],
        ControlMode.EXPLICIT,
        load_models=["sleepy"],
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
    )
    with Server(settings) as running:
        yield running


def test_against_a_running_server_through_model_control(explicit_server: Server, tmp_path: Path) -> None:
    url = f"localhost:{explicit_server.http_port}"
    done = run_tcli(
        "analyze", "-m", "sleepy", "-u", url, *FAST, "--max-instance-count", "1", "--max-batch-size", "2",
        "--dynamic-batching", "on", "--queue-delays", "3000", "--python-placement", "server",
        "--max-concurrency", "2", "--mode", "brute", "--format", "json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["measured"] == 2 and report["best"] is not None
    assert all(row["levels"] and row["throughput"] > 0 for row in report["configs"])
    # the model's own config is back once the analysis is over
    from tcli.client import connect

    client = connect(url, "http")
    try:
        assert client.model_config("sleepy")["max_batch_size"] == 1
        assert "dynamic_batching" not in client.model_config("sleepy")
        # a config the user had loaded is what comes back, not the repository's
        loaded = {**client.model_config("sleepy"), "max_batch_size": 2}
        client.load_model("sleepy", json.dumps(loaded))
        done = run_tcli(
            "analyze", "-m", "sleepy", "-u", url, *FAST, "--max-instance-count", "1", "--max-batch-size", "1",
            "--dynamic-batching", "off", "--python-placement", "server", "--max-concurrency", "1",
            "--mode", "brute", "--format", "json", "--fresh", cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert client.model_config("sleepy")["max_batch_size"] == 2
    finally:
        client.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "nope"], "unknown model 'nope': {repo} has no folder 'nope' (its models: pipeline, sleepy)"),
        (["-m", "sleepy", "--max-trials", "2"], "--max-trials must be 3 or more"),
        (["-m", "sleepy", "--latency-budget", "0"], "--latency-budget must be more than 0 ms"),
        (["-m", "sleepy", "--link"], "--link goes with --output-dir"),
        (["-m", "sleepy", "--queue-delays", "a,b"], "--queue-delays 'a,b' is not a list of whole numbers"),
        (["-m", "sleepy", "--max-instance-count", "0"], "--min-instance-count must be 1 or more"),
    ],
)
def test_bad_options_are_one_line_errors(repo: Path, tmp_path: Path, args: list[str], message: str) -> None:
    done = run_tcli("analyze", str(repo), *args, cwd=tmp_path)
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: " + message.format(repo=repo))


def test_help_names_the_options() -> None:
    done = run_tcli("analyze", "--help", cwd=ROOT)
    assert done.returncode == 0
    for option in (
        "--latency-budget",
        "--min-throughput",
        "--objective",
        "--mode",
        "--output-dir",
        "--checkpoint",
    ):
        assert option in done.stdout
