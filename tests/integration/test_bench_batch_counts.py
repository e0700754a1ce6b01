"""benchmarks/digits_batching.py's repository on the real server: digits_onnx with dynamic batching
beside add_sub loads, and the statistics counters the row's mean batch size comes from count every
request once and each executed batch once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from benchmarks import digits_batching
from benchmarks.observe import counts
from server.repository.manager import ControlMode
from tests.integration.conftest import start_server

REQUESTS = 16


def test_counts_over_concurrent_single_image_requests(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    digits_batching.add_models(repo)
    server = start_server(repo, ControlMode.NONE)
    try:
        client = httpclient.InferenceServerClient(server.url, concurrency=REQUESTS)
        assert client.is_model_ready(digits_batching.MODEL) and client.is_model_ready(
            digits_batching.REFERENCE
        )
        url = f"{server.base_url}/v2/models/{digits_batching.MODEL}/stats"
        before = counts(url)
        image = httpclient.InferInput("input", [1, 1, 8, 8], "FP32")
        image.set_data_from_numpy(np.zeros((1, 1, 8, 8), np.float32))
        pending = [client.async_infer(digits_batching.MODEL, [image]) for _ in range(REQUESTS)]
        for request in pending:
            assert request.get_result().as_numpy("probabilities").shape == (1, 10)
        counted = counts(url) - before
        client.close()
    finally:
        server.stop()
    assert counted.inferences == REQUESTS
    assert 1 <= counted.executions <= REQUESTS
    assert counted.mean_batch == REQUESTS / counted.executions
