"""`tcli serve` (also installed as `tritonserver`): a Triton-compatible server on model repositories,
with tritonserver 2.51's whole command line. The flags it implements are options here; every other
tritonserver flag is accepted with a warning, or refused with the reason (tcli/serve_flags.py).

Long: the command is one Typer function whose parameters are tritonserver's command line (and the
OpenAI front end's group beside it); Typer reads options from one signature, so the options stay
together here and what they are turned into lives in server/ (settings, parsers of each flag)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcli.errors import CliError
from tcli.help import grouped

if TYPE_CHECKING:
    from server.app import Server, ServerSettings
    from server.scheduling.latency_summary import MetricsConfig

app = typer.Typer(rich_markup_mode=None)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
# tritonserver's other flags arrive as extra arguments, read against tcli/serve_flags.py
_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def _flag(name: str, value: str) -> bool:
    """tritonserver's boolean options take a value (--strict-readiness=false); accept the same."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise CliError(f"--{name} expects true or false, got '{value}'")


class Mode(enum.StrEnum):
    none = "none"
    poll = "poll"
    explicit = "explicit"


class GrpcImplementation(enum.StrEnum):
    native = "native"
    grpcio = "grpcio"


class LogFormat(enum.StrEnum):
    default = "default"
    ISO8601 = "ISO8601"


def _group(name: str) -> str | None:
    """The heading `tcli serve --help` lists an option under (None: the general "Options", where
    --help and the shell-completion options go)."""
    if name in ("install_completion", "show_completion"):
        return None
    if name.startswith(("http_", "allow_http")) or name == "reuse_http_port":
        return "HTTP front end"
    if name.startswith(("grpc_", "allow_grpc")) or name == "reuse_grpc_port":
        return "gRPC front end"
    if name.startswith("openai_"):
        return "OpenAI front end"
    if name.startswith(("metrics_", "allow_metrics", "allow_cpu_metrics")):
        return "Metrics"
    if name.startswith(("log_", "trace_")):
        return "Logging and tracing"
    if name.startswith(
        ("rate_limit", "cache_", "response_cache", "backend_", "repoagent_", "allow_client_shm")
    ):
        return "Backends, scheduling and caching"
    return "Models and repositories"


@app.command(cls=grouped(_group), context_settings=_EXTRA)
def serve(
    ctx: typer.Context,
    repositories: Annotated[
        list[str] | None,
        typer.Argument(
            help="Model repositories: folders or s3:// gs:// as:// paths (default: ./model_repository).",
            show_default=False,
        ),
    ] = None,
    model_repository: Annotated[
        list[str] | None,
        typer.Option(
            "--model-repository",
            "--model-store",
            help="Model repository (repeatable), as tritonserver takes it: a folder, s3://, gs:// or as://.",
        ),
    ] = None,
    id: Annotated[str, typer.Option("--id", help="The server's name in its metadata.")] = "triton",
    model_control_mode: Annotated[
        Mode,
        typer.Option(help="none: load all at start; poll: reload on changes; explicit: load/unload API."),
    ] = Mode.none,
    repository_poll_secs: Annotated[
        float, typer.Option(help="Poll interval in poll mode (local file events trigger sooner).")
    ] = 15.0,
    load_model: Annotated[
        list[str] | None,
        typer.Option("--load-model", help="Explicit mode: model to load at start ('*' for all; repeatable)."),
    ] = None,
    strict_readiness: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="true: /v2/health/ready only when every model is ready.")
    ] = "true",
    exit_on_error: Annotated[
        str,
        typer.Option(
            metavar="BOOLEAN",
            help="true: exit when a model or repository fails at start-up (Triton's default); false: serve the rest.",
        ),
    ] = "true",
    exit_timeout_secs: Annotated[
        float, typer.Option(help="On SIGINT/SIGTERM, wait this long for in-flight requests.")
    ] = 30.0,
    disable_auto_complete_config: Annotated[
        bool,
        typer.Option("--disable-auto-complete-config", help="Configs must be complete as written."),
    ] = False,
    strict_model_config: Annotated[
        str | None,
        typer.Option(metavar="BOOLEAN", help="Deprecated in Triton: true is --disable-auto-complete-config."),
    ] = None,
    model_config_name: Annotated[
        str, typer.Option(help="Load configs/<name>.pbtxt instead of config.pbtxt where a model has it.")
    ] = "",
    model_load_thread_count: Annotated[int, typer.Option(help="Models loaded side by side at start.")] = 4,
    model_load_retry_count: Annotated[int, typer.Option(help="Retries of a model that fails to load.")] = 0,
    allow_http: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="Serve HTTP/REST (KServe v2 and Triton's extensions).")
    ] = "true",
    http_address: Annotated[str, typer.Option(help="Address the HTTP front end listens on.")] = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="HTTP port (0: any free port).")] = 8000,
    reuse_http_port: Annotated[
        str,
        typer.Option(metavar="BOOLEAN", help="Let several servers listen on the HTTP port (SO_REUSEPORT)."),
    ] = "false",
    http_max_input_size: Annotated[int, typer.Option(help="Largest request body in bytes.")] = 64 * 2**20,
    http_restricted_api: Annotated[
        list[str] | None,
        typer.Option(
            help="<api>[,<api>...]:<header>=<value> (repeatable): those APIs answer 403 without the header. "
            "APIs: health, metadata, inference, shared-memory, model-config, model-repository, statistics, "
            "trace, logging."
        ),
    ] = None,
    http_header_forward_pattern: Annotated[
        str, typer.Option(help="Regex: inference request headers it matches reach the model as parameters.")
    ] = "",
    http_header_timeout: Annotated[
        float, typer.Option(help="Seconds a request head may take to arrive; then 408 and close.")
    ] = 30.0,
    http_body_timeout: Annotated[
        float, typer.Option(help="Seconds a request body may go without a byte; then 408 and close.")
    ] = 60.0,
    http_keepalive_timeout: Annotated[
        float, typer.Option(help="Seconds an idle keep-alive connection stays open.")
    ] = 75.0,
    http_max_connections: Annotated[
        int, typer.Option(help="HTTP connections served at once; the ones beyond are answered 503.")
    ] = 10000,
    allow_grpc: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="Serve gRPC (GRPCInferenceService).")
    ] = "true",
    grpc_address: Annotated[str, typer.Option(help="Address the gRPC front end listens on.")] = "0.0.0.0",
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0: any free port).")] = 8001,
    reuse_grpc_port: Annotated[
        str,
        typer.Option(metavar="BOOLEAN", help="Let several servers listen on the gRPC port (SO_REUSEPORT)."),
    ] = "false",
    grpc_implementation: Annotated[
        GrpcImplementation,
        typer.Option(
            help="native: tcli's own HTTP/2 transport on the event loop (faster); grpcio: grpc.aio."
        ),
    ] = GrpcImplementation.native,
    grpc_restricted_protocol: Annotated[
        list[str] | None,
        typer.Option(
            help="<protocol>[,<protocol>...]:<key>=<value> (repeatable): those RPCs answer UNAVAILABLE "
            "without the metadata triton-grpc-protocol-<key>; same groups as --http-restricted-api."
        ),
    ] = None,
    grpc_header_forward_pattern: Annotated[
        str,
        typer.Option(help="Regex: inference request metadata it matches reaches the model as parameters."),
    ] = "",
    grpc_use_ssl: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="Serve gRPC over TLS (needs --grpc-server-cert and -key).")
    ] = "false",
    grpc_use_ssl_mutual: Annotated[
        str | None,
        typer.Option(
            metavar="BOOLEAN",
            help="true: gRPC clients need a certificate signed by --grpc-root-cert. Given at all, it turns "
            "TLS on (as in tritonserver).",
            show_default=False,
        ),
    ] = None,
    grpc_server_cert: Annotated[str, typer.Option(help="The gRPC server's certificate (PEM file).")] = "",
    grpc_server_key: Annotated[str, typer.Option(help="The gRPC server's private key (PEM file).")] = "",
    grpc_root_cert: Annotated[
        str,
        typer.Option(help="CA certificate (PEM) that client certificates must be signed by (mutual TLS)."),
    ] = "",
    http_use_ssl: Annotated[
        str,
        typer.Option(
            metavar="BOOLEAN", help="Serve HTTPS (needs --http-server-cert and -key; not in Triton)."
        ),
    ] = "false",
    http_use_ssl_mutual: Annotated[
        str | None,
        typer.Option(
            metavar="BOOLEAN",
            help="true: HTTPS clients need a certificate signed by --http-root-cert. Given at all, it turns "
            "HTTPS on.",
            show_default=False,
        ),
    ] = None,
    http_server_cert: Annotated[str, typer.Option(help="The HTTPS server's certificate (PEM file).")] = "",
    http_server_key: Annotated[str, typer.Option(help="The HTTPS server's private key (PEM file).")] = "",
    http_root_cert: Annotated[
        str,
        typer.Option(help="CA certificate (PEM) that client certificates must be signed by (mutual TLS)."),
    ] = "",
    grpc_max_message_size: Annotated[
        int, typer.Option(help="Largest gRPC message in bytes, either way; larger: RESOURCE_EXHAUSTED.")
    ] = 2**31 - 1,
    grpc_max_concurrent_streams: Annotated[
        int, typer.Option(help="gRPC calls at once on one connection (HTTP/2 MAX_CONCURRENT_STREAMS).")
    ] = 1024,
    grpc_read_timeout: Annotated[
        float, typer.Option(help="Seconds a gRPC connection may stall inside a frame before it is closed.")
    ] = 30.0,
    allow_metrics: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="Serve Prometheus metrics on --metrics-port.")
    ] = "true",
    allow_cpu_metrics: Annotated[
        str, typer.Option(metavar="BOOLEAN", help="Include the host CPU and memory gauges.")
    ] = "true",
    metrics_address: Annotated[
        str, typer.Option(help="Address of the metrics port (default: --http-address).")
    ] = "",
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port.")] = 8002,
    metrics_interval_ms: Annotated[
        float, typer.Option(help="CPU utilisation is refreshed at most every half of this.")
    ] = 2000.0,
    openai_port: Annotated[
        int | None,
        typer.Option(
            help="Serve OpenAI's API (/v1/chat/completions, ...) on this port (0: any free); off unless given.",
            show_default=False,
        ),
    ] = None,
    openai_address: Annotated[
        str, typer.Option(help="Address of the OpenAI port (default: --http-address).")
    ] = "",
    openai_tokenizer: Annotated[
        str,
        typer.Option(
            "--openai-tokenizer",
            "--tokenizer",
            help="Tokenizer folder whose chat template serves models that name none.",
        ),
    ] = "",
    openai_chat_template: Annotated[
        str,
        typer.Option(
            "--openai-chat-template",
            "--chat-template",
            help="Jinja chat template file replacing every model's own.",
        ),
    ] = "",
    openai_default_max_tokens: Annotated[
        int,
        typer.Option(
            "--openai-default-max-tokens",
            "--default-max-tokens",
            help="max_tokens of a request that gives none.",
        ),
    ] = 16,
    openai_restricted_api: Annotated[
        list[str] | None,
        typer.Option(
            help="<api>[,<api>]:<header>=<value>; APIs: inference, model-repository, metrics, health.",
        ),
    ] = None,
    openai_use_ssl: Annotated[
        str,
        typer.Option(metavar="BOOLEAN", help="Serve it over HTTPS (needs its -server-cert and -key)."),
    ] = "false",
    openai_use_ssl_mutual: Annotated[
        str | None,
        typer.Option(
            metavar="BOOLEAN",
            help="HTTPS asking client certificates signed by --openai-root-cert.",
            show_default=False,
        ),
    ] = None,
    openai_server_cert: Annotated[str, typer.Option(help="Its certificate (PEM file).")] = "",
    openai_server_key: Annotated[str, typer.Option(help="Its private key (PEM file).")] = "",
    openai_root_cert: Annotated[
        str,
        typer.Option(help="CA certificate (PEM) of client certificates (mutual TLS)."),
    ] = "",
    allow_client_shm: Annotated[
        str,
        typer.Option(
            metavar="BOOLEAN", help="Let clients register system shared memory (off, as in current Triton)."
        ),
    ] = "false",
    metrics_config: Annotated[
        list[str] | None,
        typer.Option(
            help="<setting>=<value> (repeatable): summary_latencies=true, "
            "summary_quantiles=0.5:0.05,0.9:0.01, counter_latencies=false."
        ),
    ] = None,
    backend_config: Annotated[
        list[str] | None,
        typer.Option(
            help="<backend>,<setting>=<value> (repeatable), e.g. onnxruntime,default-max-batch-size=8."
        ),
    ] = None,
    rate_limit: Annotated[
        str,
        typer.Option(
            help="execution_count: instances execute only when their config's resources are free; off."
        ),
    ] = "off",
    rate_limit_resource: Annotated[
        list[str] | None,
        typer.Option(help="<name>:<count>[:<device>] available to rate-limited instances (repeatable)."),
    ] = None,
    cache_config: Annotated[
        list[str] | None,
        typer.Option(
            help="<cache>,<setting>=<value> (repeatable): the response cache, e.g. local,size=1048576."
        ),
    ] = None,
    response_cache_byte_size: Annotated[
        str | None, typer.Option(help="Deprecated in Triton: the same as --cache-config local,size=<bytes>.")
    ] = None,
    trace_config: Annotated[
        list[str] | None,
        typer.Option(
            help="Tracing, repeatable: [<mode>,]<setting>=<value>, e.g. triton,file=/tmp/trace.json, "
            "level=TIMESTAMPS, rate=1, count=100, triton,log-frequency=50, mode=opentelemetry, "
            "opentelemetry,url=http://host:4318/v1/traces, opentelemetry,resource=service.name=tcli."
        ),
    ] = None,
    trace_file: Annotated[
        str | None, typer.Option(help="Deprecated form of --trace-config triton,file=.")
    ] = None,
    trace_level: Annotated[
        list[str] | None, typer.Option(help="Deprecated form of --trace-config level=.")
    ] = None,
    trace_rate: Annotated[str | None, typer.Option(help="Deprecated form of --trace-config rate=.")] = None,
    trace_count: Annotated[str | None, typer.Option(help="Deprecated form of --trace-config count=.")] = None,
    trace_log_frequency: Annotated[
        str | None, typer.Option(help="Deprecated form of --trace-config triton,log-frequency=.")
    ] = None,
    repoagent_directory: Annotated[
        list[Path] | None,
        typer.Option(help="Folder of repository agents (NAME/agent.py); repeatable."),
    ] = None,
    backend_directory: Annotated[
        Path, typer.Option(help="Folder of Python-based backends: backend NAME is NAME/model.py.")
    ] = Path("/opt/tritonserver/backends"),
    log_verbose: Annotated[int, typer.Option(help="Verbose logging level (0 = off).")] = 0,
    log_info: Annotated[str, typer.Option(metavar="BOOLEAN", help="Log info lines.")] = "true",
    log_warning: Annotated[str, typer.Option(metavar="BOOLEAN", help="Log warnings.")] = "true",
    log_error: Annotated[str, typer.Option(metavar="BOOLEAN", help="Log errors.")] = "true",
    log_format: Annotated[
        LogFormat, typer.Option(help="default (LMMDD hh:mm:ss) or ISO8601.")
    ] = LogFormat.default,
    log_file: Annotated[str, typer.Option(help="Write the log to this file instead of the console.")] = "",
) -> None:
    """Serve model repositories over Triton's HTTP/REST and gRPC protocols, with Prometheus metrics.

    Takes tritonserver's command line: flags that only matter on a GPU or inside Triton's C++ are
    accepted with one warning line naming them."""
    import logging

    from server import logs
    from server.app import ServerSettings, StartupError, run
    from server.frontends.header_forward import HeaderForward, PatternError
    from server.frontends.openai.restricted import parse_openai_restricted_api
    from server.frontends.tls import TlsError
    from server.protocol import restricted
    from server.protocol.errors import TritonError
    from server.repository.manager import ControlMode
    from server.repository.storage.location import parse_location
    from server.scheduling import rate_limiter
    from server.tracing.flags import TraceFlagError, read_trace_flags
    from tcli import serve_flags

    try:
        # tritonserver's flags that are not options here arrive among the plain arguments
        positional, extra = serve_flags.read_extra_flags([*(repositories or []), *ctx.args])
    except serve_flags.FlagError as exc:
        raise CliError(str(exc), exit_code=2) from None
    if positional and Path(positional[0]).name == "tritonserver" and not Path(positional[0]).is_dir():
        # Triton's charts pass the program as the first argument ("args: [tritonserver, ...]") to an
        # image whose entrypoint is a shell; this image's entrypoint is the server itself
        positional = positional[1:]
    repos: list[Path | str] = [*positional, *(model_repository or [])] or [Path("model_repository")]
    for repo in repos:
        try:
            location = parse_location(repo)
        except TritonError as exc:
            raise CliError(exc.message) from None
        # with --exit-on-error=false Triton keeps running (live, not ready) and names the repository
        if isinstance(location, Path) and not location.is_dir() and _flag("exit-on-error", exit_on_error):
            raise CliError(
                f"model repository '{repo}' is not a directory: pass the folder that holds the model folders, "
                "or an s3://, gs:// or as:// path"
            )
    try:
        http_restrictions = restricted.parse_http_restricted_api(http_restricted_api or [])
        grpc_restrictions = restricted.parse_grpc_restricted_protocol(grpc_restricted_protocol or [])
        openai_restrictions = parse_openai_restricted_api(openai_restricted_api or [])
    except restricted.RestrictionSpecError as exc:  # tritonserver exits 1 on these too
        raise CliError(str(exc)) from None
    for flag, pattern in (
        ("--http-header-forward-pattern", http_header_forward_pattern),
        ("--grpc-header-forward-pattern", grpc_header_forward_pattern),
    ):
        try:
            HeaderForward(pattern, case_insensitive=True)
        except PatternError as exc:
            raise CliError(f"{flag} '{pattern}' is not a regular expression: {exc}") from None
    try:
        limited = rate_limiter.parse_rate_limit(rate_limit)
        resources = [rate_limiter.parse_resource(value) for value in rate_limit_resource or []]
    except rate_limiter.RateLimitFlagError as exc:
        raise CliError(str(exc)) from None
    try:
        trace = read_trace_flags(
            trace_config or [],
            trace_file=trace_file,
            trace_level=trace_level,
            trace_rate=trace_rate,
            trace_count=trace_count,
            trace_log_frequency=trace_log_frequency,
        )
    except TraceFlagError as exc:
        raise CliError(str(exc)) from None
    log_settings = logs.LogSettings(
        log_file=log_file,
        log_info=_flag("log-info", log_info),
        log_warning=_flag("log-warning", log_warning),
        log_error=_flag("log-error", log_error),
        log_verbose_level=max(0, log_verbose),
        log_format=log_format.value,
    )
    try:
        logs.configure(log_settings)
    except OSError as exc:
        raise CliError(f"--log-file {log_file}: {exc.strerror or exc}") from None
    strict = None if strict_model_config is None else _flag("strict-model-config", strict_model_config)
    for line in serve_flags.strict_model_config_warnings(disable_auto_complete_config, strict):
        typer.echo(line, err=True)
    warning = serve_flags.warning_line(extra)
    if warning:
        logging.getLogger("tcli.server").warning(warning)
    for key in restricted.unmatchable_grpc_keys(grpc_restrictions):
        logging.getLogger("tcli.server").warning(
            "--grpc-restricted-protocol: gRPC clients send metadata keys in lower case, so no call can "
            "carry '%s' and its protocols refuse every call (as in Triton); write the key in lower case",
            key,
        )
    cache = _response_cache(cache_config or [], response_cache_byte_size)
    settings = ServerSettings(
        model_repositories=repos,
        model_control_mode=ControlMode(model_control_mode.value),
        repository_poll_secs=repository_poll_secs,
        load_models=list(load_model or []),
        strict_readiness=_flag("strict-readiness", strict_readiness),
        exit_timeout_secs=exit_timeout_secs,
        exit_on_error=_flag("exit-on-error", exit_on_error),
        server_id=id,
        auto_complete_config=not (disable_auto_complete_config or bool(strict)),
        model_config_name=model_config_name,
        model_load_thread_count=max(1, model_load_thread_count),
        model_load_retry_count=max(0, model_load_retry_count),
        host=http_address,
        http_port=http_port,
        reuse_http_port=_flag("reuse-http-port", reuse_http_port),
        grpc_address=grpc_address,
        grpc_port=grpc_port,
        reuse_grpc_port=_flag("reuse-grpc-port", reuse_grpc_port),
        grpc_implementation=grpc_implementation.value,
        metrics_address=metrics_address or http_address,
        metrics_port=metrics_port,
        metrics_interval_ms=metrics_interval_ms,
        allow_http=_flag("allow-http", allow_http),
        allow_grpc=_flag("allow-grpc", allow_grpc),
        allow_metrics=_flag("allow-metrics", allow_metrics),
        allow_cpu_metrics=_flag("allow-cpu-metrics", allow_cpu_metrics),
        allow_client_shm=_flag("allow-client-shm", allow_client_shm),
        http_max_input_size=http_max_input_size,
        http_header_timeout=_positive("http-header-timeout", http_header_timeout),
        http_body_timeout=_positive("http-body-timeout", http_body_timeout),
        http_keepalive_timeout=_positive("http-keepalive-timeout", http_keepalive_timeout),
        http_max_connections=int(_positive("http-max-connections", http_max_connections)),
        grpc_max_message_size=int(_positive("grpc-max-message-size", grpc_max_message_size, 2**31 - 1)),
        grpc_max_concurrent_streams=int(
            _positive("grpc-max-concurrent-streams", grpc_max_concurrent_streams)
        ),
        grpc_read_timeout=_positive("grpc-read-timeout", grpc_read_timeout),
        log_verbose=log_verbose,
        log_settings=log_settings,
        backend_config=_backend_config(backend_config or []),
        rate_limit=limited,
        rate_limit_resources=resources,
        metrics_config=_metrics_config(metrics_config or []),
        repoagent_directories=list(repoagent_directory or []),
        backend_directory=backend_directory,
        http_restricted_api=http_restrictions,
        grpc_restricted_protocol=grpc_restrictions,
        http_header_forward_pattern=http_header_forward_pattern,
        grpc_header_forward_pattern=grpc_header_forward_pattern,
        # tritonserver's parser turns TLS on for --grpc-use-ssl-mutual whatever its value
        grpc_use_ssl=_flag("grpc-use-ssl", grpc_use_ssl) or grpc_use_ssl_mutual is not None,
        grpc_use_ssl_mutual=grpc_use_ssl_mutual is not None
        and _flag("grpc-use-ssl-mutual", grpc_use_ssl_mutual),
        grpc_server_cert=grpc_server_cert,
        grpc_server_key=grpc_server_key,
        grpc_root_cert=grpc_root_cert,
        http_use_ssl=_flag("http-use-ssl", http_use_ssl) or http_use_ssl_mutual is not None,
        http_use_ssl_mutual=http_use_ssl_mutual is not None
        and _flag("http-use-ssl-mutual", http_use_ssl_mutual),
        http_server_cert=http_server_cert,
        http_server_key=http_server_key,
        http_root_cert=http_root_cert,
        response_cache_byte_size=cache,
        trace=trace,
        openai_port=openai_port,
        openai_address=openai_address or http_address,
        openai_tokenizer=openai_tokenizer,
        openai_chat_template=openai_chat_template,
        openai_default_max_tokens=int(_positive("openai-default-max-tokens", openai_default_max_tokens)),
        openai_restricted_api=openai_restrictions,
        openai_use_ssl=_flag("openai-use-ssl", openai_use_ssl) or openai_use_ssl_mutual is not None,
        openai_use_ssl_mutual=openai_use_ssl_mutual is not None
        and _flag("openai-use-ssl-mutual", openai_use_ssl_mutual),
        openai_server_cert=openai_server_cert,
        openai_server_key=openai_server_key,
        openai_root_cert=openai_root_cert,
    )
    _check_ports(settings)  # before any model loads
    try:
        code = run(settings, on_started=_print_startup)
    except StartupError as exc:  # tritonserver's default --exit-on-error=true: its tables, then its error
        _print_tables(exc.server)
        raise CliError(f"{exc} (--exit-on-error=false serves the models that did load)") from None
    except TlsError as exc:  # before any model loaded: the file and flag to mend
        raise CliError(str(exc)) from None
    except OSError as exc:  # a port taken between the check and the front ends' start
        raise CliError(
            f"cannot start the server: {exc.strerror or exc} (is a port in use? --http-port 0 --grpc-port 0 "
            "--metrics-port 0 take free ones)"
        ) from None
    raise typer.Exit(code)


def _check_ports(settings: ServerSettings) -> None:
    from server.frontends.ports import Listener, port_problem

    listeners = []
    if settings.allow_http:
        listeners.append(Listener("--http-port", settings.host, settings.http_port, settings.reuse_http_port))
    if settings.allow_grpc:
        address = settings.grpc_address or settings.host
        listeners.append(Listener("--grpc-port", address, settings.grpc_port, settings.reuse_grpc_port))
    if settings.allow_metrics:
        listeners.append(
            Listener("--metrics-port", settings.metrics_address or settings.host, settings.metrics_port)
        )
    if settings.openai_port is not None:
        address = settings.openai_address or settings.host
        listeners.append(Listener("--openai-port", address, settings.openai_port))
    problem = port_problem(listeners)
    if problem:
        raise CliError(problem)


def _positive(name: str, value: float, most: float | None = None) -> float:
    """A limit flag's value, checked: above 0 (none of these limits can be switched off), at most
    `most` when given."""
    shown = str(int(value)) if float(value).is_integer() else str(value)
    if not value > 0:
        raise CliError(f"--{name} must be above 0, got {shown}")
    if most is not None and value > most:
        raise CliError(f"--{name} must be at most {int(most)}, got {shown}")
    return value


def _metrics_config(values: list[str]) -> MetricsConfig:
    from server.protocol.errors import TritonError
    from server.scheduling.latency_summary import parse_metrics_config

    try:
        return parse_metrics_config(values)
    except TritonError as error:
        raise CliError(error.message) from None


def _backend_config(values: list[str]) -> dict[str, dict[str, str]]:
    """--backend-config=<backend>,<setting>=<value> entries by backend (a setting without a backend
    applies to every backend, as in Triton)."""
    found: dict[str, dict[str, str]] = {}
    for value in values:
        backend, comma, setting = value.partition(",")
        if not comma:
            backend, setting = "", value
        key, equals, item = setting.partition("=")
        if not equals or not key:
            raise CliError(f"--backend-config={value}: expected <backend>,<setting>=<value>")
        found.setdefault(backend, {})[key] = item
    return found


def _response_cache(cache_config: list[str], byte_size: str | None) -> int:
    """The response cache's size in bytes from --cache-config / --response-cache-byte-size; 0: none."""
    import logging

    from server.scheduling.cache_config import CacheConfigError, parse_cache_flags

    try:
        flags = parse_cache_flags(cache_config, byte_size)
    except CacheConfigError as exc:
        raise CliError(str(exc)) from None
    if flags is None:
        return 0
    warn = logging.getLogger("tcli.server").warning
    if flags.deprecated_flag:
        warn(
            "--response-cache-byte-size is deprecated (as in Triton): use --cache-config=local,size=%d",
            flags.size,
        )
    if flags.ignored:
        warn("--cache-config local: settings %s are not read by the local cache", ", ".join(flags.ignored))
    return flags.size


def _print_tables(server: Server) -> None:
    from rich.console import Console

    from tcli import render

    console = Console(stderr=True)
    for table in render.startup_tables(server):
        console.print(table)


def _print_startup(server: Server) -> None:
    from rich.console import Console

    _print_tables(server)
    console = Console(stderr=True)
    https = "S" if server.http_tls else ""
    grpc_tls = " (TLS)" if server.grpc_tls else ""
    ports = [
        f"HTTP{https} on {server.settings.host}:{server.http_port}" if server.http_port else "",
        f"gRPC{grpc_tls} on {server.settings.grpc_address}:{server.grpc_port}" if server.grpc_port else "",
        f"metrics on {server.settings.metrics_address}:{server.metrics_port}" if server.metrics_port else "",
        f"OpenAI{'S' if server.openai_tls else ''} on {server.settings.openai_address or server.settings.host}:"
        f"{server.openai_port}"
        if server.openai_port
        else "",
    ]
    console.print("Started " + ", ".join(p for p in ports if p) + " (Ctrl-C to stop)")
