"""A python model's own metrics (`pb_utils.MetricFamily`, Triton's python backend API) reach the
metrics port beside Triton's families: a counter and a gauge per label set, a histogram with its
buckets, sum and count, after real requests from tritonclient; the exposition parses with
prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from server.app import Server, ServerSettings

MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # the families live as long as their metrics (Triton's rule)
        self.families = [
            pb_utils.MetricFamily("tcli_it_calls", "Requests seen", pb_utils.MetricFamily.COUNTER),
            pb_utils.MetricFamily("tcli_it_last", "Last value", pb_utils.MetricFamily.GAUGE),
            pb_utils.MetricFamily("tcli_it_sizes", "Values seen", pb_utils.MetricFamily.HISTOGRAM),
        ]
        calls, last, sizes = self.families
        self.calls = calls.Metric(labels={"model": "metered", "kind": "all"})
        self.last = last.Metric(labels={"model": "metered"})
        self.sizes = sizes.Metric(labels={"model": "metered"}, buckets=[1.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            self.calls.increment(1)
            self.last.set(float(value[0]))
            self.sizes.observe(float(value[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""
CONFIG = """
name: "metered"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repository = tmp_path_factory.mktemp("custom_metrics") / "models"
    (repository / "metered" / "1").mkdir(parents=True)
    (repository / "metered" / "1" / "model.py").write_text(MODEL)
    (repository / "metered" / "config.pbtxt").write_text(CONFIG)
    settings = ServerSettings(
        [Path(repository)], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0, allow_grpc=False
    )
    running = Server(settings).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_models_counter_gauge_and_histogram_are_on_the_metrics_port(server: Server) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    for value in (0.5, 3.0, 7.0, 20.0):
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
        client.infer("metered", [tensor])
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert "# HELP tcli_it_calls Requests seen" in text and "# TYPE tcli_it_calls counter" in text
    assert 'tcli_it_calls{kind="all",model="metered"} 4.0' in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "nv_inference_count" in families  # Triton's own families are still there
    (last,) = families["tcli_it_last"].samples
    assert (last.labels, last.value) == ({"model": "metered"}, 20.0)
    sizes = {(s.name, s.labels.get("le")): s.value for s in families["tcli_it_sizes"].samples}
    assert sizes[("tcli_it_sizes_bucket", "1")] == 1
    assert sizes[("tcli_it_sizes_bucket", "10")] == 3
    assert sizes[("tcli_it_sizes_bucket", "+Inf")] == 4
    assert sizes[("tcli_it_sizes_count", None)] == 4
    assert sizes[("tcli_it_sizes_sum", None)] == pytest.approx(30.5)
