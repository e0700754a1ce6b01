"""The Prometheus endpoint writes Triton's families (names, HELP, TYPE, labels) with the values a
Grafana panel reads, from the same statistics the statistics API serves."""

from __future__ import annotations

import asyncio
import re
from collections.abc import MutableMapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from server.frontends.metrics import (
    CONTENT_TYPE,
    ASGIApp,
    CpuSampler,
    batch_buckets,
    busy_ratio,
    create_metrics_app,
    metrics_text,
)
from server.repository.manager import ModelManager
from server.repository.models import ModelState, ServedModel, VersionEntry
from server.scheduling.work import DefaultScheduler, WorkItem
from server.service import InferenceService

# HELP texts and types exactly as real Triton 2.51 writes them (curl :8002/metrics), in its order
TRITON_FAMILIES = [
    ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)"),
    (
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed (does not include cached requests)",
    ),
    (
        "nv_inference_request_duration_us",
        "counter",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "counter",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "counter",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "counter",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "counter",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_pending_request_count",
        "gauge",
        "Instantaneous number of pending requests awaiting execution per-model.",
    ),
]
HOST_FAMILIES = [
    ("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]"),
    ("nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes"),
    ("nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes"),
]

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

BATCHING_CONFIG = """
name: "batcher"
platform: "onnxruntime_onnx"
max_batch_size: 6
dynamic_batching { preferred_batch_size: [ 3 ] }
"""
PLAIN_CONFIG = """
name: "plain"
backend: "python"
max_batch_size: 0
"""


# ----------------------------------------------------------------------------------------- helpers
class Exposition:
    """The text a scrape returns, read the way Prometheus reads it."""

    def __init__(self, text: bytes) -> None:
        self.text = text.decode()
        self.help: dict[str, str] = {}
        self.types: dict[str, str] = {}
        self.order: list[str] = []
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in self.text.splitlines():
            if line.startswith("# HELP "):
                name, _, doc = line[len("# HELP ") :].partition(" ")
                self.help[name] = doc
                self.order.append(name)
            elif line.startswith("# TYPE "):
                name, _, kind = line[len("# TYPE ") :].partition(" ")
                self.types[name] = kind
            elif line:
                match = SAMPLE.match(line)
                assert match, f"not a sample line: {line!r}"
                labels = dict(LABEL.findall(match["labels"] or ""))
                self.samples.append((match["name"], labels, float(match["value"])))

    def value(self, name: str, **labels: str) -> float:
        found = [v for n, ls, v in self.samples if n == name and ls == labels]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples in\n{self.text}"
        return found[0]

    def series(self, name: str) -> list[dict[str, str]]:
        return [ls for n, ls, _ in self.samples if n == name]


def config(text: str) -> model_config_pb2.ModelConfig:
    parsed = model_config_pb2.ModelConfig()
    text_format.Parse(text, parsed)
    return parsed


def runner_with_pending(pending: int) -> SimpleNamespace:
    """A stand-in for a loaded ModelRunner: a real scheduler holding `pending` queued requests."""
    scheduler = DefaultScheduler()
    for _ in range(pending):
        scheduler.enqueue(WorkItem(request=None, rows=1, complete=lambda _r: None))  # type: ignore[arg-type]
    return SimpleNamespace(scheduler=scheduler)


def serve(manager: ModelManager, model_config: model_config_pb2.ModelConfig, **versions: Any) -> None:
    """Put a served model with the given versions (v1=VersionEntry ...) into the manager."""
    entries = {int(key[1:]): entry for key, entry in versions.items()}
    manager.models()[model_config.name] = ServedModel(model_config.name, None, model_config, versions=entries)


@pytest.fixture
def manager(tmp_path: Path) -> ModelManager:
    """A real ModelManager over an empty repository, with two loaded models put in by hand."""
    repo = tmp_path / "models"
    repo.mkdir()
    manager = ModelManager([repo])
    serve(
        manager,
        config(BATCHING_CONFIG),
        v1=VersionEntry(1, ModelState.READY, runner=runner_with_pending(3)),  # type: ignore[arg-type]
    )
    serve(
        manager,
        config(PLAIN_CONFIG),
        v1=VersionEntry(1, ModelState.UNAVAILABLE, "unloaded"),
        v2=VersionEntry(2, ModelState.READY, runner=runner_with_pending(0)),  # type: ignore[arg-type]
    )
    return manager


def fill_batcher_stats(manager: ModelManager) -> None:
    """Six batch-1 requests merged into two executions of 3, one batch-2 request alone, and failures."""
    stats = manager.stats.get("batcher", 1)
    for _ in range(2):
        stats.record_execution(3, input_ns=1_000, infer_ns=10_000, output_ns=500)
    stats.record_execution(2, input_ns=1_000, infer_ns=8_000, output_ns=500)
    for _ in range(6):
        stats.record_success(
            1, total_ns=40_000, queue_ns=20_000, input_ns=1_000, infer_ns=10_000, output_ns=500
        )
    stats.record_success(2, total_ns=12_000, queue_ns=1_500, input_ns=1_000, infer_ns=8_000, output_ns=500)
    stats.record_failure(5_000, "BACKEND")
    stats.record_failure(5_000, "BACKEND")
    stats.record_failure(3_000, "REJECTED")
    stats.record_failure(1_000, "something new")  # unknown reasons count as OTHER, as in Triton


# ----------------------------------------------------------------------------------------- families
def test_families_are_tritons_in_tritons_order_then_tclis(manager: ModelManager) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    expected = [*TRITON_FAMILIES, *HOST_FAMILIES]
    tcli_families = ["tcli_inference_batch_size", "tcli_model_ready"]
    assert scrape.order == [name for name, _, _ in expected] + tcli_families
    for name, kind, doc in expected:
        assert scrape.types[name] == kind, name
        assert scrape.help[name] == doc, name
    assert scrape.types["tcli_inference_batch_size"] == "histogram"
    assert scrape.types["tcli_model_ready"] == "gauge"


def test_counter_samples_are_named_like_tritons_without_total(manager: ModelManager) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    names = {name for name, _, _ in scrape.samples}
    for family, kind, _ in TRITON_FAMILIES:
        assert family in names
        if kind == "counter":
            assert f"{family}_total" not in names
            assert f"# TYPE {family} counter\n" in scrape.text


def test_per_model_series_have_model_and_version_labels(manager: ModelManager) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    loaded = [{"model": "batcher", "version": "1"}, {"model": "plain", "version": "2"}]
    for family, _, _ in TRITON_FAMILIES:
        if family == "nv_inference_request_failure":
            continue
        assert scrape.series(family) == loaded, family
    failures = scrape.series("nv_inference_request_failure")
    assert failures == [
        {**version, "reason": reason}
        for version in loaded
        for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER")
    ]
    # labels in the order Triton writes them (sorted): model, reason, version
    assert 'nv_inference_request_failure{model="batcher",reason="BACKEND",version="1"}' in scrape.text


def test_counters_read_the_statistics(manager: ModelManager) -> None:
    fill_batcher_stats(manager)
    scrape = Exposition(metrics_text(InferenceService(manager)))
    key = {"model": "batcher", "version": "1"}
    assert scrape.value("nv_inference_request_success", **key) == 7
    assert scrape.value("nv_inference_request_failure", reason="BACKEND", **key) == 2
    assert scrape.value("nv_inference_request_failure", reason="REJECTED", **key) == 1
    assert scrape.value("nv_inference_request_failure", reason="CANCELED", **key) == 0
    assert scrape.value("nv_inference_request_failure", reason="OTHER", **key) == 1
    assert scrape.value("nv_inference_count", **key) == 8  # rows
    assert scrape.value("nv_inference_exec_count", **key) == 3
    # cumulative microseconds of successful requests (ns / 1000)
    assert scrape.value("nv_inference_request_duration_us", **key) == (6 * 40_000 + 12_000) // 1000
    assert scrape.value("nv_inference_queue_duration_us", **key) == (6 * 20_000 + 1_500) // 1000
    assert scrape.value("nv_inference_compute_input_duration_us", **key) == 7
    assert scrape.value("nv_inference_compute_infer_duration_us", **key) == 68
    assert scrape.value("nv_inference_compute_output_duration_us", **key) == 3
    # the other model is untouched
    assert scrape.value("nv_inference_request_success", model="plain", version="2") == 0


def test_a_latency_panel_divides_two_counters(manager: ModelManager) -> None:
    """Triton's dashboards: average queue time = queue_duration_us / request_success."""
    fill_batcher_stats(manager)
    scrape = Exposition(metrics_text(InferenceService(manager)))
    key = {"model": "batcher", "version": "1"}
    average_queue_us = scrape.value("nv_inference_queue_duration_us", **key) / scrape.value(
        "nv_inference_request_success", **key
    )
    assert average_queue_us == pytest.approx(121 / 7)


def test_pending_request_count_is_the_queue_length(manager: ModelManager) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    assert scrape.value("nv_inference_pending_request_count", model="batcher", version="1") == 3
    assert scrape.value("nv_inference_pending_request_count", model="plain", version="2") == 0


def test_scrapes_follow_the_statistics(manager: ModelManager) -> None:
    first = Exposition(metrics_text(InferenceService(manager)))
    manager.stats.get("plain", 2).record_success(1, 1_000_000, 0, 0, 1_000_000, 0)
    second = Exposition(metrics_text(InferenceService(manager)))
    key = {"model": "plain", "version": "2"}
    assert first.value("nv_inference_request_success", **key) == 0
    assert second.value("nv_inference_request_success", **key) == 1
    assert second.value("nv_inference_request_duration_us", **key) == 1000


# ----------------------------------------------------------------------------------------- versions
def test_unloaded_versions_have_no_series(manager: ModelManager) -> None:
    manager.stats.get("plain", 1).record_success(1, 1_000, 0, 0, 1_000, 0)  # counted before its unload
    scrape = Exposition(metrics_text(InferenceService(manager)))
    for name, labels, _ in scrape.samples:
        assert labels.get("version") != "1" or labels.get("model") != "plain", name


def test_without_loaded_models_only_host_families_are_written(tmp_path: Path) -> None:
    manager = ModelManager([tmp_path])
    scrape = Exposition(metrics_text(InferenceService(manager)))
    assert scrape.order == [name for name, _, _ in HOST_FAMILIES]


# ----------------------------------------------------------------------------------------- readiness
def test_model_ready_is_one_per_ready_version_and_leaves_out_versions_unloaded_on_purpose(
    manager: ModelManager,
) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    assert scrape.series("tcli_model_ready") == [
        {"model": "batcher", "version": "1"},
        {"model": "plain", "version": "2"},  # plain v1 was unloaded: no series, nothing to alert on
    ]
    assert scrape.value("tcli_model_ready", model="batcher", version="1") == 1
    assert "tcli's own, not Triton's" in scrape.help["tcli_model_ready"]


def test_model_ready_is_zero_for_versions_that_failed_or_are_loading(manager: ModelManager) -> None:
    broken = config(PLAIN_CONFIG.replace('"plain"', '"broken"'))
    serve(
        manager,
        broken,
        v1=VersionEntry(1, ModelState.UNAVAILABLE, "INTERNAL: model.py raised"),
        v2=VersionEntry(2, ModelState.LOADING),
    )
    scrape = Exposition(metrics_text(InferenceService(manager)))
    assert scrape.value("tcli_model_ready", model="broken", version="1") == 0
    assert scrape.value("tcli_model_ready", model="broken", version="2") == 0
    # the model-not-ready alert's view: no ready version of `broken`, while Triton's families skip it
    assert all(labels["model"] != "broken" for labels in scrape.series("nv_inference_request_success"))


def test_model_ready_is_written_when_no_version_loaded(tmp_path: Path) -> None:
    """Every model failed: Triton's per-model families are absent, the readiness gauge says why."""
    manager = ModelManager([tmp_path])
    serve(manager, config(PLAIN_CONFIG), v1=VersionEntry(1, ModelState.UNAVAILABLE, "failed"))
    scrape = Exposition(metrics_text(InferenceService(manager)))
    assert scrape.order == [name for name, _, _ in HOST_FAMILIES] + ["tcli_model_ready"]
    assert scrape.value("tcli_model_ready", model="plain", version="1") == 0


# ----------------------------------------------------------------------------------------- batching
def test_batch_size_histogram_shows_merged_executions(manager: ModelManager) -> None:
    fill_batcher_stats(manager)
    scrape = Exposition(metrics_text(InferenceService(manager)))
    key = {"model": "batcher", "version": "1"}
    buckets = {
        labels["le"]: value
        for name, labels, value in scrape.samples
        if name == "tcli_inference_batch_size_bucket" and labels["model"] == "batcher"
    }
    # max_batch_size 6, preferred 3: bounds 1 2 3 4 6; one execution of 2, two of 3
    assert buckets == {"1": 0, "2": 1, "3": 3, "4": 3, "6": 3, "+Inf": 3}
    assert scrape.value("tcli_inference_batch_size_count", **key) == 3
    assert scrape.value("tcli_inference_batch_size_sum", **key) == 8
    # the documented query: average rows per execution (here over the whole run)
    average = scrape.value("tcli_inference_batch_size_sum", **key) / scrape.value(
        "tcli_inference_batch_size_count", **key
    )
    assert average == pytest.approx(8 / 3)


def test_batch_size_histogram_of_a_model_without_batching(manager: ModelManager) -> None:
    manager.stats.get("plain", 2).record_execution(1, 0, 1_000, 0)
    scrape = Exposition(metrics_text(InferenceService(manager)))
    key = {"model": "plain", "version": "2"}
    assert scrape.value("tcli_inference_batch_size_bucket", le="1", **key) == 1
    assert scrape.value("tcli_inference_batch_size_bucket", le="+Inf", **key) == 1
    assert scrape.value("tcli_inference_batch_size_sum", **key) == 1


@pytest.mark.parametrize(
    ("max_batch_size", "preferred", "expected"),
    [
        (0, [], (1,)),
        (1, [], (1,)),
        (8, [], (1, 2, 4, 8)),
        (64, [], (1, 2, 4, 8, 16, 32, 64)),
        (6, [3], (1, 2, 3, 4, 6)),
        (10, [5, 20], (1, 2, 4, 5, 8, 10)),
    ],
)
def test_batch_buckets(max_batch_size: int, preferred: list[int], expected: tuple[int, ...]) -> None:
    assert batch_buckets(max_batch_size, preferred) == expected


# ----------------------------------------------------------------------------------------- host
def test_host_memory_is_total_minus_available(manager: ModelManager) -> None:
    scrape = Exposition(metrics_text(InferenceService(manager)))
    total = scrape.value("nv_cpu_memory_total_bytes")
    used = scrape.value("nv_cpu_memory_used_bytes")
    assert total == psutil.virtual_memory().total
    assert 0 < used < total
    assert 0.0 <= scrape.value("nv_cpu_utilization") <= 1.0


def test_busy_ratio() -> None:
    assert busy_ratio((10.0, 90.0), (13.0, 91.0)) == pytest.approx(0.75)
    assert busy_ratio((10.0, 90.0), (10.0, 90.0)) == 0.0
    assert busy_ratio((10.0, 90.0), (9.0, 95.0)) == 0.0  # counters that went back count as no busy time


def test_cpu_utilization_refreshes_at_most_once_per_window() -> None:
    now = [100.0]
    sampler = CpuSampler(window_s=1.0, clock=lambda: now[0])
    readings = iter([(20.0, 80.0), (50.0, 90.0)])
    sampler._read = lambda: next(readings)  # type: ignore[method-assign]
    sampler._last = (10.0, 70.0)
    now[0] = 100.5
    assert sampler.utilization() == 0.0  # within the first window: nothing measured yet
    now[0] = 101.0
    assert sampler.utilization() == pytest.approx(0.5)  # (20-10) / ((20-10) + (80-70))
    now[0] = 101.5
    assert sampler.utilization() == pytest.approx(0.5)  # same window: same value, no new reading
    now[0] = 102.0
    assert sampler.utilization() == pytest.approx(0.75)  # (50-20) / (30 + 10)


# ----------------------------------------------------------------------------------------- ASGI app
def call(app: ASGIApp, method: str, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
    """One HTTP request through the ASGI app, as uvicorn would make it."""
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        scope = {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}
        await app(scope, receive, send)

    asyncio.run(run())
    start, body = sent
    return start["status"], dict(start["headers"]), body["body"]


def test_app_serves_metrics(manager: ModelManager) -> None:
    status, headers, body = call(create_metrics_app(InferenceService(manager)), "GET", "/metrics")
    assert status == 200
    assert headers[b"content-type"] == CONTENT_TYPE.encode()
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")
    assert int(headers[b"content-length"]) == len(body)
    assert b"# TYPE nv_inference_request_success counter\n" in body


def test_app_answers_404_elsewhere_and_405_for_other_methods(manager: ModelManager) -> None:
    app = create_metrics_app(InferenceService(manager))
    assert call(app, "GET", "/")[0] == 404
    assert call(app, "GET", "/v2/health/ready")[0] == 404
    status, headers, _ = call(app, "POST", "/metrics")
    assert status == 405
    assert headers[b"allow"] == b"GET, HEAD"
    status, headers, body = call(app, "HEAD", "/metrics")
    assert status == 200 and body == b"" and int(headers[b"content-length"]) > 0


def test_app_completes_lifespan(manager: ModelManager) -> None:
    app = create_metrics_app(InferenceService(manager))
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> MutableMapping[str, Any]:
        return next(incoming)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message["type"])

    async def run() -> None:
        await app({"type": "lifespan"}, receive, send)

    asyncio.run(run())
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
