"""tcli perf's arithmetic against perf_analyzer's: percentiles, the stability rule, window merging, the
server-side breakdown from statistics deltas (ensembles included), the CSV columns, and the parsing
of the flags and files that feed them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tcli.commands.perf import levels, parse_range
from tcli.errors import CliError
from tcli.perf.data import from_json_file
from tcli.perf.encode import split_url
from tcli.perf.grpc_messages import grpc_error, grpc_sequence_parameters
from tcli.perf.h2_client import grpc_header_block
from tcli.perf.model import InputSpec, ModelInfo, model_info, parse_shape_option, resolve_shapes
from tcli.perf.profiler import LevelResult, Settings, shares
from tcli.perf.report import ReportContext, csv_text, server_lines, summary_lines
from tcli.perf.stats import (
    ClientWindow,
    ServerStats,
    cpp_double,
    csv_server_columns,
    is_stable,
    mean_and_std,
    merge_client_windows,
    merge_server_stats,
    parse_statistics,
    percentile_index,
    server_breakdown,
    server_delta,
    summarize_latencies,
)


# --- latencies -------------------------------------------------------------------------------------------
def test_percentile_index_is_perf_analyzers_rounding() -> None:
    # index = (p / 100) * (n - 1) + 0.5, truncated
    assert percentile_index(50, 10) == 5  # 4.5 + 0.5
    assert percentile_index(90, 10) == 8  # 8.1 + 0.5
    assert percentile_index(99, 10) == 9
    assert percentile_index(50, 1) == 0
    assert percentile_index(95, 101) == 95


def test_summary_of_latencies() -> None:
    latencies = [1000 * v for v in range(1, 11)]  # 1..10 ms in ns
    summary = summarize_latencies(latencies)
    assert summary.avg_ns == 5500
    # sample standard deviation of 1..10 µs is 3.03 µs; perf_analyzer truncates to whole µs
    assert summary.std_us == 3
    assert summary.percentiles_ns == {50: 6000, 90: 9000, 95: 10000, 99: 10000}
    assert summary.stabilizing_ns(-1) == 5500 and summary.stabilizing_ns(90) == 9000


def test_extra_percentile_is_reported_too() -> None:
    summary = summarize_latencies(list(range(100, 200)), percentile=75)
    assert sorted(summary.percentiles_ns) == [50, 75, 90, 95, 99]
    assert summary.stabilizing_ns(75) == summary.percentiles_ns[75] == 174


def test_mean_and_std_integer_arithmetic() -> None:
    assert mean_and_std([1000, 2001]) == (1500, 0)  # sqrt(501001) / 1000 = 0.71 -> 0
    mean, std = mean_and_std([10_000, 30_000])
    assert mean == 20_000 and std == 14  # sqrt(2e8) / 1000 = 14.14 -> 14
    with pytest.raises(ValueError):
        mean_and_std([])


def test_windows_merge_by_summing() -> None:
    first = ClientWindow(1_000_000_000, [100, 300], completed_count=2, send_time_ns=20, request_time_ns=400)
    second = ClientWindow(
        2_000_000_000, [200], sequence_count=1, completed_count=1, send_time_ns=10, request_time_ns=200
    )
    merged = merge_client_windows([first, second])
    assert merged.latencies_ns == [100, 200, 300]
    assert merged.duration_ns == 3_000_000_000 and merged.request_count == 3
    assert merged.infer_per_sec == pytest.approx(1.0)
    assert merged.sequence_count == 1 and merged.sequence_per_sec == pytest.approx(1 / 3)
    assert merged.avg_send_time_ns == 10 and merged.avg_request_time_ns == 200
    batched = ClientWindow(500_000_000, [1, 2, 3], batch_size=4)
    assert batched.infer_per_sec == pytest.approx(24.0)  # requests x batch / seconds


# --- stability ----------------------------------------------------------------------------------------------
def test_stability_needs_three_windows_within_the_band() -> None:
    assert not is_stable([100, 100], [10, 10], 0.1)
    assert is_stable([100, 105, 109], [10, 10.5, 10.9], 0.1)  # max / min <= 1.1
    assert not is_stable([100, 105, 111], [10, 10, 10], 0.1)  # throughput 11% apart
    assert not is_stable([100, 100, 100], [10, 10, 11.5], 0.1)  # latency 15% apart
    assert is_stable([100, 100, 100], [10, 10, 11.5], 0.1, check_latency=False)  # async: throughput only
    assert is_stable([50, 500, 100, 101, 102], [1, 9, 5, 5, 5], 0.1)  # only the last three count


def test_a_window_without_requests_is_never_stable() -> None:
    assert not is_stable([100, 0, 100], [10, float("inf"), 10], 10.0)


# --- server statistics ----------------------------------------------------------------------------------
def _entry(
    name: str, version: str, count: int, queue: int, cin: int, cinf: int, cout: int, total: int
) -> dict:
    def d(c: int, ns: int) -> dict[str, int]:
        return {"count": c, "ns": ns}

    return {
        "name": name,
        "version": version,
        "inference_count": count,
        "execution_count": count,
        "inference_stats": {
            "success": d(count, total),
            "fail": d(0, 0),
            "queue": d(count, queue),
            "compute_input": d(count, cin),
            "compute_infer": d(count, cinf),
            "compute_output": d(count, cout),
            "cache_hit": d(0, 0),
            "cache_miss": d(0, 0),
        },
    }


def test_server_breakdown_from_a_delta() -> None:
    start = parse_statistics({"model_stats": [_entry("m", "1", 10, 1_000_000, 0, 0, 0, 5_000_000)]})
    end = parse_statistics(
        {"model_stats": [_entry("m", "1", 110, 3_000_000, 1_000_000, 20_000_000, 500_000, 30_000_000)]}
    )
    delta = server_delta(("m", ""), start, end)
    assert delta.success_count == 100 and delta.inference_count == 100
    split = server_breakdown(delta)
    # request 250 µs = queue 20 + compute input 10 + infer 200 + output 5 + overhead 15
    assert (split.request_us, split.queue_us) == (250, 20)
    assert (split.compute_input_us, split.compute_infer_us, split.compute_output_us) == (10, 200, 5)
    assert split.overhead_us == 15


def test_grpc_statistics_with_strings_parse_as_numbers() -> None:
    entry = _entry("m", "1", 3, 30, 3, 3, 3, 90)
    entry["inference_count"] = "3"
    entry["inference_stats"]["success"] = {"count": "3", "ns": "90"}
    stats = parse_statistics({"model_stats": [entry]})[("m", "1")]
    assert stats.inference_count == 3 and stats.cumm_time_ns == 90


def test_version_is_the_one_whose_queue_grew() -> None:
    start = parse_statistics(
        {"model_stats": [_entry("m", "1", 5, 5, 5, 5, 5, 5), _entry("m", "2", 5, 5, 5, 5, 5, 5)]}
    )
    end = parse_statistics(
        {"model_stats": [_entry("m", "1", 5, 5, 5, 5, 5, 5), _entry("m", "2", 9, 9, 9, 9, 9, 9)]}
    )
    assert server_delta(("m", ""), start, end).success_count == 4
    assert server_delta(("m", "1"), start, end).success_count == 0


def test_ensemble_sums_its_steps() -> None:
    ensemble = _entry("e", "1", 100, 0, 0, 40_000_000, 0, 40_000_000)
    pre = _entry("pre", "1", 100, 2_000_000, 0, 10_000_000, 0, 12_500_000)
    net = _entry("net", "3", 100, 5_000_000, 1_000_000, 15_000_000, 1_000_000, 22_000_000)
    end = parse_statistics({"model_stats": [ensemble, pre, net]})
    delta = server_delta(("e", ""), {}, end, {"e": [("pre", ""), ("net", "")]})
    assert set(delta.composing) == {("pre", "1"), ("net", "3")}
    split = server_breakdown(delta)
    # queue: 20 + 50 µs; compute: 100 + 170 µs; request 400 µs
    assert (split.request_us, split.queue_us, split.compute_us, split.overhead_us) == (400, 70, 270, 60)
    merged = merge_server_stats([delta, delta])
    assert merged.success_count == 200 and merged.composing[("net", "3")].success_count == 200

    context = _context()
    lines = server_lines(delta, context)
    assert (
        lines[3] == "    Avg request latency: 400 usec (overhead 60 usec + queue 70 usec + compute 270 usec)"
    )
    assert lines[4:7] == ["", "  Composing models: ", "  net, version: 3"]
    assert lines[7] == "      Inference count: 100"


def test_csv_network_column_is_the_unaccounted_client_wait() -> None:
    stats = ServerStats(success_count=10, queue_count=10, queue_time_ns=200_000, compute_input_count=10)
    stats.compute_infer_count = stats.compute_output_count = 10
    stats.compute_input_time_ns, stats.compute_infer_time_ns, stats.compute_output_time_ns = (
        100_000,
        1_000_000,
        50_000,
    )
    client = ClientWindow(1, [500_000], completed_count=10, send_time_ns=300_000, receive_time_ns=100_000)
    columns = csv_server_columns(stats, client, avg_latency_ns=500_000)
    # wait 500 - 30 - 10 = 460 µs; accounted: queue 20 + compute 115 -> network 325 µs
    assert columns.network_misc_us == 325
    assert (
        columns.queue_us,
        columns.compute_input_us,
        columns.compute_infer_us,
        columns.compute_output_us,
    ) == (
        20,
        10,
        100,
        5,
    )
    assert csv_server_columns(stats, client, avg_latency_ns=50_000).network_misc_us == 0  # capped at 0


# --- reports ----------------------------------------------------------------------------------------------
def _context(mode: str = "concurrency", percentile: int = -1) -> ReportContext:
    return ReportContext(
        protocol="http",
        settings=Settings(mode=mode, percentile=percentile),
        range_end=1,
        range_start=1,
        latency_threshold_ms=0,
        include_server=True,
        sequence=False,
    )


def _level(value: float, latencies: list[int], seconds: float) -> LevelResult:
    client = ClientWindow(int(seconds * 1e9), latencies, completed_count=len(latencies))
    stats = ServerStats(success_count=len(latencies), queue_count=len(latencies))
    return LevelResult(value, client, summarize_latencies(latencies), stats)


def test_summary_lines_and_csv_rows_sorted_by_throughput() -> None:
    results = [_level(1, [300_000] * 10, 1.0), _level(2, [700_000] * 15, 1.0), _level(3, [900_000] * 12, 1.0)]
    context = _context()
    assert summary_lines(results, context) == [
        "Inferences/Second vs. Client Average Batch Latency",
        "Concurrency: 1, throughput: 10 infer/sec, latency 300 usec",
        "Concurrency: 2, throughput: 15 infer/sec, latency 700 usec",
        "Concurrency: 3, throughput: 12 infer/sec, latency 900 usec",
    ]
    text, _ = csv_text(results, context)
    rows = text.splitlines()
    assert rows[0].startswith("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,")
    assert [row.split(",")[0] for row in rows[1:]] == ["1", "3", "2"]


def test_cpp_double_prints_like_an_ostream() -> None:
    assert cpp_double(2192.2612) == "2192.26"
    assert cpp_double(199.8192) == "199.819"
    assert cpp_double(200.0) == "200"
    assert cpp_double(0.5) == "0.5"
    assert cpp_double(1234567.0) == "1.23457e+06"


# --- flags, models, data ----------------------------------------------------------------------------------
def test_ranges_as_perf_analyzer_reads_them() -> None:
    assert parse_range("4", "--concurrency-range", True) == (4, 1, 1)  # end defaults to 1: one level
    assert list(levels(4, 1, 1)) == [4]
    assert list(levels(*parse_range("1:8:2", "--concurrency-range", True))) == [1, 3, 5, 7]
    assert list(levels(*parse_range("100:300:100", "--request-rate-range", False))) == [100, 200, 300]
    with pytest.raises(CliError):
        parse_range("0:4", "--concurrency-range", True)
    with pytest.raises(CliError):
        parse_range("1.5", "--concurrency-range", True)
    assert shares(7, 3, whole=True) == [3, 2, 2] and shares(90.0, 3, whole=False) == [30.0] * 3


def test_shapes() -> None:
    assert parse_shape_option("INPUT0:1,16") == ("INPUT0", [1, 16])
    assert parse_shape_option("a:b:3") == ("a:b", [3])
    for bad in ("INPUT0", "INPUT0:", "INPUT0:x", ":3", "INPUT0:-2"):
        with pytest.raises(CliError):
            parse_shape_option(bad)
    info = ModelInfo("m", "", 8, [InputSpec("A", "FP32", [-1, 4]), InputSpec("B", "INT32", [2])], [])
    assert resolve_shapes(info, ["A:3,4"]) == {"A": [3, 4], "B": [2]}
    with pytest.raises(CliError, match="variable shape"):
        resolve_shapes(info, [])
    with pytest.raises(CliError, match="does not fit"):
        resolve_shapes(info, ["A:3,5"])


def test_model_info_from_metadata_and_config() -> None:
    metadata = {
        "inputs": [{"name": "RAW", "datatype": "UINT8", "shape": [-1, 8, 8]}],
        "outputs": [{"name": "P", "datatype": "FP32", "shape": [-1, 10]}],
    }
    config = {
        "max_batch_size": 64,
        "platform": "ensemble",
        "ensemble_scheduling": {
            "step": [{"model_name": "pre", "model_version": -1}, {"model_name": "seq", "model_version": 2}]
        },
    }
    steps = {"pre": {"max_batch_size": 64}, "seq": {"sequence_batching": {}}}
    info = model_info("e", "", metadata, config, lambda name, version: steps[name])
    assert info.inputs[0].dims == [8, 8] and info.outputs == ["P"]
    assert info.ensemble and info.sequence  # a sequence model inside makes the ensemble a sequence one
    assert info.composing == {"e": [("pre", ""), ("seq", "2")]}


def test_json_input_data(tmp_path: Path) -> None:
    info = ModelInfo("m", "", 0, [InputSpec("X", "INT32", [2]), InputSpec("S", "BYTES", [-1])], [])
    data = tmp_path / "data.json"
    data.write_text(
        json.dumps(
            {"data": [{"X": [1, 2], "S": {"content": ["ab", "c"], "shape": [2]}}, {"X": [3, 4], "S": ["z"]}]}
        )
    )
    with pytest.raises(CliError, match="variable shape"):
        from_json_file(data, info, resolve_shapes(info, [], allow_variable=True))
    (stream,) = from_json_file(data, info, resolve_shapes(info, ["S:1"], allow_variable=True))
    assert stream[0]["X"].raw == (1).to_bytes(4, "little") + (2).to_bytes(4, "little")
    assert stream[0]["S"].shape == (2,) and stream[0]["S"].raw == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert stream[1]["S"].shape == (1,)
    data.write_text(json.dumps({"data": [{"X": [1, 2, 3]}]}))
    with pytest.raises(CliError, match="expected 2"):
        from_json_file(data, info, {"X": [2], "S": [1]})


def test_urls() -> None:
    assert split_url(None, "http") == ("localhost", 8000)
    assert split_url(None, "grpc") == ("localhost", 8001)
    assert split_url("http://10.0.0.1:9000/", "http") == ("10.0.0.1", 9000)
    assert split_url("myhost", "grpc") == ("myhost", 8001)


# --- the load generator's wire bytes ----------------------------------------------------------------------
def test_sequence_parameters_merge_into_a_serialized_request() -> None:
    from tritonclient.grpc import service_pb2

    base = service_pb2.ModelInferRequest(model_name="seq")
    base.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    wire = base.SerializeToString() + grpc_sequence_parameters(2**40 + 7, True, False)
    request = service_pb2.ModelInferRequest.FromString(wire)
    assert request.model_name == "seq" and request.inputs[0].name == "INPUT"
    assert request.parameters["sequence_id"].int64_param == 2**40 + 7
    assert request.parameters["sequence_start"].bool_param is True
    assert request.parameters["sequence_end"].bool_param is False


def test_stream_error_message_is_read_from_the_wire() -> None:
    from tritonclient.grpc import service_pb2

    failed = service_pb2.ModelStreamInferResponse(error_message="x" * 300).SerializeToString()
    assert grpc_error(failed) == "x" * 300
    fine = service_pb2.ModelStreamInferResponse(
        infer_response=service_pb2.ModelInferResponse(model_name="m")
    ).SerializeToString()
    assert grpc_error(fine) is None


def test_hpack_block_uses_literals_only() -> None:
    block = grpc_header_block("/inference.GRPCInferenceService/ModelInfer", "localhost:8001", [("x-id", "7")])
    assert block.startswith(b"\x83\x86\x04\x2a/inference.GRPCInferenceService/ModelInfer")
    assert b"\x01\x0elocalhost:8001" in block and b"\x0f\x10\x10application/grpc" in block
    assert block.endswith(b"\x00\x02te\x08trailers\x00\x04x-id\x017")
