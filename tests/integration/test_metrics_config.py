"""`--metrics-config` (latency summaries and counters) beside real Triton 2.51: `tcli serve` and
`tritonserver` serve the same python model with the same flags, get the same requests, and expose
the same Triton families with the same types, label sets and quantile labels (values differ).
Also: the summaries' counts and sums follow the traffic, their quantiles are within the observed
range, and a malformed setting stops `tcli serve` with the fix."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_serve import Served
from tests.reference import RealTriton, require_reference_triton
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 4
SETTINGS = {
    "summaries": ["summary_latencies=true"],
    "quantiles_without_counters": [
        "summary_latencies=true",
        "summary_quantiles=0.5:0.05,0.9:0.01,0.25:0.1",
        "counter_latencies=false",
    ],
    "counters_only": ["counter_latencies=true", "summary_latencies=false"],
    "histograms_asked": ["histogram_latencies=true"],  # Triton 2.51 has none: no effect
}
Shape = dict[str, tuple[str, set[tuple[str, frozenset[str], str]]]]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("metrics_config") / "models"
    shutil.copytree(ROOT / "model_repository" / "add_sub", root / "add_sub")
    return root


def _flags(settings: list[str]) -> list[str]:
    return [f"--metrics-config={setting}" for setting in settings]


def _traffic(http_address: str) -> None:
    """REQUESTS add_sub requests over HTTP."""
    client = httpclient.InferenceServerClient(http_address)
    for index in range(REQUESTS):
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(np.full(4, index, dtype=np.float32))
            inputs.append(tensor)
        client.infer("add_sub", inputs)


def _shape(text: str) -> Shape:
    """Triton's per-model families: {name: (type, {(sample name, label names, quantile)})}."""
    shape: Shape = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nv_inference_"):
            continue
        samples = {(s.name, frozenset(s.labels), s.labels.get("quantile", "")) for s in family.samples}
        shape[family.name] = (family.type, samples)
    return shape


class TcliServe(Served):
    """`tcli serve` (HTTP and metrics only), its metrics port read from its output."""

    def metrics_url(self) -> str:
        found: list[str] = []

        def announced() -> bool:
            match = re.search(r"metrics on [\w.:]+:(\d+)", self.output())
            found[:] = [match.group(1)] if match else []
            return bool(found)

        wait_until(announced, "tcli serve to announce its metrics port")
        return f"http://127.0.0.1:{found[0]}/metrics"


@pytest.fixture
def served(repository: Path, request: pytest.FixtureRequest) -> Iterator[TcliServe]:
    settings = SETTINGS[request.param]
    running = TcliServe(str(repository), *_flags(settings))
    try:
        yield running
    finally:
        assert running.stop() == 0


@pytest.mark.parametrize("served", list(SETTINGS), indirect=True)
def test_the_same_families_as_real_triton(
    repository: Path, served: TcliServe, request: pytest.FixtureRequest
) -> None:
    binary = require_reference_triton()
    settings = SETTINGS[request.node.callspec.params["served"]]
    with RealTriton(binary, repository, _flags(settings)) as triton:
        _traffic(triton.http_address)
        triton_shape = _shape(httpx.get(triton.metrics_url, timeout=30).text)
    _traffic(f"127.0.0.1:{served.port}")
    tcli_shape = _shape(httpx.get(served.metrics_url(), timeout=30).text)
    assert tcli_shape == triton_shape


@pytest.mark.parametrize("served", ["quantiles_without_counters"], indirect=True)
def test_summaries_follow_the_traffic(served: TcliServe) -> None:
    _traffic(f"127.0.0.1:{served.port}")
    text = httpx.get(served.metrics_url(), timeout=30).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "nv_inference_request_duration_us" not in families  # counter_latencies=false
    request = families["nv_inference_request_summary_us"]
    assert request.type == "summary"
    by_name = {(s.name, s.labels.get("quantile")): s.value for s in request.samples}
    count, total = (
        by_name[("nv_inference_request_summary_us_count", None)],
        by_name[("nv_inference_request_summary_us_sum", None)],
    )
    assert count == REQUESTS and total > 0
    quantiles = [by_name[("nv_inference_request_summary_us", q)] for q in ("0.25", "0.5", "0.9")]
    assert quantiles == sorted(quantiles)  # one window, ordered quantiles
    assert all(0 < q <= total and not math.isnan(q) for q in quantiles)


@pytest.mark.parametrize(
    ("setting", "fix"),
    [
        ("summary_latencies", "the format is <setting>=<value>"),
        ("summary_latencies=yes", 'summary_latencies is "true" or "false"'),
        ("summary_quantiles=0.5", "summary_quantiles is <quantile>:<error>,..."),
        ("summary_quantiles=1.5:0.1", "summary_quantiles is <quantile>:<error>,..."),
        ("gpu_latencies=true", "settings: counter_latencies, summary_latencies, summary_quantiles"),
    ],
)
def test_a_malformed_setting_stops_serve_with_the_fix(repository: Path, setting: str, fix: str) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    done = subprocess.run(
        [str(tcli), "serve", str(repository), f"--metrics-config={setting}", "--http-port=0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"--metrics-config={setting}: {fix}" in done.stderr + done.stdout
