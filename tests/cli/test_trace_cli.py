"""`tcli trace summary` on a trace file a real server wrote: tcli serving add_sub and an ensemble of it
with tracing on, tritonclient over HTTP and gRPC, the file closed when the server stopped (log
frequency 0: one array in the file itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server.app import Server, ServerSettings
from server.tracing.flags import read_trace_flags
from tests.integration.conftest import REPO
from tests.integration.serve_process import ServeProcess
from tests.integration.test_tracing import ENSEMBLE
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace")
    repository = root / "models"
    repository.mkdir()
    (repository / "add_sub").symlink_to(REPO / "add_sub", target_is_directory=True)
    (repository / "ens" / "1").mkdir(parents=True)
    (repository / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    file = root / "trace.json"
    flags = read_trace_flags([f"triton,file={file}", "level=TIMESTAMPS", "rate=1"])
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, grpc_port=0, allow_metrics=False, trace=flags
    )
    with Server(settings) as server:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        for _ in range(3):
            http.infer("add_sub", inputs)
        ens = [httpclient.InferInput("A", [4], "FP32"), httpclient.InferInput("B", [4], "FP32")]
        for tensor in ens:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        http.infer("ens", ens)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        ginputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
        for tensor in ginputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        grpc.infer("add_sub", ginputs)
    return file


def test_summary_as_json(trace_file: Path, tcli: Callable[..., CompletedProcess[str]]) -> None:
    done = tcli("trace", "summary", str(trace_file), "--format", "json", check=True)
    summary = json.loads(done.stdout)
    assert summary["files"] == [str(trace_file)]
    models = {m["model"]: m for m in summary["models"]}
    assert set(models) == {"add_sub", "ens"}
    add_sub = models["add_sub"]
    assert add_sub["traces"] == 6  # 3 over HTTP, 1 over gRPC, 2 as the ensemble's steps
    phases = add_sub["phases_us"]
    assert set(phases) == {"network_in", "queue", "compute_input", "infer", "compute_output", "network_out"}
    assert phases["network_in"]["count"] == 4  # the ensemble's steps had no network of their own
    assert phases["infer"]["count"] == 6
    assert all(0 <= p["p50"] <= p["p99"] for p in phases.values())
    assert set(models["ens"]["phases_us"]) == {"network_in", "network_out"}  # no compute of its own


def test_summary_table_and_chart(
    trace_file: Path, tcli: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    png = tmp_path / "phases.png"
    done = tcli("trace", "summary", str(trace_file), "--png", str(png), check=True)
    out = done.stdout
    assert "Trace summary: trace.json" in out
    for heading in (
        "model",
        "traces",
        "network in",
        "queue",
        "compute input",
        "infer",
        "compute output",
        "network out",
    ):
        assert heading in out
    row = next(line for line in out.splitlines() if "add_sub" in line)
    assert " 6 " in row
    assert png.read_bytes().startswith(b"\x89PNG")


def test_summary_at_80_columns_keeps_names_and_figures_whole(trace_file: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    tcli = Path(sys.executable).parent / "tcli"
    done = subprocess.run(
        [str(tcli), "trace", "summary", str(trace_file)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    # long names and large figures, as a real deployment's traces have them
    from rich.console import Console

    from tcli.render import trace_summary_table
    from tcli.trace.summary import PHASES, ModelPhases

    models = [
        ModelPhases(name, 1, 9, {p: [123456789, 987654321] for p in PHASES})
        for name in ("densenet_onnx_preprocessing", "text_recognition_ensemble")
    ]
    console = Console(width=80, record=True, no_color=True)
    console.print(trace_summary_table([trace_file], models))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "densenet_onnx_preprocessing" in text and "text_recognition_ensemble" in text  # whole names
    cells = [cell.strip() for line in lines for cell in line.split("│")]
    assert cells.count("555556/979012") == 4, text  # each p50/p99 pair whole, on one line
    assert "left out at this width" in text  # the phases that did not fit are named


def test_missing_file_is_one_line(tcli: Callable[..., CompletedProcess[str]], tmp_path: Path) -> None:
    done = tcli("trace", "summary", str(tmp_path / "nothing.json"))
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "no trace file" in done.stderr and "triton,file=" in done.stderr


def test_serve_takes_the_older_trace_flags(tmp_path: Path) -> None:
    """`tcli serve` as a user runs it, with tritonserver's deprecated --trace-* flags."""
    repository = tmp_path / "models"
    repository.mkdir()
    (repository / "add_sub").symlink_to(REPO / "add_sub", target_is_directory=True)
    file = tmp_path / "trace.json"
    flags = ["--trace-file", str(file), "--trace-level", "TIMESTAMPS", "--trace-rate", "1"]
    server = ServeProcess(str(repository), *flags, "--trace-log-frequency", "1")
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert client.get_trace_settings()["trace_file"] == str(file)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        client.infer("add_sub", inputs, request_id="legacy")
        wait_until(lambda: (tmp_path / "trace.json.0").exists(), "the first trace file")
        client.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
    finally:
        server.stop()
    entries = json.loads((tmp_path / "trace.json.0").read_text())
    assert [e["request_id"] for e in entries if "model_name" in e] == ["legacy"]


def test_a_bad_trace_flag_is_one_line(tcli: Callable[..., CompletedProcess[str]]) -> None:
    done = tcli("serve", str(REPO), "--trace-config", "rate=often")
    assert done.returncode == 1
    assert done.stderr.strip() == "error: --trace-config rate=often: expected an integer, got 'often'"


def test_an_otlp_url_that_cannot_be_used_stops_start_up_in_one_line(
    tcli: Callable[..., CompletedProcess[str]],
) -> None:
    entry = "opentelemetry,url=localhost:43x8/v1/traces"
    done = tcli("serve", str(REPO), "--trace-config", "mode=opentelemetry", "--trace-config", entry)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: --trace-config {entry}: the port is not a number from 0 to 65535; give "
        "<host>:<port>/<path>, e.g. localhost:4318/v1/traces (http:// is assumed)"
    )
