"""Python models' own metrics (`pb_utils.MetricFamily`) made in instance processes (tcli's default
placement, as Triton's stubs) reach /metrics: two instances counting into one family and label set
count into one series, `Metric.value()` answers that shared value, Triton's refusals come back in
Triton's words, and the families of an unloaded model are gone. The same repository served by real
Triton 2.51 exports the same families, types, label sets and counts and refuses with the same texts.

Traffic is real tritonclient HTTP and gRPC; the exposition is read with prometheus_client's parser
and checked by promtool."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from server.app import Server, ServerSettings
from server.backends.python.process_host import ProcessModel
from server.repository.manager import ControlMode
from tests.integration.test_metrics_promtool import promtool
from tests.reference import RealTriton, TritonStartError, require_reference_triton
from tests.waiting import wait_until

COUNTED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls_family = pb_utils.MetricFamily(
            "tcli_it_calls_total", "Requests seen", pb_utils.MetricFamily.COUNTER
        )
        self.last_family = pb_utils.MetricFamily("tcli_it_last", "Last value", pb_utils.MetricFamily.GAUGE)
        self.sizes_family = pb_utils.MetricFamily(
            "tcli_it_sizes", "Values seen", pb_utils.MetricFamily.HISTOGRAM
        )
        self.calls = self.calls_family.Metric(labels={"model": "counted"})
        self.started = self.calls_family.Metric(labels={"model": "counted", "event": "initialize"})
        self.started.increment(1)  # every instance: one series for both
        self.last = self.last_family.Metric(labels={"model": "counted"})
        self.sizes = self.sizes_family.Metric(labels={"model": "counted"}, buckets=[1.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            self.calls.increment(1)
            self.last.set(float(value[0]))
            self.sizes.observe(float(value[0]))
            seen = np.array([self.calls.value()], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", seen)]))
        return responses
"""
COUNTED_CONFIG = """
name: "counted"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

# each refusal Triton 2.51's python backend makes, tried in a process; the texts are the answer
REFUSALS = """
import json
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils


def attempt(action):
    try:
        action()
        return "ok"
    except Exception as error:
        return f"{type(error).__name__}: {error}"


class TritonPythonModel:
    def initialize(self, args):
        kinds = pb_utils.MetricFamily
        self.counter_family = kinds("tcli_it_refusals_total", "x", kinds.COUNTER)
        self.counter = self.counter_family.Metric(labels={})
        self.histogram_family = kinds("tcli_it_refusal_sizes", "x", kinds.HISTOGRAM)
        self.histogram = self.histogram_family.Metric(labels={}, buckets=[1.0])
        self.background_family = kinds("tcli_it_background", "x", kinds.GAUGE)
        self.background = self.background_family.Metric(labels={})
        self.texts = {
            "invalid family name": attempt(lambda: kinds("1bad", "x", kinds.COUNTER)),
            "other kind": attempt(lambda: kinds("tcli_it_refusals_total", "x", kinds.GAUGE)),
            "invalid label": attempt(lambda: self.counter_family.Metric(labels={"1x": "y"})),
            "negative increment": attempt(lambda: self.counter.increment(-1)),
            "set on a counter": attempt(lambda: self.counter.set(3)),
            "increment on a histogram": attempt(lambda: self.histogram.increment(1)),
            "missing buckets": attempt(lambda: self.histogram_family.Metric(labels={"a": "c"})),
            "unsorted buckets": attempt(
                lambda: self.histogram_family.Metric(labels={"a": "d"}, buckets=[2.0, 1.0])
            ),
            "buckets on a counter": attempt(lambda: self.counter_family.Metric(labels={}, buckets=[1.0])),
        }

    def later(self):
        time.sleep(0.2)  # background work: the process sends nothing else afterwards
        self.background.set(42)

    def execute(self, requests):
        if pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()[0] == 2.0:
            threading.Thread(target=self.later).start()
        if pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()[0] == 1.0:
            # asked of tcli only: real Triton 2.51 sometimes aborts (boost lock_exception) on it
            family = pb_utils.MetricFamily("tcli_it_deleted", "x", pb_utils.MetricFamily.COUNTER)
            orphan = family.Metric(labels={})
            del family
            self.texts["family deleted"] = attempt(lambda: orphan.increment(1))
        text = np.array([json.dumps(self.texts).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXTS", text)]) for _ in requests]
"""
REFUSALS_CONFIG = """
name: "refusals"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "TEXTS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
REQUESTS = 6


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("custom_metrics_processes") / "models"
    for name, model, config in (
        ("counted", COUNTED, COUNTED_CONFIG),
        ("refusals", REFUSALS, REFUSALS_CONFIG),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(model)
        (root / name / "config.pbtxt").write_text(config)
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[Server]:
    settings = ServerSettings(
        [repository],
        model_control_mode=ControlMode.EXPLICIT,
        load_models=["counted", "refusals"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        metrics_port=0,
    )
    running = Server(settings).start()
    try:
        yield running
    finally:
        running.stop()


def _infer_counted(http_address: str, grpc_address: str) -> list[float]:
    """REQUESTS requests, half over HTTP and half over gRPC, one after the other: what each saw."""
    seen = []
    http = httpclient.InferenceServerClient(http_address)
    grpc = grpcclient.InferenceServerClient(grpc_address)
    for index in range(REQUESTS):
        module: object = httpclient if index % 2 == 0 else grpcclient
        client = http if index % 2 == 0 else grpc
        tensor = module.InferInput("IN", [1], "FP32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(np.array([float(index)], dtype=np.float32))
        seen.append(float(client.infer("counted", [tensor]).as_numpy("OUT")[0]))  # type: ignore[attr-defined]
    return seen


def _refusals(http_address: str, deleted_family: bool = False, value: float = 0.0) -> dict[str, str]:
    client = httpclient.InferenceServerClient(http_address)
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0 if deleted_family else value], dtype=np.float32))
    texts: dict[str, str] = json.loads(client.infer("refusals", [tensor]).as_numpy("TEXTS")[0])
    return texts


def _custom(text: str) -> dict[str, tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]]:
    """The tcli_it_* families: {name: (type, {(sample name, labels): value})}."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("tcli_it_"):
            samples = {(s.name, frozenset(s.labels.items())): s.value for s in family.samples}
            out[family.name] = (family.type, samples)
    return out


def _scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text


def test_two_instance_processes_count_into_one_series_and_value_reads_it(server: Server) -> None:
    runner = server.manager.models()["counted"].versions[1].runner
    assert runner is not None
    assert [type(instance) for instance in runner._instances] == [ProcessModel, ProcessModel]
    seen = _infer_counted(f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}")
    assert seen == [float(n) for n in range(1, REQUESTS + 1)]  # value(): the shared count, each time
    assert server.metrics_port is not None
    families = _custom(_scrape(server.metrics_port))
    assert families["tcli_it_calls"][0] == "counter"  # the parser names a counter without _total
    calls = families["tcli_it_calls"][1]
    assert calls[("tcli_it_calls_total", frozenset({("model", "counted")}))] == REQUESTS
    initialized = frozenset({("model", "counted"), ("event", "initialize")})
    assert calls[("tcli_it_calls_total", initialized)] == 2  # both instances, one series
    assert families["tcli_it_last"] == (
        "gauge",
        {("tcli_it_last", frozenset({("model", "counted")})): float(REQUESTS - 1)},
    )
    kind, sizes = families["tcli_it_sizes"]
    labels = {("model", "counted")}
    assert kind == "histogram"
    assert sizes[("tcli_it_sizes_bucket", frozenset(labels | {("le", "1")}))] == 2  # 0, 1
    assert sizes[("tcli_it_sizes_bucket", frozenset(labels | {("le", "+Inf")}))] == REQUESTS
    assert sizes[("tcli_it_sizes_count", frozenset(labels))] == REQUESTS
    assert sizes[("tcli_it_sizes_sum", frozenset(labels))] == sum(range(REQUESTS))


def test_refusals_are_tritons(server: Server) -> None:
    texts = _refusals(f"127.0.0.1:{server.http_port}", deleted_family=True)
    where = "Failed to process the request for model 'refusals_0', message: "
    assert texts == {
        "invalid family name": f"TritonModelException: Error when creating MetricFamily: {where}Invalid metric name",
        "other kind": "TritonModelException: Error when creating MetricFamily: "
        f"{where}Family name already exists with different type",
        "invalid label": f"TritonModelException: Error when creating Metric: {where}Invalid label name",
        "negative increment": f"TritonModelException: Failed to increment metric value: {where}"
        "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values.",
        "set on a counter": "TritonModelException: Failed to set metric value: "
        f"{where}TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        "increment on a histogram": "TritonModelException: Failed to increment metric value: "
        f"{where}TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment",
        "missing buckets": "TritonModelException: Failed to create metric. Missing required buckets.",
        "unsorted buckets": "TritonModelException: Error when creating Metric: "
        f"{where}Bucket Boundaries must be strictly sorted",
        "buckets on a counter": "TritonModelException: Failed to create metric. Unexpected buckets found.",
        "family deleted": "TritonModelException: Failed to increment metric value: Invalid metric operation "
        "as the corresponding 'MetricFamily' has been deleted. The 'MetricFamily' object should be "
        "deleted AFTER its corresponding 'Metric' objects have been deleted.",
    }


def test_an_update_made_between_requests_is_flushed_without_one(server: Server) -> None:
    _refusals(f"127.0.0.1:{server.http_port}", value=2.0)  # starts a thread that sets the gauge later
    port = server.metrics_port or 0

    def background() -> float:
        samples = _custom(_scrape(port))["tcli_it_background"][1]
        return samples[("tcli_it_background", frozenset())]

    wait_until(lambda: background() == 42, "the background thread's gauge to reach /metrics")


def test_promtool_reads_the_forwarded_families(server: Server) -> None:
    _infer_counted(f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}")
    assert server.metrics_port is not None
    exposition = _scrape(server.metrics_port)
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=exposition.encode(), capture_output=True, timeout=60
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode in (0, 3), output  # 3: naming lints only (Triton's own names draw some)
    assert "tcli_it_" not in output, output


def test_real_triton_exports_and_refuses_the_same(repository: Path, server: Server) -> None:
    binary = require_reference_triton()
    try:
        with RealTriton(binary, repository) as triton:
            triton_seen = _infer_counted(triton.http_address, triton.grpc_address)
            triton_families = _custom(httpx.get(triton.metrics_url, timeout=30).text)
            triton_texts = _refusals(triton.http_address)
    except TritonStartError as exc:
        # real Triton 2.51 itself sometimes aborts loading these models (its python backend's
        # metric locks): nothing of tcli's to compare against then
        if "boost::interprocess::lock_exception" not in str(exc):
            raise
        pytest.skip("real Triton 2.51 aborted (boost::interprocess::lock_exception) loading the models")
    before = _custom(_scrape(server.metrics_port or 0))["tcli_it_calls"][1]
    tcli_seen = _infer_counted(f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}")
    tcli_families = _custom(_scrape(server.metrics_port or 0))
    assert triton_seen == [float(n) for n in range(1, REQUESTS + 1)]
    assert [n - tcli_seen[0] for n in tcli_seen] == [n - triton_seen[0] for n in triton_seen]
    # the same families, types and label sets; counts compared on real Triton's fresh server
    assert {name: (kind, set(samples)) for name, (kind, samples) in tcli_families.items()} == {
        name: (kind, set(samples)) for name, (kind, samples) in triton_families.items()
    }
    calls = triton_families["tcli_it_calls"][1]
    assert calls[("tcli_it_calls_total", frozenset({("model", "counted")}))] == REQUESTS
    assert calls[("tcli_it_calls_total", frozenset({("model", "counted"), ("event", "initialize")}))] == 2
    assert before[("tcli_it_calls_total", frozenset({("model", "counted"), ("event", "initialize")}))] == 2
    tcli_texts = _refusals(f"127.0.0.1:{server.http_port}")
    tcli_texts.pop("family deleted", None)  # not asked of Triton (see REFUSALS)
    instance = re.compile(
        r"for model '[^']*'"
    )  # Triton names instances <model>_<group>_<n>, tcli <model>_<n>
    assert {k: instance.sub("for model 'I'", v) for k, v in tcli_texts.items()} == {
        k: instance.sub("for model 'I'", v) for k, v in triton_texts.items()
    }


def test_an_unloaded_models_families_are_gone(server: Server) -> None:
    """Last in this module: it unloads the module's models."""
    assert server.metrics_port is not None
    port = server.metrics_port
    assert "tcli_it_calls" in _custom(_scrape(port))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    client.unload_model("counted")
    wait_until(lambda: "tcli_it_calls" not in _custom(_scrape(port)), "the unloaded model's families to go")
    assert set(_custom(_scrape(port))) == {"tcli_it_refusals", "tcli_it_refusal_sizes", "tcli_it_background"}
    client.unload_model("refusals")
    wait_until(lambda: not _custom(_scrape(port)), "every unloaded model's families to go")
