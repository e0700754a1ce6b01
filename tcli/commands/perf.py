"""`tcli perf -m MODEL`: perf_analyzer's measurements with its flag names and its console output,
against any Triton-compatible server (tcli's or Triton itself), over HTTP or gRPC."""

from __future__ import annotations

import enum
import importlib.util
from pathlib import Path
from typing import Annotated, Any

import typer

from tcli.commands.input_options import InputData, Shape, StringData, StringLength
from tcli.commands.tls_options import current_tls, with_tls
from tcli.errors import CliError, check_writable
from tcli.help import HelpCommand

app = typer.Typer(rich_markup_mode=None)

INTERRUPTED_EXIT = 130


class Protocol(enum.StrEnum):
    http = "http"
    grpc = "grpc"


class Distribution(enum.StrEnum):
    constant = "constant"
    poisson = "poisson"


class Format(enum.StrEnum):
    text = "text"
    json = "json"


def parse_range(text: str, flag: str, integer: bool) -> tuple[float, float, float]:
    """perf_analyzer's start[:end[:step]]; end defaults to 1 (one level: start), step to 1."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or any(p.strip() == "" for p in parts):
        raise CliError(f"{flag} '{text}' is not start[:end[:step]] (for example {flag} 1:8:1)")
    try:
        values = [int(p) if integer else float(p) for p in parts]
    except ValueError:
        kind = "whole numbers" if integer else "numbers"
        raise CliError(f"{flag} '{text}': start, end and step must be {kind}") from None
    start = values[0]
    end = values[1] if len(values) > 1 else 1
    step = values[2] if len(values) > 2 else 1
    if start <= 0 or end < 0 or step <= 0:
        raise CliError(f"{flag} '{text}': start and step must be more than 0, end 0 (no limit) or more")
    return float(start), float(end), float(step)


def levels(start: float, end: float, step: float) -> Any:
    """start, start + step, ... up to max(start, end); without end (0) until stopped."""
    value = start
    while end == 0 or value <= max(start, end) + 1e-9:
        yield value
        value += step


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise CliError(f"-H '{text}' is not 'name:value'")
    return name.strip(), value.strip()


@app.command(cls=HelpCommand, no_args_is_help=True)
@with_tls
def perf(
    model_name: Annotated[
        str, typer.Option("-m", help="The model to measure (required).", show_default=False)
    ],
    model_version: Annotated[str, typer.Option("-x", help="Model version (default: latest).")] = "",
    batch_size: Annotated[int, typer.Option("-b", help="Batch size of each request.")] = 1,
    concurrency_range: Annotated[
        str | None,
        typer.Option(
            "--concurrency-range",
            help="start[:end[:step]] requests in flight (default 1). end 0: until --latency-threshold.",
            show_default=False,
        ),
    ] = None,
    request_rate_range: Annotated[
        str | None,
        typer.Option(
            "--request-rate-range",
            help="start[:end[:step]] requests per second, sent on a schedule instead of a concurrency.",
            show_default=False,
        ),
    ] = None,
    request_distribution: Annotated[
        Distribution, typer.Option("--request-distribution", help="Intervals between scheduled requests.")
    ] = Distribution.constant,
    protocol: Annotated[Protocol, typer.Option("-i", help="http or grpc.")] = Protocol.http,
    url: Annotated[
        str | None,
        typer.Option("-u", help="Server address (default localhost:8000 for HTTP, localhost:8001 for gRPC)."),
    ] = None,
    async_mode: Annotated[
        bool,
        typer.Option(
            "--async",
            "-a",
            help="perf_analyzer's asynchronous mode: a level is stable on throughput alone. "
            "Default for sequence models.",
        ),
    ] = False,
    sync_mode: Annotated[
        bool, typer.Option("--sync", help="Force synchronous mode (sequence models too).")
    ] = False,
    streaming: Annotated[
        bool,
        typer.Option(
            "--streaming",
            help="gRPC only: send over ModelStreamInfer, one bidirectional stream per request in flight.",
        ),
    ] = False,
    shape: Shape = None,
    input_data: InputData = "random",
    string_length: StringLength = 128,
    string_data: StringData = None,
    measurement_interval: Annotated[
        int, typer.Option("--measurement-interval", "-p", help="Measurement window, in msec.")
    ] = 5000,
    stability_percentage: Annotated[
        float,
        typer.Option(
            "--stability-percentage",
            "-s",
            help="Stable when the last 3 windows' throughput (and latency) are within this many %.",
        ),
    ] = 10.0,
    max_trials: Annotated[int, typer.Option("--max-trials", "-r", help="Windows per level at most.")] = 10,
    percentile: Annotated[
        int,
        typer.Option("--percentile", help="Stabilise and report on this latency percentile (-1: average)."),
    ] = -1,
    latency_threshold: Annotated[
        int,
        typer.Option("--latency-threshold", "-l", help="Stop increasing the load above this latency (msec)."),
    ] = 0,
    sequence_length: Annotated[
        int | None,
        typer.Option(
            "--sequence-length",
            help="Requests per sequence, for sequence models (default 20).",
            show_default=False,
        ),
    ] = None,
    sequence_length_variation: Annotated[
        float, typer.Option("--sequence-length-variation", help="± this % around --sequence-length.")
    ] = 20.0,
    sequence_id_range: Annotated[
        str, typer.Option("--sequence-id-range", help="start[:end] of the correlation IDs (end excluded).")
    ] = "1",
    num_of_sequences: Annotated[
        int, typer.Option("--num-of-sequences", help="Live sequences in --request-rate-range mode.")
    ] = 4,
    headers: Annotated[
        list[str] | None, typer.Option("-H", help="Extra header 'name:value' (repeatable).")
    ] = None,
    filename: Annotated[
        Path | None,
        typer.Option("-f", help="Write perf_analyzer's CSV report to this file.", show_default=False),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Write a latency/throughput chart (PNG; needs matplotlib).", show_default=False
        ),
    ] = None,
    output_format: Annotated[
        Format, typer.Option("--format", help="text (perf_analyzer's output) or json.")
    ] = Format.text,
    verbose: Annotated[
        bool, typer.Option("-v", help="Print every measurement window (Pass [n] ...).")
    ] = False,
    strict_stability: Annotated[
        bool,
        typer.Option(
            "--strict-stability",
            help="Stop at the first level that does not become stable, with exit code 2, as perf_analyzer "
            "does (by default such a level is reported from its steadiest windows, with a warning).",
        ),
    ] = False,
    processes: Annotated[
        int,
        typer.Option(
            "--processes",
            help="Load generator processes (0: as many as the load needs, at most one per core).",
        ),
    ] = 0,
) -> None:
    """Measure throughput and latency the way perf_analyzer does: windows until three agree, then the
    client's latencies (average, p50/p90/p95/p99) and the server's split (queue, compute) from its
    statistics. Ctrl-C stops and reports what was measured."""
    from tcli.perf.prepare import build_spec, read_model
    from tcli.perf.profiler import Settings

    # flags -------------------------------------------------------------------------------------------
    if concurrency_range and request_rate_range:
        raise CliError("give --concurrency-range or --request-rate-range, not both")
    mode = "rate" if request_rate_range else "concurrency"
    start, end, step = (
        parse_range(request_rate_range, "--request-rate-range", integer=False)
        if request_rate_range
        else parse_range(concurrency_range or "1", "--concurrency-range", integer=True)
    )
    if end == 0 and latency_threshold == 0:
        raise CliError("an open range end (0) needs --latency-threshold to know when to stop")
    if batch_size < 1:
        raise CliError("-b must be 1 or more")
    if measurement_interval <= 0:
        raise CliError("--measurement-interval must be more than 0 msec")
    if stability_percentage <= 0:
        raise CliError("--stability-percentage must be more than 0")
    if max_trials < 3:
        raise CliError("--max-trials must be 3 or more: stability compares the last 3 windows")
    if percentile != -1 and not 1 <= percentile <= 99:
        raise CliError("--percentile must be between 1 and 99 (or -1 for the average)")
    if async_mode and sync_mode:
        raise CliError("give --async or --sync, not both")
    if streaming and protocol != Protocol.grpc:
        raise CliError("--streaming needs -i grpc")
    if streaming and sync_mode:
        raise CliError("can not use streaming with synchronous API (drop --sync)")
    extra_headers = [_header(h) for h in headers or []]
    id_start, id_end = _sequence_ids(sequence_id_range)
    # outputs are checked before measuring: a bad path found after minutes of work loses them
    if filename is not None:
        check_writable(filename, "-f")
    if plot is not None:
        check_writable(plot, "--plot")
        if importlib.util.find_spec("matplotlib") is None:
            raise CliError("--plot needs matplotlib: pip install 'tcli[plot]'")

    tls = current_tls()
    info, server_has_stats, read_stats = read_model(model_name, model_version, protocol.value, url, tls)
    if info.max_batch_size == 0 and batch_size > 1:
        raise CliError(
            f"can not specify batch size > 1 as the model does not support batching (model '{model_name}' "
            "has max_batch_size 0)"
        )
    if info.max_batch_size and batch_size > info.max_batch_size:
        raise CliError(
            f"-b {batch_size} is more than model '{model_name}' max_batch_size {info.max_batch_size}"
        )
    if info.sequence and batch_size > 1:
        raise CliError("can not specify batch size > 1 when using a sequence model")
    if info.decoupled:
        raise CliError(
            f"model '{model_name}' is decoupled (several responses per request): tcli perf measures one "
            "response per request; use perf_analyzer --async --streaming -i grpc for decoupled models"
        )
    async_effective = async_mode or streaming or (info.sequence and not sync_mode)
    if info.sequence and mode == "concurrency" and end == 0 and async_effective:
        raise CliError("The 'end' concurrency can not be 0 for sequence models when using asynchronous API.")
    if info.sequence and mode == "concurrency" and id_end and id_end - id_start < max(start, end):
        raise CliError(
            "sequence id range specified is smaller than the maximum possible concurrency, sequence id "
            "collision may occur."
        )

    spec = build_spec(
        info,
        protocol.value,
        url,
        batch_size,
        shape or [],
        input_data,
        string_length,
        string_data,
        extra_headers,
        streaming,
        sequence_length,
        sequence_length_variation,
        id_start,
        id_end,
        num_of_sequences,
        tls,
    )
    from tcli.perf.profiler import default_processes

    top = start if end == 0 else max(start, end)
    settings = Settings(
        mode=mode,
        measurement_ms=measurement_interval,
        stability=stability_percentage / 100.0,
        max_trials=max_trials,
        percentile=percentile,
        async_mode=async_effective,
        latency_threshold_ms=latency_threshold,
        batch_size=batch_size,
        poisson=request_distribution == Distribution.poisson,
        processes=processes if processes > 0 else default_processes(mode, top, protocol.value),
    )
    from tcli.perf.report import ReportContext

    context = ReportContext(
        protocol=protocol.value,
        settings=settings,
        range_end=end,
        range_start=start,
        latency_threshold_ms=latency_threshold,
        include_server=server_has_stats,
        sequence=info.sequence,
        decoupled=info.decoupled,
        response_cache=info.response_cache,
    )
    from tcli.perf.session import run

    interrupted = run(
        info,
        spec,
        settings,
        context,
        read_stats,
        levels(start, end, step),
        filename,
        plot,
        output_format,
        verbose,
        strict_stability,
    )
    if interrupted:
        raise typer.Exit(INTERRUPTED_EXIT)


def _sequence_ids(text: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        first = int(parts[0])
        last = int(parts[1]) if len(parts) > 1 and parts[1] else 0
    except ValueError:
        raise CliError(f"--sequence-id-range '{text}' is not start[:end] (whole numbers)") from None
    if len(parts) > 2 or first < 1 or (last and last <= first):
        raise CliError(
            f"--sequence-id-range '{text}': start must be 1 or more and end (if given) more than start"
        )
    return first, last
