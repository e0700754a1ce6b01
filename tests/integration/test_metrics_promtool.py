"""The metrics endpoint, served by tcli's HTTP server over real loaded models, passes Prometheus' own checker
(`promtool check metrics`) and draws exactly the objections promtool draws against real Triton 2.51.

Triton's names break three of promtool's naming conventions (counters without `_total`, `_count`
on counters and gauges, `_us` units); those objections are part of being Triton-compatible, so the
test requires that promtool says the same about tcli as about Triton, nothing more, and nothing at
all about tcli's own families. A parse error fails the test.

promtool comes from the Debian package `prometheus` (`apt-get install -y prometheus`, about 12 s).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from server.frontends.http.server import serve_http
from server.frontends.metrics import CONTENT_TYPE, create_metrics_app
from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, Tensor
from server.repository.manager import ControlMode, ModelManager
from server.service import InferenceService
from tests.reference import RealTriton, require_reference_triton

REPO = Path(__file__).resolve().parents[2] / "model_repository"
PROMTOOL_INSTALL = "apt-get update && apt-get install -y prometheus  # Debian package providing promtool"

# What promtool 2.42 reports about real Triton 2.51's /metrics (CPU only, after inferences): every
# objection is about a name Triton chose, so a compatible server draws exactly these.
TRITON_LINT = {
    "nv_inference_compute_infer_duration_us": {"_total", "abbreviated"},
    "nv_inference_compute_input_duration_us": {"_total", "abbreviated"},
    "nv_inference_compute_output_duration_us": {"_total", "abbreviated"},
    "nv_inference_count": {"_total", "_count"},
    "nv_inference_exec_count": {"_total", "_count"},
    "nv_inference_pending_request_count": {"_count"},
    "nv_inference_queue_duration_us": {"_total", "abbreviated"},
    "nv_inference_request_duration_us": {"_total", "abbreviated"},
    "nv_inference_request_failure": {"_total"},
    "nv_inference_request_success": {"_total"},
}
LINT_KINDS = {
    'counter metrics should have "_total" suffix': "_total",
    "metric names should not contain abbreviated units": "abbreviated",
    'non-histogram and non-summary metrics should not have "_count" suffix': "_count",
}


# ----------------------------------------------------------------------------------------- promtool
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(f"promtool is not installed: {PROMTOOL_INSTALL}")
    return found


def promtool_lint(exposition: bytes) -> dict[str, set[str]]:
    """promtool's objections, as {family: {kind}}; fails on anything that is not a naming lint."""
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=exposition, capture_output=True, timeout=60
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode in (0, 3), (
        f"promtool rejected the exposition (rc {result.returncode}):\n{output}"
    )
    lint: dict[str, set[str]] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        name, _, message = line.partition(" ")
        assert message in LINT_KINDS, f"unexpected promtool finding: {line}"
        lint.setdefault(name, set()).add(LINT_KINDS[message])
    return lint


def families(exposition: bytes) -> dict[str, tuple[str, str, set[frozenset[str]]]]:
    """{family: (TYPE, HELP, label-name sets of its samples)} of a text exposition."""
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    labels: dict[str, set[frozenset[str]]] = {}
    current = ""
    for line in exposition.decode().splitlines():
        if line.startswith("# HELP "):
            current, _, helps_text = line[7:].partition(" ")
            helps[current] = helps_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            head = line.rsplit(" ", 1)[0]
            names = frozenset(p.split("=", 1)[0] for p in head.partition("{")[2].rstrip("}").split(",") if p)
            labels.setdefault(current, set()).add(names)
    return {name: (types[name], helps[name], labels.get(name, set())) for name in helps}


# ----------------------------------------------------------------------------------------- tcli side
class MetricsServer:
    """create_metrics_app served as `tcli serve` serves it (serve_http), on a free port, in a thread."""

    def __init__(self, service: InferenceService) -> None:
        self.app = create_metrics_app(service)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def __enter__(self) -> MetricsServer:
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(serve_http(self.app, "127.0.0.1", 0), self.loop)
        self.handle = started.result(30)
        self.port = self.handle.port
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.handle.shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def simple_request(rows: int, with_second_input: bool = True) -> InferenceRequest:
    data = np.arange(rows * 16, dtype=np.int32).reshape(rows, 16)
    inputs = [Tensor("INPUT0", "INT32", (rows, 16), data)]
    if with_second_input:
        inputs.append(Tensor("INPUT1", "INT32", (rows, 16), np.ones_like(data)))
    return InferenceRequest("simple", inputs=inputs)


def digits_request() -> InferenceRequest:
    image = np.zeros((1, 1, 8, 8), dtype=np.float32)
    return InferenceRequest("digits_onnx", inputs=[Tensor("input", "FP32", image.shape, image)])


@pytest.fixture(scope="module")
def served() -> Iterator[InferenceService]:
    """The example ONNX models loaded for real, after successful, batched and failing requests."""
    manager = ModelManager([REPO], ControlMode.EXPLICIT)
    manager.load("simple")
    manager.load("digits_onnx")
    service = InferenceService(manager)

    async def traffic() -> None:
        await service.infer(simple_request(2))
        await service.infer(simple_request(1))
        with pytest.raises(TritonError):
            await service.infer(simple_request(1, with_second_input=False))
        await asyncio.gather(*(service.infer(digits_request()) for _ in range(32)))

    asyncio.run(traffic())
    yield service
    manager.shutdown(timeout=30)


@pytest.fixture(scope="module")
def scrape(served: InferenceService) -> bytes:
    with MetricsServer(served) as server:
        response = httpx.get(server.url, timeout=10)
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE
        assert httpx.get(server.url.replace("/metrics", "/"), timeout=10).status_code == 404
        return response.content


def test_scrape_over_http_has_the_traffic(scrape: bytes) -> None:
    text = scrape.decode()
    assert 'nv_inference_request_success{model="simple",version="1"} 2.0' in text
    assert 'nv_inference_count{model="simple",version="1"} 3.0' in text
    assert 'nv_inference_request_success{model="digits_onnx",version="1"} 32.0' in text
    assert 'tcli_inference_batch_size_sum{model="digits_onnx",version="1"} 32.0' in text


def test_promtool_accepts_the_exposition_with_only_tritons_naming_objections(scrape: bytes) -> None:
    lint = promtool_lint(scrape)
    assert not [name for name in lint if name.startswith("tcli_")], lint
    assert lint == TRITON_LINT


# ----------------------------------------------------------------------------------------- vs Triton
ADD_SUB_REQUEST = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
    ]
}


@pytest.fixture(scope="module")
def triton_scrape(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    binary = require_reference_triton()
    repo = tmp_path_factory.mktemp("triton-metrics")
    shutil.copytree(REPO / "add_sub", repo / "add_sub")
    with RealTriton(binary, repo) as triton:
        for _ in range(2):
            request = urllib.request.Request(
                f"http://{triton.http_address}/v2/models/add_sub/infer",
                data=json.dumps(ADD_SUB_REQUEST).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200
        with urllib.request.urlopen(triton.metrics_url, timeout=30) as answer:
            body: bytes = answer.read()
            return body


@pytest.mark.reference
def test_promtool_says_the_same_about_real_triton(triton_scrape: bytes) -> None:
    assert promtool_lint(triton_scrape) == TRITON_LINT


@pytest.mark.reference
def test_families_match_real_tritons(triton_scrape: bytes, scrape: bytes) -> None:
    """Same names, TYPE, HELP and label names; Triton's pinned-memory gauges are the one omission
    (tcli has no pinned memory pool), tcli_* the one addition."""
    theirs: dict[str, Any] = {
        name: family
        for name, family in families(triton_scrape).items()
        if not name.startswith("nv_pinned_memory_pool_")
    }
    ours = {name: family for name, family in families(scrape).items() if not name.startswith("tcli_")}
    assert list(ours) == list(theirs)  # family order too
    assert ours == theirs
