"""`tcli perf` against a running tcli server, as a user drives it: perf_analyzer's summary lines, its
CSV header, JSON, a PNG chart, sequence models, gRPC, Ctrl-C, and one-line errors. Windows are short
and the stability band wide, so that runs end after three windows; no test asserts a speed."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import ROOT, run_tcli
from tests.reference import SETUP_HINT, reference_dir

FAST = ["-p", "200", "-s", "1000", "-r", "10"]  # 200 ms windows; any three windows count as stable
PA_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)


# A model that never lets a level become stable: 2 ms per request for 0.4 s, then 20 ms for 0.4 s, and
# so on; any three 200 ms windows in a row span both phases, so their throughputs differ several-fold.
SWINGING_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""
SWINGING_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.002 if int(time.monotonic() / 0.4) % 2 else 0.02)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("repo")
    for name in ("simple", "add_sub", "simple_sequence"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    (repo / "swinging" / "1").mkdir(parents=True)
    (repo / "swinging" / "config.pbtxt").write_text(SWINGING_CONFIG)
    (repo / "swinging" / "1" / "model.py").write_text(SWINGING_MODEL)
    settings = ServerSettings([repo], ControlMode.NONE, http_port=0, grpc_port=0, allow_metrics=False)
    with Server(settings) as running:
        yield running


def perf(server: Server, *args: str, protocol: str = "http") -> subprocess.CompletedProcess[str]:
    port = server.http_port if protocol == "http" else server.grpc_port
    return run_tcli("perf", *args, "-i", protocol, "-u", f"localhost:{port}")


def test_simple_prints_perf_analyzer_summary_and_writes_csv_and_plot(server: Server, tmp_path: Path) -> None:
    report, chart = tmp_path / "simple.csv", tmp_path / "simple.png"
    done = perf(
        server, "-m", "simple", *FAST, "--concurrency-range", "1:2", "-f", str(report), "--plot", str(chart)
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("*** Measurement Settings ***\n  Batch size: 1\n  Service Kind: TRITON\n")
    assert "  Stabilizing using average latency and throughput\n  Measurement window: 200 msec\n" in out
    assert "  Concurrency limit: 2 concurrent requests\n  Using synchronous calls for inference\n" in out
    for level in (1, 2):
        assert f"Request concurrency: {level}\n  Client: \n    Request count: " in out
    for line in (
        "    Throughput: ",
        "    Avg latency: ",
        "    p50 latency: ",
        "    p90 latency: ",
        "    p95 latency: ",
    ):
        assert out.count(line) == 2
    assert out.count("    p99 latency: ") == 2 and out.count("    Avg HTTP time: ") == 2
    assert "  Server: \n    Inference count: " in out
    assert "    Avg request latency: " in out and " usec + compute infer " in out
    summary = out.split("Inferences/Second vs. Client Average Batch Latency\n")[1].splitlines()
    assert [line.split(",")[0] for line in summary] == ["Concurrency: 1", "Concurrency: 2"]
    assert all(" infer/sec, latency " in line and line.endswith(" usec") for line in summary)

    text = report.read_text()
    assert text.splitlines()[0] == PA_HEADER
    rows = list(csv.DictReader(text.splitlines()))
    assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2]
    throughputs = [float(r["Inferences/Second"]) for r in rows]
    assert throughputs == sorted(throughputs)  # perf_analyzer sorts rows by throughput
    assert all(int(r["p50 latency"]) <= int(r["p99 latency"]) for r in rows)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_add_sub_json_over_grpc(server: Server) -> None:
    done = perf(server, "-m", "add_sub", *FAST, "--format", "json", protocol="grpc")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"] == "add_sub" and report["protocol"] == "grpc"
    (level,) = report["results"]
    assert level["concurrency"] == 1 and level["stable"] is True
    assert level["request_count"] > 0 and level["throughput_infer_per_sec"] > 0
    latency = level["latency_us"]
    assert set(latency) == {"avg", "std", "p50", "p90", "p95", "p99"}
    assert latency["p50"] <= latency["p90"] <= latency["p95"] <= latency["p99"]
    server_side = level["server"]
    assert server_side["success_count"] > 0
    parts = ("overhead_us", "queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")
    assert all(server_side[p] >= 0 for p in parts)


def test_add_sub_grpc_text_and_streaming(server: Server) -> None:
    done = perf(server, "-m", "add_sub", *FAST, "--percentile", "95", protocol="grpc")
    assert done.returncode == 0, done.stderr
    assert "  Stabilizing using p95latency and throughput\n" in done.stdout
    assert "    Avg gRPC time: " in done.stdout and "(un)marshal request/response" in done.stdout
    assert "    Avg latency:" not in done.stdout  # perf_analyzer drops it when --percentile is set
    assert "Inferences/Second vs. Client p95 Batch Latency\nConcurrency: 1, throughput: " in done.stdout

    done = perf(server, "-m", "add_sub", *FAST, "--streaming", "--concurrency-range", "2", protocol="grpc")
    assert done.returncode == 0, done.stderr
    assert "  Stabilizing using average throughput\n" in done.stdout
    assert "  Using asynchronous calls for inference\n" in done.stdout
    assert "Request concurrency: 2\n" in done.stdout


def test_sequence_model(server: Server, tmp_path: Path) -> None:
    data = tmp_path / "sequence.json"
    data.write_text(json.dumps({"data": [[{"INPUT": [1]}, {"INPUT": [2]}, {"INPUT": [3]}]]}))
    done = perf(server, "-m", "simple_sequence", *FAST, "--sequence-length", "4", "--input-data", str(data))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "  Using asynchronous calls for inference\n" in out  # perf_analyzer's default for sequences
    assert "    Sequence count: " in out and " seq/sec)\n" in out
    requests = int(out.split("    Request count: ")[1].split("\n")[0])
    sequences = int(out.split("    Sequence count: ")[1].split(" ")[0])
    assert 0 < sequences <= requests
    # every sequence started with START and ended with END: the server accepted them all
    assert "    Successful request count: " in out

    done = perf(server, "-m", "simple_sequence", *FAST, "--sync", protocol="grpc")
    assert done.returncode == 0, done.stderr
    assert (
        "  Using synchronous calls for inference\n" in done.stdout and "    Sequence count: " in done.stdout
    )


def test_request_rate(server: Server, tmp_path: Path) -> None:
    report = tmp_path / "rate.csv"
    done = perf(server, "-m", "add_sub", *FAST, "--request-rate-range", "100:200:100", "-f", str(report))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "  Request Rate limit: 200 requests per seconds\n  Using uniform distribution on request generation\n"
        in out
    )
    assert "Request Rate: 100 inference requests per seconds\n" in out
    assert "Request Rate: 200, throughput: " in out
    assert report.read_text().startswith("Request Rate,Inferences/Second,Client Send,")


def test_ctrl_c_stops_and_reports_what_was_measured(server: Server, tmp_path: Path) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    report = tmp_path / "interrupted.csv"
    command = [str(tcli), "perf", "-m", "add_sub", "-u", f"localhost:{server.http_port}", "-v"]
    command += [
        "-p",
        "200",
        "-s",
        "0.0001",
        "-r",
        "1000",
        "-f",
        str(report),
    ]  # never stable: runs until stopped
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    process = _start_perf(command, env)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:  # wait for three measured windows
        lines.append(line)
        if line.startswith("  Pass [3]"):
            break
    process.send_signal(signal.SIGINT)
    rest, err = process.communicate(timeout=60)
    out = "".join(lines) + rest
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert "  Client: \n    Request count: " in out
    assert "Inferences/Second vs. Client Average Batch Latency\nConcurrency: 1, throughput: " in out
    assert report.read_text().splitlines()[0] == PA_HEADER


@pytest.mark.parametrize(("concurrency", "share", "expected"), [(4, None, 1), (8, None, 2), (3, "1", 3)])
def test_grpc_load_shares_connections_as_perf_analyzer_does(
    server: Server, concurrency: int, share: str | None, expected: int
) -> None:
    """perf_analyzer's gRPC clients share a connection six to one, its statistics client first (it
    opens 1 connection at concurrency 4 and 2 at 6-8); TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT
    changes the share. Counted at the socket level on the load generator process."""
    tcli = Path(sys.executable).parent / "tcli"
    command = [str(tcli), "perf", "-m", "add_sub", "-i", "grpc", "-u", f"localhost:{server.grpc_port}"]
    command += ["--concurrency-range", str(concurrency), "-p", "300", "-s", "0.0001", "-r", "1000", "-v"]
    env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT", None)
    if share is not None:
        env["TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"] = share
    process = _start_perf(command, env)
    assert process.stdout is not None
    try:
        for line in process.stdout:  # a window measured: every slot is sending
            if line.startswith("  Pass [1]"):
                break
        workers = psutil.Process(process.pid).children(recursive=True)
        assert workers, "tcli perf started no load generator process"
        opened = {
            (c.laddr.port, c.pid)
            for c in psutil.net_connections(kind="tcp")
            if c.raddr
            and c.raddr.port == server.grpc_port
            and c.status == psutil.CONN_ESTABLISHED
            and c.pid in {w.pid for w in workers}
        }
        assert len(opened) == expected
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def _start_perf(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """`tcli perf` started as from a terminal, its output piped back as text."""
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_delivered,
    )


def _ctrl_c_delivered() -> None:
    """A test suite run in the background (`make test &`) ignores SIGINT, and a child inherits that,
    so Python would never turn it into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-m", "nope"], "failed to get model metadata"),
        (["-m", "simple", "--shape", "INPUT0:8"], "does not fit the model's shape [16]"),
        (["-m", "add_sub", "-b", "2"], "can not specify batch size > 1"),
    ],
)
def test_errors_are_one_line(server: Server, args: list[str], expected: str) -> None:
    done = perf(server, *args, *FAST)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_unreachable_server_is_one_line() -> None:
    done = run_tcli("perf", "-m", "simple", "-u", f"localhost:{_free_port()}", *FAST)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot reach" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("flag", "where", "expected"),
    [
        ("-f", "missing/out.csv", "does not exist"),
        ("--plot", "missing/chart.png", "does not exist"),
        ("-f", ".", "is a folder"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_measuring(
    tmp_path: Path, flag: str, where: str, expected: str
) -> None:
    # no server at all: the path is checked before the model is even asked for
    done = run_tcli(
        "perf", "-m", "simple", "-u", f"localhost:{_free_port()}", flag, str(tmp_path / where), *FAST
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
    assert not (tmp_path / "missing").exists()


def _shape_of(text: str) -> list[str]:
    """The output with every number replaced: what must match perf_analyzer line for line."""
    return [re.sub(r"\d+(\.\d+)?(e[+-]\d+)?", "N", line) for line in text.splitlines()]


@pytest.mark.reference
@pytest.mark.parametrize(
    ("protocol", "args"),
    [
        ("http", ["-m", "add_sub", "--concurrency-range", "1:2"]),
        ("grpc", ["-m", "simple_sequence", "--sequence-length", "4", "--percentile", "95"]),
    ],
)
def test_same_lines_as_real_perf_analyzer(
    server: Server, tmp_path: Path, protocol: str, args: list[str]
) -> None:
    analyzer = reference_dir() / "bin" / "perf_analyzer"
    if not (analyzer.is_file() and os.access(analyzer, os.X_OK)):
        pytest.skip(f"real perf_analyzer not installed: run {SETUP_HINT}")
    port = server.http_port if protocol == "http" else server.grpc_port
    common = [*args, *FAST, "-i", protocol, "-u", f"localhost:{port}"]
    theirs = subprocess.run(
        [str(analyzer), *common, "-f", str(tmp_path / "pa.csv")], capture_output=True, text=True, timeout=120
    )
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    ours = run_tcli("perf", *common, "-f", str(tmp_path / "tcli.csv"))
    assert ours.returncode == 0, ours.stderr
    assert _shape_of(ours.stdout) == _shape_of(theirs.stdout)
    pa_header = (tmp_path / "pa.csv").read_text().splitlines()[0]
    assert (tmp_path / "tcli.csv").read_text().splitlines()[0] == pa_header


UNSTABLE = ["-m", "swinging", "-p", "200", "-s", "10", "-r", "4", "--concurrency-range", "1:2"]


def test_a_level_that_never_stabilises_is_reported_with_a_warning_and_the_next_follows(
    server: Server, tmp_path: Path
) -> None:
    done = perf(server, *UNSTABLE, "-f", str(tmp_path / "levels.csv"))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning: ")]
    # one line each, which fits a terminal
    assert [re.sub(r"windows \d+% apart", "windows N% apart", line) for line in warnings] == [
        f"Warning: concurrency {level} unstable (4 windows N% apart, > 10%): a longer -p helps"
        for level in (1, 2)
    ]
    assert all(len(line) <= 80 for line in warnings)
    summary = done.stdout.split("Inferences/Second vs. Client Average Batch Latency\n")[1].splitlines()
    assert [
        re.sub(r"throughput: \S+ infer/sec, latency \d+", "throughput: N infer/sec, latency N", line)
        for line in summary
    ] == [f"Concurrency: {level}, throughput: N infer/sec, latency N usec (not stable)" for level in (1, 2)]
    with open(tmp_path / "levels.csv", newline="") as handle:
        assert sorted(int(row["Concurrency"]) for row in csv.DictReader(handle)) == [1, 2]


def test_strict_stability_stops_at_the_first_unstable_level_as_perf_analyzer_does(server: Server) -> None:
    done = perf(server, *UNSTABLE, "--strict-stability")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: Failed to obtain stable measurement within 4 measurement windows for concurrency 1. "
        "Please try to increase the --measurement-interval."
    )
    assert "Concurrency: 2" not in done.stdout
