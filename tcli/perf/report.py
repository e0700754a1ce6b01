"""perf_analyzer's output, line for line: the settings block, one Client/Server block per load level,
the `Inferences/Second vs. Client ... Batch Latency` summary, and the -f CSV (report_writer.cc);
plus the same results as JSON for `--format json`."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcli.perf.profiler import LevelResult, Settings
from tcli.perf.stats import (
    ServerStats,
    composing_csv_columns,
    cpp_double,
    csv_server_columns,
    server_breakdown,
)

DELAY_PCT_THRESHOLD = 1.0  # perf_analyzer: warn when more than 1% of the requests were sent late
BUSY_WARNING_PCT = 90.0  # a load generator process using more than this much of a core may be the limit


@dataclass
class ReportContext:
    protocol: str  # "http" | "grpc"
    settings: Settings
    range_end: float  # the --concurrency-range / --request-rate-range end as given (1 = not given)
    range_start: float
    latency_threshold_ms: int
    include_server: bool  # the server has the statistics extension
    sequence: bool
    decoupled: bool = False
    response_cache: bool = False

    @property
    def concurrency(self) -> bool:
        return self.settings.mode == "concurrency"


def settings_lines(context: ReportContext) -> list[str]:
    settings = context.settings
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {settings.batch_size}",
        "  Service Kind: TRITON",
        '  Using "time_windows" mode for stabilization',
    ]
    metric = "throughput" if settings.async_mode else "latency and throughput"
    if settings.percentile == -1:
        lines.append(f"  Stabilizing using average {metric}")
    else:
        lines.append(f"  Stabilizing using p{settings.percentile}{metric}")
    lines.append(f"  Measurement window: {settings.measurement_ms} msec")
    if context.range_end != 1:
        limit = max(context.range_start, context.range_end)
        lines.append(f"  Latency limit: {context.latency_threshold_ms} msec")
        if context.range_end != 0:
            if context.concurrency:
                lines.append(f"  Concurrency limit: {int(limit)} concurrent requests")
            else:
                lines.append(f"  Request Rate limit: {cpp_double(limit)} requests per seconds")
    if not context.concurrency:
        distribution = "poisson" if settings.poisson else "uniform"
        lines.append(f"  Using {distribution} distribution on request generation")
    lines.append(f"  Using {'asynchronous' if settings.async_mode else 'synchronous'} calls for inference")
    if context.decoupled:
        lines.append("  Detected decoupled model, using the first response for measuring latency")
    lines.append("")
    return lines


def level_header(context: ReportContext, value: float) -> str:
    if context.concurrency:
        return f"Request concurrency: {int(value)}"
    return f"Request Rate: {cpp_double(value)} inference requests per seconds"


def client_lines(result: LevelResult, context: ReportContext) -> list[str]:
    client = result.client
    latency = result.latency
    lines = ["  Client: ", f"    Request count: {client.request_count}"]
    if client.request_count and not context.concurrency:
        delayed_pct = 100.0 * client.delayed_count / client.request_count
        if delayed_pct > DELAY_PCT_THRESHOLD:
            lines.append(f"    Avg send request rate: {result.send_rate:.2f} infer/sec")
            lines.append(
                "    [WARNING] tcli perf was not able to keep up with the desired request rate. "
                f"{delayed_pct:.2f}% of the requests were delayed. "
            )
    if context.sequence:
        lines.append(
            f"    Sequence count: {client.sequence_count} ({cpp_double(client.sequence_per_sec)} seq/sec)"
        )
    lines.append(f"    Throughput: {cpp_double(client.infer_per_sec)} infer/sec")
    if latency is not None:
        if context.settings.percentile == -1:
            lines.append(
                f"    Avg latency: {latency.avg_ns // 1000} usec (standard deviation {latency.std_us} usec)"
            )
        for percentile, value in sorted(latency.percentiles_ns.items()):
            lines.append(f"    p{percentile} latency: {value // 1000} usec")
    request_us = client.avg_request_time_ns // 1000
    send_us = client.avg_send_time_ns // 1000
    receive_us = client.avg_receive_time_ns // 1000
    wait_us = request_us - send_us - receive_us
    if context.protocol == "grpc":
        lines.append(
            f"    Avg gRPC time: {request_us} usec ((un)marshal request/response {send_us + receive_us} usec"
            f" + response wait {wait_us} usec)"
        )
    else:
        lines.append(
            f"    Avg HTTP time: {request_us} usec (send/recv {send_us + receive_us} usec"
            f" + response wait {wait_us} usec)"
        )
    return lines


def server_lines(stats: ServerStats, context: ReportContext, iteration: int = 1) -> list[str]:
    """ReportServerSideStats: counts, the average request latency split, composing models nested."""
    ident = " " * (2 * iteration)
    if stats.success_count == 0:
        return [f"{ident}  Request count: 0"]
    lines = [
        f"{ident}  Inference count: {stats.inference_count}",
        f"{ident}  Execution count: {stats.execution_count}",
    ]
    if context.response_cache:
        lines.append(f"{ident}  Cache hit count: {stats.cache_hit_count}")
        lines.append(f"{ident}  Cache miss count: {stats.cache_miss_count}")
    lines.append(f"{ident}  Successful request count: {stats.success_count}")
    split = server_breakdown(stats)
    head = f"{ident}  Avg request latency: {split.request_us} usec"
    if stats.composing:
        lines.append(
            f"{head} (overhead {split.overhead_us} usec + queue {split.queue_us} usec + compute "
            f"{split.compute_us} usec)"
        )
        lines.append("")
        lines.append(f"{ident}Composing models: ")
        for (name, version), step in sorted(stats.composing.items()):
            lines.append(f"{ident}{name}, version: {version}")
            lines.extend(server_lines(step, context, iteration + 1))
        return lines
    lines.append(
        f"{head} (overhead {split.overhead_us} usec + queue {split.queue_us} usec + compute input "
        f"{split.compute_input_us} usec + compute infer {split.compute_infer_us} usec + compute output "
        f"{split.compute_output_us} usec)"
    )
    lines.append("")
    return lines


def level_lines(result: LevelResult, context: ReportContext) -> list[str]:
    lines = client_lines(result, context)
    if context.include_server and result.server is not None:
        lines.append("  Server: ")
        lines.extend(server_lines(result.server, context))
    if result.busy_pct > BUSY_WARNING_PCT:
        lines.append(
            "[WARNING] tcli perf is not able to keep up with the desired load. The results may not be accurate."
        )
    return lines


def summary_lines(results: Sequence[LevelResult], context: ReportContext) -> list[str]:
    percentile = context.settings.percentile
    title = "Average Batch Latency" if percentile == -1 else f"p{percentile} Batch Latency"
    lines = [f"Inferences/Second vs. Client {title}"]
    for result in results:
        label = (
            f"Concurrency: {int(result.value)}"
            if context.concurrency
            else f"Request Rate: {cpp_double(result.value)}"
        )
        unstable = " (not stable)" if not result.stable and not result.interrupted else ""
        lines.append(
            f"{label}, throughput: {cpp_double(result.client.infer_per_sec)} infer/sec, latency "
            f"{result.stabilizing_ns(percentile) // 1000} usec{unstable}"
        )
    return lines


# --- CSV ---------------------------------------------------------------------------------------------
def csv_text(results: Sequence[LevelResult], context: ReportContext) -> tuple[str, list[str]]:
    """The -f file (rows in increasing throughput, as perf_analyzer sorts them) and the warnings
    perf_analyzer prints to stderr while writing it."""
    warnings: list[str] = []
    out = io.StringIO()
    measured = [r for r in results if r.latency is not None]
    header = ["Concurrency" if context.concurrency else "Request Rate", "Inferences/Second", "Client Send"]
    if context.include_server:
        header += [
            "Network+Server Send/Recv",
            "Server Queue",
            "Server Compute Input",
            "Server Compute Infer",
            "Server Compute Output",
        ]
        if context.response_cache:
            header += ["Server Cache Hit", "Server Cache Miss"]
    header.append("Client Recv")
    percentiles = sorted(measured[0].latency.percentiles_ns) if measured and measured[0].latency else []
    header += [f"p{p} latency" for p in percentiles]
    out.write(",".join(header) + "\n")
    for result in sorted(measured, key=lambda r: r.client.infer_per_sec):
        assert result.latency is not None
        row = [_load_value(result, context), cpp_double(result.client.infer_per_sec)]
        row.append(str(result.client.avg_send_time_ns // 1000))
        if context.include_server:
            columns = csv_server_columns(result.server or ServerStats(), result.client, result.latency.avg_ns)
            if columns.network_misc_us == 0:
                warnings.append(
                    "Server average accounted time was larger than client average wait time due to small "
                    "sample size. Increase the measurement interval with `--measurement-interval`."
                )
            row += [
                str(columns.network_misc_us),
                str(columns.queue_us),
                str(columns.compute_input_us),
                str(columns.compute_infer_us),
                str(columns.compute_output_us),
            ]
            if context.response_cache:
                row += [str(columns.cache_hit_us), str(columns.cache_miss_us)]
        row.append(str(result.client.avg_receive_time_ns // 1000))
        row += [str(result.latency.percentiles_ns[p] // 1000) for p in percentiles]
        out.write(",".join(row) + "\n")
    return out.getvalue(), warnings


def composing_csv_files(
    path: Path, results: Sequence[LevelResult], context: ReportContext
) -> dict[Path, str]:
    """One `<name>_v<version>.<file>` per composing model of an ensemble, beside the -f file, in
    report_writer.cc's format (its header has no line break before the first row, as there)."""
    measured = sorted(
        (r for r in results if r.latency is not None and r.server is not None),
        key=lambda r: r.client.infer_per_sec,
    )
    if (
        not measured
        or not context.include_server
        or not measured[0].server
        or not measured[0].server.composing
    ):
        return {}
    files: dict[Path, str] = {}
    for name, version in sorted(measured[0].server.composing):
        text = ("Concurrency," if context.concurrency else "Request Rate,") + (
            "Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
            "Server Compute Input,Server Compute Infer,Server Compute Output,"
        )
        if context.response_cache:
            text += "Server Cache Hit,Server Cache Miss,"
        text += "Client Recv"
        for result in measured:
            assert result.server is not None
            stats = result.server.composing.get((name, version), ServerStats())
            columns = composing_csv_columns(stats)
            ratio = stats.success_count / result.server.success_count if result.server.success_count else 0.0
            text += (
                f"{_load_value(result, context)},{cpp_double(ratio * result.client.infer_per_sec)},0,"
                f"{columns.network_misc_us},{columns.queue_us},{columns.compute_input_us},"
                f"{columns.compute_infer_us},{columns.compute_output_us},"
            )
            if context.response_cache:
                text += f"{columns.cache_hit_us},{columns.cache_miss_us},"
            text += "0\n"
        files[path.with_name(f"{name}_v{version}.{path.name}")] = text
    return files


def _load_value(result: LevelResult, context: ReportContext) -> str:
    return str(int(result.value)) if context.concurrency else cpp_double(result.value)


# --- JSON ----------------------------------------------------------------------------------------------
def _server_json(stats: ServerStats) -> dict[str, Any]:
    split = server_breakdown(stats)
    data: dict[str, Any] = {
        "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
        "success_count": stats.success_count,
        "avg_request_latency_us": split.request_us,
        "overhead_us": split.overhead_us,
        "queue_us": split.queue_us,
    }
    if stats.composing:
        data["compute_us"] = split.compute_us
        data["composing_models"] = [
            {"name": name, "version": version, **_server_json(step)}
            for (name, version), step in sorted(stats.composing.items())
        ]
    else:
        data.update(
            compute_input_us=split.compute_input_us,
            compute_infer_us=split.compute_infer_us,
            compute_output_us=split.compute_output_us,
        )
    return data


def result_json(result: LevelResult, context: ReportContext) -> dict[str, Any]:
    client = result.client
    data: dict[str, Any] = {
        ("concurrency" if context.concurrency else "request_rate"): (
            int(result.value) if context.concurrency else result.value
        ),
        "stable": result.stable,
        "interrupted": result.interrupted,
        "request_count": client.request_count,
        "throughput_infer_per_sec": round(client.infer_per_sec, 3),
        "windows": len(result.windows),
    }
    if context.sequence:
        data["sequence_count"] = client.sequence_count
        data["sequences_per_sec"] = round(client.sequence_per_sec, 3)
    if result.latency is not None:
        latency: dict[str, Any] = {"avg": result.latency.avg_ns // 1000, "std": result.latency.std_us}
        latency.update({f"p{p}": v // 1000 for p, v in sorted(result.latency.percentiles_ns.items())})
        data["latency_us"] = latency
    data["client_us"] = {
        "request": client.avg_request_time_ns // 1000,
        "send": client.avg_send_time_ns // 1000,
        "receive": client.avg_receive_time_ns // 1000,
    }
    if context.include_server and result.server is not None:
        data["server"] = _server_json(result.server)
    data["load_generator_busy_pct"] = round(result.busy_pct, 1)
    return data


def report_json(
    model: str, version: str, results: Sequence[LevelResult], context: ReportContext, processes: int
) -> dict[str, Any]:
    settings = context.settings
    return {
        "model": model,
        "version": version,
        "protocol": context.protocol,
        "settings": {
            "mode": settings.mode,
            "batch_size": settings.batch_size,
            "measurement_interval_ms": settings.measurement_ms,
            "stability_percentage": round(settings.stability * 100, 6),
            "max_trials": settings.max_trials,
            "percentile": settings.percentile,
            "async": settings.async_mode,
            "load_generator_processes": processes,
        },
        "results": [result_json(r, context) for r in results],
    }


def csv_rows(text: str) -> list[dict[str, str]]:
    """The rows of a CSV written by csv_text (for tests and the plot)."""
    return list(csv.DictReader(io.StringIO(text)))
