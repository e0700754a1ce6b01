"""The response cache on a real server (`--cache-config local,size=...`), with real tritonclient HTTP
and gRPC clients: a hit never reaches the model (a python model counts its executions), what differs
misses, concurrent identical requests are all answered right, eviction is least-recently-used by bytes,
statistics and /metrics count as Triton's do, decoupled and sequence models are refused at load with
Triton's reason, ensembles cache their top-level response, mistaken flags stop `tcli serve` with one
line, and real perf_analyzer shows its cache lines against tcli."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from server.app import Server, ServerSettings
from server.scheduling.response_cache import ENTRY_OVERHEAD, TENSOR_OVERHEAD
from tests.reference import reference_dir

# the README's example model, as shipped: it counts its executions; COUNT is the count when the
# request ran (the same on a hit)
COUNTER_MODEL = (
    Path(__file__).resolve().parents[2] / "examples" / "cache_repository" / "counter" / "1" / "model.py"
).read_text()
COUNTER_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] }
]
version_policy: { all { } }
response_cache { enable: true }
"""
ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "N" data_type: TYPE_INT64 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "counter" model_version: 1
  input_map { key: "INPUT0" value: "X" }
  output_map [ { key: "OUTPUT0" value: "Y" }, { key: "COUNT" value: "N" } ]
} ] }
response_cache { enable: true }
"""
DECOUPLED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
response_cache { enable: true }
"""
SEQUENCE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "COUNT" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching { }
response_cache { enable: true }
"""
NOTHING_MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        return None
"""
TCLI = Path(sys.executable).parent / "tcli"


def _repository(root: Path) -> Path:
    repo = root / "models"
    for version in ("1", "2"):
        (repo / "counter" / version).mkdir(parents=True)
        (repo / "counter" / version / "model.py").write_text(COUNTER_MODEL)
    (repo / "counter" / "config.pbtxt").write_text(COUNTER_CONFIG)
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    for name, config, model in (
        ("dec", DECOUPLED_CONFIG, NOTHING_MODEL),
        ("seq", SEQUENCE_CONFIG, COUNTER_MODEL),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    return repo


def _server(repo: Path, cache_bytes: int) -> Server:
    settings = ServerSettings(
        [repo],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        response_cache_byte_size=cache_bytes,
    )
    return Server(settings).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = _server(_repository(tmp_path_factory.mktemp("cache")), 1 << 20)
    try:
        yield running
    finally:
        running.stop()


def _http(server: Server) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def _infer(
    server: Server, values: Any, version: str = "1", model: str = "counter", **parameters: Any
) -> tuple[np.ndarray[Any, Any], int]:
    """(OUTPUT0, COUNT) of one HTTP request; `values` shaped as the request's INPUT0."""
    data = np.asarray(values, dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0" if model == "counter" else "X", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    result = _http(server).infer(model, [tensor], model_version=version, parameters=parameters or None)
    output, count = ("OUTPUT0", "COUNT") if model == "counter" else ("Y", "N")
    return result.as_numpy(output), int(result.as_numpy(count).reshape(-1)[0])


def _stats(server: Server, model: str = "counter", version: str = "1") -> dict[str, Any]:
    (stats,) = _http(server).get_inference_statistics(model, version)["model_stats"]
    return dict(stats)


def test_a_hit_is_answered_without_running_the_model(server: Server) -> None:
    values = [[10.0, 20.0, 30.0]]
    before = _stats(server)
    output, count = _infer(server, values)
    again, count_again = _infer(server, values)
    assert count_again == count  # the model did not run again: its count is the stored one
    np.testing.assert_array_equal(again, output)
    np.testing.assert_array_equal(again, np.asarray(values, np.float32) * 2)
    after = _stats(server)
    assert after["execution_count"] == before["execution_count"] + 1
    assert after["inference_count"] == before["inference_count"] + 1  # a hit is no inference
    stats, old = after["inference_stats"], before["inference_stats"]
    assert stats["cache_hit"]["count"] == old["cache_hit"]["count"] + 1
    assert stats["cache_miss"]["count"] == old["cache_miss"]["count"] + 1
    assert stats["success"]["count"] == old["success"]["count"] + 2  # the hit is a success too
    assert stats["cache_hit"]["ns"] > old["cache_hit"]["ns"]
    _, next_count = _infer(server, [[11.0, 20.0, 30.0]])
    assert next_count == count + 1  # one execution happened in between: the miss's


@pytest.mark.parametrize(
    ("first", "second", "args"),
    [
        ([[1.0, 2.0, 3.0, 4.0]], [[1.0, 2.0, 3.0, 5.0]], {}),  # input bytes
        ([[1.0, 2.0, 3.0, 4.0]], [[1.0, 2.0], [3.0, 4.0]], {}),  # shape (same bytes)
        ([[5.0, 6.0]], [[5.0, 6.0]], {"mode": "fast"}),  # a request parameter
    ],
    ids=["bytes", "shape", "parameter"],
)
def test_requests_that_differ_miss(server: Server, first: Any, second: Any, args: dict[str, Any]) -> None:
    _, count = _infer(server, first)
    output, second_count = _infer(server, second, **args)
    assert second_count != count
    np.testing.assert_array_equal(output, np.asarray(second, np.float32) * 2)


def test_each_version_has_its_own_entries(server: Server) -> None:
    values = [[42.0, 43.0]]
    _, in_one = _infer(server, values, "1")
    misses_two = _stats(server, version="2")["inference_stats"]["cache_miss"]["count"]
    _, in_two = _infer(server, values, "2")
    assert _stats(server, version="2")["inference_stats"]["cache_miss"]["count"] == misses_two + 1
    assert _infer(server, values, "1")[1] == in_one and _infer(server, values, "2")[1] == in_two


def test_concurrent_identical_and_different_requests_are_all_answered_right(server: Server) -> None:
    def one(index: int) -> tuple[int, np.ndarray[Any, Any]]:
        values = [[float(index % 3), 7.0]]
        return index, _infer(server, values)[0]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(48)))
    for index, output in results:
        np.testing.assert_array_equal(output, np.array([[float(index % 3) * 2, 14.0]], np.float32))


def test_grpc_statistics_and_stream_use_the_cache(server: Server) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    answers: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    data = np.array([[3.5, 4.5]], np.float32)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    try:
        counts = []
        for _ in range(2):
            client.async_stream_infer("counter", [tensor], model_version="1")
            result = answers.get(timeout=60)
            assert not isinstance(result, Exception), result
            counts.append(int(result.as_numpy("COUNT")[0, 0]))
    finally:
        client.stop_stream()
    assert counts[0] == counts[1]
    assert _infer(server, data)[1] == counts[0]  # the same request over HTTP: the same entry
    unary = client.infer("counter", [tensor], model_version="1")
    assert int(unary.as_numpy("COUNT")[0, 0]) == counts[0]
    stats = client.get_inference_statistics("counter", "1", as_json=True)["model_stats"][0]["inference_stats"]
    http_stats = _stats(server)["inference_stats"]
    assert int(stats["cache_hit"]["count"]) == http_stats["cache_hit"]["count"] > 0
    assert int(stats["cache_miss"]["count"]) == http_stats["cache_miss"]["count"] > 0


def _metrics(server: Server) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # the parser names a counter's samples <family>_total
            found.setdefault(family.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_metrics_carry_tritons_cache_families(server: Server) -> None:
    _infer(server, [[8.0, 9.0]])
    _infer(server, [[8.0, 9.0]])
    metrics = _metrics(server)
    stats = _stats(server)["inference_stats"]
    labels = (("model", "counter"), ("version", "1"))
    assert metrics["nv_cache_num_hits_per_model"][labels] == stats["cache_hit"]["count"]
    assert metrics["nv_cache_num_misses_per_model"][labels] == stats["cache_miss"]["count"]
    assert metrics["nv_cache_hit_duration_per_model"][labels] == stats["cache_hit"]["ns"] // 1000
    assert metrics["nv_cache_miss_duration_per_model"][labels] == stats["cache_miss"]["ns"] // 1000
    assert 0 < metrics["nv_cache_util"][()] < 1
    assert metrics["nv_cache_num_entries"][()] > 0
    assert (
        metrics["nv_cache_num_lookups"][()]
        == metrics["nv_cache_num_hits"][()] + metrics["nv_cache_num_misses"][()]
    )


def test_the_ensemble_caches_its_top_level_response(server: Server) -> None:
    values = [[100.0, 200.0]]
    composing = _stats(server)["execution_count"]
    output, count = _infer(server, values, model="ens")
    assert _stats(server)["execution_count"] == composing + 1
    again, count_again = _infer(server, values, model="ens")
    assert count_again == count
    np.testing.assert_array_equal(again, output)
    assert _stats(server)["execution_count"] == composing + 1  # the hit never reached the step
    ensemble = _stats(server, "ens")["inference_stats"]
    assert ensemble["cache_hit"]["count"] >= 1 and ensemble["cache_miss"]["count"] >= 1


def test_decoupled_and_sequence_models_are_refused_at_load(server: Server) -> None:
    index = {row["name"]: row for row in _http(server).get_model_repository_index()}
    assert index["dec"]["state"] == "UNAVAILABLE"
    assert index["dec"]["reason"] == (
        "Invalid argument: Response Cache does not currently support model dec with 'decoupled' "
        "transaction policy. Please disable the response cache."
    )
    assert index["seq"]["reason"] == (
        "Invalid argument: Response Cache does not currently support model seq with sequence batching "
        "scheduler. Please disable the response cache."
    )


def test_eviction_is_least_recently_used_by_bytes(tmp_path: Path) -> None:
    # an entry: 256 floats and one int64 out, with the per-entry and per-tensor overheads
    entry = ENTRY_OVERHEAD + 2 * TENSOR_OVERHEAD + 256 * 4 + 8
    running = _server(_repository(tmp_path), 2 * entry + entry // 2)  # room for two entries
    try:
        a, b, c = ([[float(i)] * 256] for i in range(3))
        count_a, count_b = _infer(running, a)[1], _infer(running, b)[1]
        assert _infer(running, a)[1] == count_a  # a hit: a is now the most recently used
        _infer(running, c)  # evicts b, the least recently used
        assert _infer(running, a)[1] == count_a  # still held
        assert _infer(running, b)[1] > count_b  # evicted: the model ran again
        metrics = _metrics(running)
        assert metrics["nv_cache_num_evictions"][()] >= 1
        assert metrics["nv_cache_util"][()] <= 1
    finally:
        running.stop()


def test_without_a_cache_on_the_server_the_model_loads_and_runs_every_time(tmp_path: Path) -> None:
    running = _server(_repository(tmp_path), 0)
    try:
        counts = [_infer(running, [[1.0, 2.0]])[1] for _ in range(2)]
        assert counts[1] == counts[0] + 1
        stats = _stats(running)["inference_stats"]
        assert stats["cache_hit"]["count"] == stats["cache_miss"]["count"] == 0
        metrics = _metrics(running)
        assert metrics["nv_cache_num_hits_per_model"][(("model", "counter"), ("version", "1"))] == 0
        assert "nv_cache_util" not in metrics  # as Triton: no server-wide cache gauges without a cache
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cache-config", "local"], "No cache specified. --cache-config option format is"),
        (
            ["--cache-config=local,size=1", "--cache-config=redis,host=x"],
            "found multiple cache configurations",
        ),
        (["--response-cache-byte-size=8", "--cache-config=local,size=8"], "Incompatible flags"),
        (["--cache-config=local,size=big"], "the cache size must be a whole number of bytes above 0"),
    ],
)
def test_mistaken_cache_flags_stop_serve_with_one_line(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    done = subprocess.run(
        [str(TCLI), "serve", str(tmp_path), *flags], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_real_perf_analyzer_shows_its_cache_lines(server: Server, tmp_path: Path) -> None:
    analyzer = reference_dir() / "bin" / "perf_analyzer"
    if not (analyzer.is_file() and os.access(analyzer, os.X_OK)):
        pytest.skip(f"real perf_analyzer not installed: no {analyzer}")
    report = tmp_path / "pa.csv"
    done = subprocess.run(
        [
            str(analyzer),
            "-m",
            "counter",
            "-x",
            "1",
            "-u",
            f"127.0.0.1:{server.http_port}",
            "--shape",
            "INPUT0:4",
            "--request-count",
            "20",
            "--concurrency-range",
            "1",
            "-f",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.strip().split(":")[0]: line for line in done.stdout.splitlines() if ":" in line}
    assert "Cache hit count" in lines and "Cache miss count" in lines, done.stdout
    assert int(lines["Cache hit count"].split(":")[1]) > 0, done.stdout
    assert "Average Cache Hit Latency" in done.stdout
    header = report.read_text().splitlines()[0].split(",")
    assert "Server Cache Hit" in header and "Server Cache Miss" in header


def _observe(http_address: str, metrics_url: str) -> dict[str, Any]:
    """What a client sees of the cache after the same requests: counts in the statistics, and the
    HELP/TYPE lines of the nv_cache_* families."""
    client = httpclient.InferenceServerClient(http_address)

    def send(model: str, name: str, values: list[float]) -> None:
        data = np.array([values], np.float32)
        tensor = httpclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        client.infer(model, [tensor], model_version="1")

    for _ in range(2):
        send("counter", "INPUT0", [1.0, 2.0])
        send("ens", "X", [3.0, 4.0])  # other data than counter's own: keys differ between the two servers
    seen: dict[str, Any] = {}
    for model in ("counter", "ens"):
        (stats,) = client.get_inference_statistics(model, "1")["model_stats"]
        inference = stats["inference_stats"]
        seen[model] = {key: stats[key] for key in ("inference_count", "execution_count")}
        seen[model].update(
            {key: inference[key]["count"] for key in ("success", "queue", "cache_hit", "cache_miss")}
        )
    text = httpx.get(metrics_url).text
    seen["families"] = sorted(
        line for line in text.splitlines() if line.startswith(("# HELP nv_cache", "# TYPE nv_cache"))
    )
    return seen


@pytest.mark.reference
def test_statistics_and_metric_families_are_real_tritons(tmp_path: Path) -> None:
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    repo = _repository(tmp_path)
    for refused in ("dec", "seq"):  # real Triton's start-up would fail on them
        for path in sorted((repo / refused).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / refused).rmdir()
    with RealTriton(binary, repo, ["--cache-config=local,size=1048576"]) as triton:
        theirs = _observe(triton.http_address, triton.metrics_url)
    running = _server(repo, 1 << 20)
    try:
        ours = _observe(f"127.0.0.1:{running.http_port}", f"http://127.0.0.1:{running.metrics_port}/metrics")
    finally:
        running.stop()
    assert len(theirs["families"]) == 2 * 12  # four per-model families and eight server-wide gauges
    assert ours["families"] == theirs["families"]
    counter, ensemble = theirs["counter"], theirs["ens"]
    assert (counter["cache_hit"], counter["cache_miss"], ensemble["cache_hit"]) == (1, 2, 1)
    assert ours["counter"] == counter
    # an ensemble's inference and execution counts are not the cache's (tcli counts them its own way)
    for key in ("success", "queue", "cache_hit", "cache_miss"):
        assert ours["ens"][key] == ensemble[key], (ours, theirs)
