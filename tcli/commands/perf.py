"""`tcli perf -m MODEL`: perf_analyzer's measurements with its flag names and its console output,
against any Triton-compatible server (tcli's or Triton itself), over HTTP or gRPC."""

from __future__ import annotations

import enum
import importlib.util
from dataclasses import dataclass
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


LLM_PANEL = "Language models (GenAI-Perf's and AIPerf's options)"


class ServiceKind(enum.StrEnum):
    triton = "triton"
    openai = "openai"


class EndpointType(enum.StrEnum):
    chat = "chat"
    completions = "completions"
    kserve = "kserve"


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
            "--concurrency",
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
    service_kind: Annotated[
        ServiceKind,
        typer.Option(
            "--service-kind",
            help="triton, or openai: an OpenAI-compatible endpoint measured as GenAI-Perf/AIPerf do "
            "(-u its base URL, default http://localhost:9000).",
            rich_help_panel=LLM_PANEL,
        ),
    ] = ServiceKind.triton,
    endpoint_type: Annotated[
        EndpointType | None,
        typer.Option(
            "--endpoint-type",
            help="chat or completions (openai, default chat); kserve: a decoupled Triton model in Triton's "
            "LLM conventions over gRPC streaming (the default for a decoupled model).",
            show_default=False,
            rich_help_panel=LLM_PANEL,
        ),
    ] = None,
    request_count: Annotated[
        int,
        typer.Option(
            "--request-count",
            min=0,
            help="Requests measured per concurrency level (0: ten per request in flight).",
            rich_help_panel=LLM_PANEL,
        ),
    ] = 0,
    warmup_request_count: Annotated[
        int,
        typer.Option(
            "--warmup-request-count",
            min=0,
            help="Requests sent first, not measured.",
            rich_help_panel=LLM_PANEL,
        ),
    ] = 0,
    input_tokens_mean: Annotated[
        int,
        typer.Option(
            "--synthetic-input-tokens-mean",
            min=1,
            help="Prompt length, in tokens.",
            rich_help_panel=LLM_PANEL,
        ),
    ] = 550,
    input_tokens_stddev: Annotated[
        int,
        typer.Option("--synthetic-input-tokens-stddev", min=0, help="Its spread.", rich_help_panel=LLM_PANEL),
    ] = 0,
    output_tokens_mean: Annotated[
        int | None,
        typer.Option(
            "--output-tokens-mean",
            min=1,
            help="max_tokens of each request (default: the model's own).",
            show_default=False,
            rich_help_panel=LLM_PANEL,
        ),
    ] = None,
    extra_inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--extra-inputs",
            help="name:value added to each request (its body, or sampling_parameters), e.g. ignore_eos:true "
            "(repeatable).",
            show_default=False,
            rich_help_panel=LLM_PANEL,
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="A local tokenizer folder: prompts and outputs counted in its tokens (needs transformers); "
            "without it a word of the prompt and a streamed response count as one token.",
            show_default=False,
            rich_help_panel=LLM_PANEL,
        ),
    ] = None,
    random_seed: Annotated[
        int, typer.Option("--random-seed", help="Seed of the synthetic prompts.", rich_help_panel=LLM_PANEL)
    ] = 0,
    use_server_token_count: Annotated[
        bool,
        typer.Option(
            "--use-server-token-count",
            help="Count tokens as the server does (OpenAI: usage; Triton: num_input_tokens and "
            "num_output_tokens when the model has them).",
            rich_help_panel=LLM_PANEL,
        ),
    ] = False,
) -> None:
    """Measure throughput and latency the way perf_analyzer does: windows until three agree, then the
    client's latencies (average, p50/p90/p95/p99) and the server's split (queue, compute) from its
    statistics. Ctrl-C stops and reports what was measured.

    Language models (--service-kind openai, or a decoupled Triton model) are measured as GenAI-Perf
    and AIPerf do: time to first token, inter-token latency, output tokens per second and request
    throughput, at each concurrency level.
    """
    from tcli.perf.prepare import build_spec, read_model
    from tcli.perf.profiler import Settings

    llm = LlmFlags(
        service_kind.value,
        endpoint_type.value if endpoint_type is not None else None,
        request_count,
        warmup_request_count,
        input_tokens_mean,
        input_tokens_stddev,
        output_tokens_mean,
        [_extra_input(text) for text in extra_inputs or []],
        tokenizer,
        random_seed,
        use_server_token_count,
    )
    if service_kind == ServiceKind.openai:
        _measure_llm(llm, model_name, model_version, None, url, concurrency_range, output_format, filename)
        return
    if endpoint_type not in (None, EndpointType.kserve):
        raise CliError(f"--endpoint-type {endpoint_type.value} needs --service-kind openai")

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
        if protocol != Protocol.grpc:
            raise CliError(
                f"model '{model_name}' is decoupled (several responses per request): measure it over gRPC "
                "streaming, -i grpc"
            )
        _measure_llm(llm, model_name, model_version, info, url, concurrency_range, output_format, filename)
        return
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


@dataclass(frozen=True)
class LlmFlags:
    service_kind: str
    endpoint_type: str | None
    request_count: int
    warmup_request_count: int
    input_tokens_mean: int
    input_tokens_stddev: int
    output_tokens_mean: int | None
    extra_inputs: list[tuple[str, Any]]
    tokenizer: str | None
    random_seed: int
    server_token_count: bool


def _extra_input(text: str) -> tuple[str, Any]:
    """name:value; the value read as JSON when it is (true, 3, 0.5, "x"), else as the string."""
    import json

    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise CliError(f"--extra-inputs '{text}' is not name:value (for example ignore_eos:true)")
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value


def _measure_llm(
    flags: LlmFlags,
    model_name: str,
    model_version: str,
    info: Any,
    url: str | None,
    concurrency_range: str | None,
    output_format: Format,
    filename: Path | None,
) -> None:
    """GenAI-Perf's measurement of a language model: an OpenAI endpoint (info None) or a decoupled
    Triton model in Triton's LLM conventions over gRPC streaming."""
    from tcli.perf.llm.clients import GenerationSettings
    from tcli.perf.llm.runner import Target
    from tcli.perf.llm.session import run

    start, end, step = parse_range(concurrency_range or "1", "--concurrency-range", integer=True)
    if end == 0:
        raise CliError("a language model's --concurrency-range needs an end (no --latency-threshold search)")
    if flags.tokenizer is not None and importlib.util.find_spec("transformers") is None:
        raise CliError("--tokenizer needs transformers: pip install 'tcli[llm]'")
    if filename is not None:
        check_writable(filename, "-f")
    if info is None:
        endpoint = flags.endpoint_type or "chat"
        base = url or "http://localhost:9000"
        if "://" not in base:
            base = "http://" + base
        target = Target("openai", base.rstrip("/"), endpoint, streaming=True)
    else:
        names = {spec.name: spec.datatype for spec in info.inputs}
        if names.get("text_input") != "BYTES" or "text_output" not in info.outputs:
            raise CliError(
                f"model '{model_name}' is decoupled but does not follow Triton's LLM conventions (a BYTES "
                "input text_input, an output text_output): tcli perf measures decoupled models as "
                "language models only"
            )
        target = Target(
            "triton",
            url or "localhost:8001",
            "kserve",
            streaming=True,
            model_version=model_version,
            inputs=frozenset(names),
            batched=info.max_batch_size > 0,
        )
    settings = GenerationSettings(
        model_name, flags.output_tokens_mean, dict(flags.extra_inputs), flags.server_token_count
    )
    run(
        target,
        settings,
        [int(level) for level in levels(start, end, step)],
        flags.request_count,
        flags.warmup_request_count,
        flags.input_tokens_mean,
        flags.input_tokens_stddev,
        flags.tokenizer,
        flags.random_seed,
        output_format.value,
        filename,
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
