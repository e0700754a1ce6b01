"""`tcli serve`: a Triton-compatible server on a model repository, with tritonserver's flag names."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcli.errors import CliError

if TYPE_CHECKING:
    from server.app import Server

app = typer.Typer()

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


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


@app.command()
def serve(
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
    model_control_mode: Annotated[
        Mode,
        typer.Option(help="none: load all at start; poll: reload on changes; explicit: load/unload API."),
    ] = Mode.none,
    repository_poll_secs: Annotated[
        float, typer.Option(help="Fallback rescan interval in poll mode (file events trigger sooner).")
    ] = 15.0,
    load_model: Annotated[
        list[str] | None,
        typer.Option("--load-model", help="Explicit mode: model to load at start ('*' for all; repeatable)."),
    ] = None,
    strict_readiness: Annotated[
        str, typer.Option(help="true: /v2/health/ready only when every model is ready.")
    ] = "true",
    exit_timeout_secs: Annotated[
        float, typer.Option(help="On SIGINT/SIGTERM, wait this long for in-flight requests.")
    ] = 30.0,
    http_address: Annotated[str, typer.Option(help="Address the front ends listen on.")] = "0.0.0.0",
    http_port: Annotated[int, typer.Option(help="HTTP port (0: any free port).")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    grpc_implementation: Annotated[
        GrpcImplementation,
        typer.Option(
            help="native: tcli's own HTTP/2 transport on the event loop (faster); grpcio: grpc.aio."
        ),
    ] = GrpcImplementation.native,
    metrics_port: Annotated[int, typer.Option(help="Prometheus metrics port.")] = 8002,
    allow_http: Annotated[str, typer.Option()] = "true",
    allow_grpc: Annotated[str, typer.Option()] = "true",
    allow_metrics: Annotated[str, typer.Option()] = "true",
    allow_client_shm: Annotated[
        str,
        typer.Option(
            help="Let clients register system shared memory (off by default, as in current Triton)."
        ),
    ] = "false",
    http_max_input_size: Annotated[int, typer.Option(help="Largest request body in bytes.")] = 64 * 2**20,
    log_verbose: Annotated[int, typer.Option(help="Verbose logging level (0 = off).")] = 0,
    repoagent_directory: Annotated[
        list[Path] | None,
        typer.Option(help="Folder of repository agents (NAME/agent.py); repeatable."),
    ] = None,
) -> None:
    """Serve a model repository over Triton's HTTP/REST and gRPC protocols, with Prometheus metrics."""
    import logging

    from server.app import ServerSettings, run
    from server.protocol.errors import TritonError
    from server.repository.manager import ControlMode
    from server.repository.storage.location import parse_location

    repos: list[Path | str] = [*(repositories or []), *(model_repository or [])] or [Path("model_repository")]
    for repo in repos:
        try:
            location = parse_location(repo)
        except TritonError as exc:
            raise CliError(exc.message) from None
        if isinstance(location, Path) and not location.is_dir():
            raise CliError(
                f"model repository '{repo}' is not a directory: pass the folder that holds the model folders, "
                "or an s3://, gs:// or as:// path"
            )
    logging.basicConfig(
        level=logging.DEBUG if log_verbose else logging.INFO,
        format="%(levelname).1s%(asctime)s %(name)s] %(message)s",
        datefmt="%m%d %H:%M:%S",
    )
    settings = ServerSettings(
        model_repositories=repos,
        model_control_mode=ControlMode(model_control_mode.value),
        repository_poll_secs=repository_poll_secs,
        load_models=list(load_model or []),
        strict_readiness=_flag("strict-readiness", strict_readiness),
        exit_timeout_secs=exit_timeout_secs,
        host=http_address,
        http_port=http_port,
        grpc_port=grpc_port,
        grpc_implementation=grpc_implementation.value,
        metrics_port=metrics_port,
        allow_http=_flag("allow-http", allow_http),
        allow_grpc=_flag("allow-grpc", allow_grpc),
        allow_metrics=_flag("allow-metrics", allow_metrics),
        allow_client_shm=_flag("allow-client-shm", allow_client_shm),
        http_max_input_size=http_max_input_size,
        log_verbose=log_verbose,
        repoagent_directories=list(repoagent_directory or []),
    )
    try:
        code = run(settings, on_started=_print_startup)
    except OSError as exc:
        raise CliError(
            f"cannot start the server: {exc.strerror or exc} (is the port already in use? try --http-port 0)"
        ) from None
    raise typer.Exit(code)


def _print_startup(server: Server) -> None:
    from rich.console import Console

    from tcli import render

    console = Console(stderr=True)
    for table in render.startup_tables(server):
        console.print(table)
    ports = [
        f"HTTP on {server.settings.host}:{server.http_port}" if server.http_port else "",
        f"gRPC on {server.settings.host}:{server.grpc_port}" if server.grpc_port else "",
        f"metrics on {server.settings.host}:{server.metrics_port}" if server.metrics_port else "",
    ]
    console.print("Started " + ", ".join(p for p in ports if p) + " (Ctrl-C to stop)")
