"""`tcli perf -m MODEL`: perf_analyzer's measurements with its flag names and its console output,
against any Triton-compatible server (tcli's or Triton itself), over HTTP or gRPC."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcli.errors import CliError

if TYPE_CHECKING:
    from tcli.perf.profiler import LevelResult, Settings, Window
    from tcli.perf.report import ReportContext

app = typer.Typer()

STABILITY_EXIT = 2  # perf_analyzer's exit code when a measurement does not stabilise
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


@app.command(no_args_is_help=True)
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
    shape: Annotated[
        list[str] | None,
        typer.Option("--shape", help="NAME:d1,d2,... for inputs with variable dimensions (no batch dim)."),
    ] = None,
    input_data: Annotated[
        str, typer.Option("--input-data", help="random, zero, or a JSON file in perf_analyzer's format.")
    ] = "random",
    string_length: Annotated[int, typer.Option("--string-length", help="Length of random strings.")] = 128,
    string_data: Annotated[
        str | None, typer.Option("--string-data", help="Use this string for every string element.")
    ] = None,
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
        bool, typer.Option("-v", help="Print every measurement window (Pass \\[n] ...).")
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

    info, server_has_stats, read_stats = _read_model(model_name, model_version, protocol.value, url)
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

    spec = _build_spec(
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
    _run(
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
    )


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


def _read_model(model: str, version: str, protocol: str, url: str | None) -> tuple[Any, bool, Any]:
    """The model's description, whether the server has the statistics extension, and a function that
    reads the statistics perf needs (the model's, or every model's for an ensemble)."""
    from tcli.client import connect
    from tcli.client.types import ClientError
    from tcli.perf.model import model_info
    from tcli.perf.stats import parse_statistics

    client = connect(url, protocol, timeout=30.0)
    try:
        try:
            server = client.server_metadata()
        except ClientError as exc:
            raise CliError(exc.message) from None
        try:
            metadata = client.model_metadata(model, version)
            config = client.model_config(model, version)
        except ClientError as exc:
            raise CliError(f"failed to get model metadata: {exc.message}") from None

        def fetch_config(name: str, step_version: str) -> dict[str, Any]:
            try:
                return client.model_config(name, step_version)
            except ClientError as exc:
                raise CliError(f"failed to get the config of ensemble step '{name}': {exc.message}") from None

        info = model_info(model, version, metadata, config, fetch_config)
    except BaseException:
        client.close()
        raise
    has_stats = "statistics" in (server.get("extensions") or [])
    if not has_stats:
        client.close()
        return info, False, None

    def read_stats() -> Any:
        try:
            answer = client.statistics() if info.ensemble else client.statistics(model, version)
        except ClientError as exc:
            raise CliError(f"failed to get the model's statistics: {exc.message}") from None
        return parse_statistics(answer)

    return info, True, read_stats


def _build_spec(
    info: Any,
    protocol: str,
    url: str | None,
    batch_size: int,
    shapes: list[str],
    input_data: str,
    string_length: int,
    string_data: str | None,
    headers: list[tuple[str, str]],
    streaming: bool,
    sequence_length: int | None,
    sequence_length_variation: float,
    id_start: int,
    id_end: int,
    num_of_sequences: int,
) -> Any:
    from tcli.perf.data import from_json_file, synthetic
    from tcli.perf.encode import build_load_spec
    from tcli.perf.model import resolve_shapes

    user_data = input_data not in ("random", "zero")
    resolved = resolve_shapes(info, shapes, allow_variable=user_data)
    if user_data:
        path = Path(input_data)
        if path.is_dir():
            raise CliError(
                f"--input-data '{input_data}' is a directory: tcli perf reads random, zero or a JSON file"
            )
        streams = from_json_file(path, info, resolved)
    else:
        streams = synthetic(info, resolved, input_data, string_length, string_data)
    spec = build_load_spec(
        info,
        streams,
        protocol=protocol,
        url=url,
        batch_size=batch_size,
        headers=headers,
        streaming=streaming,
        sequence_length=sequence_length or 20,
        sequence_length_variation=sequence_length_variation,
        sequence_length_given=sequence_length is not None,
        user_data=user_data,
        sequence_id_start=id_start,
        sequence_id_end=id_end,
        num_of_sequences=num_of_sequences,
    )
    import os

    spec.grpc_client = os.environ.get("TCLI_PERF_GRPC_CLIENT", "raw")  # "grpcio" to compare clients
    return spec


class _Progress:
    """Live progress on stderr (a terminal only), and perf_analyzer's -v window lines on stdout."""

    def __init__(self, context: ReportContext, text: bool, verbose: bool) -> None:
        from rich.console import Console

        self.context = context
        self.text = text
        self.verbose = verbose and text
        self.console = Console(stderr=True)
        self.live: Any = None
        self.label = ""
        self.windows: list[Window] = []
        self.trial = 0
        self.fraction = 0.0

    def __enter__(self) -> _Progress:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, transient=True, refresh_per_second=8)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def _refresh(self) -> None:
        if self.live is not None:
            from tcli import render

            self.live.update(
                render.perf_progress(
                    self.label,
                    self.trial,
                    self.context.settings.max_trials,
                    self.fraction,
                    self.windows,
                    self.context.settings.percentile,
                )
            )

    # Events
    def level_started(self, value: float) -> None:
        from tcli.perf.report import level_header

        self.label = level_header(self.context, value)
        self.windows = []
        self.trial = 0
        self.fraction = 0.0
        self._refresh()

    def window_progress(self, trial: int, elapsed: float, total: float) -> None:
        self.trial = trial
        self.fraction = elapsed / total if total else 1.0
        self._refresh()

    def window_done(self, trial: int, window: Window) -> None:
        self.windows.append(window)
        self.trial = trial + 1
        self.fraction = 0.0
        self._refresh()
        if self.verbose:
            percentile = self.context.settings.percentile
            if window.latency is None:
                _out(f"  Pass [{trial + 1}] cb::Error: No valid requests recorded within time interval.")
            elif percentile != -1:
                _out(
                    f"  Pass [{trial + 1}] throughput: {_num(window.infer_per_sec)} infer/sec. "
                    f"p{percentile} latency: {window.latency.percentiles_ns[percentile] // 1000} usec"
                )
            else:
                _out(
                    f"  Pass [{trial + 1}] throughput: {_num(window.infer_per_sec)} infer/sec. Avg latency: "
                    f"{window.latency.avg_ns // 1000} usec (std {window.latency.std_us} usec). "
                )


def _num(value: float) -> str:
    from tcli.perf.stats import cpp_double

    return cpp_double(value)


def _out(line: str = "") -> None:
    print(line, flush=True)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(
    info: Any,
    spec: Any,
    settings: Settings,
    context: ReportContext,
    read_stats: Any,
    load_levels: Any,
    filename: Path | None,
    plot: Path | None,
    output_format: Format,
    verbose: bool,
) -> None:
    from tcli.perf.profiler import Profiler
    from tcli.perf.report import BUSY_WARNING_PCT, level_header, level_lines, settings_lines

    text = output_format == Format.text
    if text:
        for line in settings_lines(context):
            _out(line)
    results: list[LevelResult] = []
    failure: str | None = None
    interrupted = False
    progress = _Progress(context, text, verbose)
    profiler = Profiler(spec, settings, read_stats, (info.name, info.version), info.composing, progress)
    try:
        with progress:
            profiler.start()
            for value in load_levels:
                if text:
                    _out(level_header(context, value))
                result = profiler.measure(value)
                for note in result.notes:
                    _err(note)
                if result.interrupted:
                    interrupted = True
                    if result.latency is not None:
                        results.append(result)
                        if text:
                            for line in level_lines(result, context):
                                _out(line)
                    break
                if not result.stable:
                    what = f"concurrency {int(value)}" if context.concurrency else f"request rate {value:g}"
                    if result.latency is None:
                        failure = "No valid requests recorded within time interval. Please use a larger time window."
                    else:
                        failure = (
                            f"Failed to obtain stable measurement within {settings.max_trials} measurement "
                            f"windows for {what}. Please try to increase the --measurement-interval."
                        )
                    break
                if settings.latency_threshold_ms and (
                    result.stabilizing_ns(settings.percentile) >= settings.latency_threshold_ms * 1_000_000
                ):
                    _err(
                        f"Measured latency went over the set limit of {settings.latency_threshold_ms} msec. "
                    )
                    break
                results.append(result)
                if text:
                    for line in level_lines(result, context):
                        _out(line)
                if result.busy_pct > BUSY_WARNING_PCT:
                    _err(
                        f"a load generator process used {result.busy_pct:.0f}% of a core at this level: the "
                        f"client may be the limit; try --processes {settings.processes + 1}"
                    )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        profiler.close()
    _finish(info, results, context, filename, plot, output_format)
    if interrupted:
        partial = [r for r in results if r.interrupted]
        detail = ""
        if partial:
            used = min(len(partial[0].windows), 3)
            detail = (
                f"; the last level was not yet stable and is reported from its last {used} of "
                f"{len(partial[0].windows)} window(s)"
            )
        _err(f"interrupted: stopped measuring{detail}")
        raise typer.Exit(INTERRUPTED_EXIT)
    if failure is not None:
        raise CliError(failure, STABILITY_EXIT)


def _finish(
    info: Any,
    results: list[LevelResult],
    context: ReportContext,
    filename: Path | None,
    plot: Path | None,
    output_format: Format,
) -> None:
    from tcli.perf.report import composing_csv_files, csv_text, report_json, summary_lines

    if output_format == Format.json:
        _out(
            json.dumps(
                report_json(info.name, info.version, results, context, context.settings.processes), indent=2
            )
        )
    elif results:
        for line in summary_lines(results, context):
            _out(line)
    if not results:
        return
    if filename is not None:
        content, warnings = csv_text(results, context)
        for warning in warnings:
            _err(warning)
        _write(filename, content, "-f")
        for path, extra in composing_csv_files(filename, results, context).items():
            _write(path, extra, "-f")
    if plot is not None:
        from tcli.perf.plot import write_plot

        write_plot(plot, results, info.name, context.concurrency)


def _write(path: Path, content: str, flag: str) -> None:
    try:
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{flag}: cannot write '{path}': {exc.strerror or exc}") from None
