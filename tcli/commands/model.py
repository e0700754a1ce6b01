"""`tcli model list|status|load|unload|config|metadata|stats`: model control against any running
Triton-compatible server (tcli's or Triton itself), over HTTP or gRPC."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcli.commands.tls_options import current_tls, with_tls
from tcli.errors import CliError, unknown_model
from tcli.help import HelpCommand

if TYPE_CHECKING:
    from tcli.client.grpc import GrpcClient
    from tcli.client.http import HttpClient

app = typer.Typer(
    help="Control and inspect models on a running server.", no_args_is_help=True, rich_markup_mode=None
)


class Protocol(enum.StrEnum):
    http = "http"
    grpc = "grpc"


class Format(enum.StrEnum):
    table = "table"
    json = "json"


Url = Annotated[
    str | None,
    typer.Option("-u", "--url", help="Server address (default localhost:8000 for HTTP, :8001 for gRPC)."),
]
Proto = Annotated[Protocol, typer.Option("-i", "--protocol", help="http or grpc.")]
Fmt = Annotated[Format, typer.Option("--format", "-f", help="table or json.")]
Version = Annotated[str, typer.Option("-x", "--model-version", help="Model version (default: latest).")]


def _client(url: str | None, protocol: Protocol) -> HttpClient | GrpcClient:
    from tcli.client import connect
    from tcli.client.types import ClientError

    try:
        return connect(url, protocol.value, tls=current_tls())
    except ClientError as exc:  # a TLS file that cannot be read or used
        raise CliError(exc.message) from None


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    from tcli.client.types import ClientError

    try:
        return function(*args, **kwargs)
    except ClientError as exc:
        raise CliError(exc.message) from None


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


@app.command("list", cls=HelpCommand)
@with_tls
def list_models(url: Url = None, protocol: Proto = Protocol.http, format: Fmt = Format.table) -> None:
    """Every model in the server's repositories, with version, state and reason."""
    from tcli import render

    with _client(url, protocol) as client:
        rows = _call(client.repository_index)
    if format == Format.json:
        _print_json(rows)
    else:
        render.print_table(render.model_index_table(rows))


@app.command(cls=HelpCommand)
@with_tls
def status(
    model: Annotated[str | None, typer.Argument(help="A model (default: every model)")] = None,
    url: Url = None,
    protocol: Proto = Protocol.http,
    format: Fmt = Format.table,
) -> None:
    """Is the model ready, which versions are loaded, and why a version is not; every model's when
    none is named."""
    from tcli import render

    with _client(url, protocol) as client:
        index = _call(client.repository_index)
        names = list(dict.fromkeys(r.get("name", "") for r in index)) if model is None else [model]
        if model is not None and model not in names_of(index):
            raise CliError(unknown_model(model, names_of(index)))
        ready = {name: _call(client.is_model_ready, name) for name in names}
    if format == Format.json:
        statuses = [
            {"name": name, "ready": ready[name], "versions": [r for r in index if r.get("name") == name]}
            for name in names
        ]
        _print_json(statuses[0] if model is not None else statuses)
    elif model is not None:
        render.print_table(
            render.model_index_table(
                [r for r in index if r.get("name") == model],
                title=f"{model}: {'READY' if ready[model] else 'NOT READY'}",
            )
        )
    else:
        count = sum(ready.values())
        render.print_table(render.model_index_table(index, title=f"{count} of {len(names)} models ready"))


def names_of(index: list[dict[str, Any]]) -> list[str]:
    return [str(r.get("name", "")) for r in index]


@app.command(cls=HelpCommand)
@with_tls
def load(
    model: str,
    config: Annotated[
        Path | None, typer.Option(help="Config override: a config.pbtxt or its JSON form.")
    ] = None,
    url: Url = None,
    protocol: Proto = Protocol.http,
) -> None:
    """Load or reload a model (the server must run with --model-control-mode explicit)."""
    from tcli.client.types import ClientError

    override = _config_override(config) if config else None
    with _client(url, protocol) as client:
        try:
            client.load_model(model, override)
        except ClientError as exc:
            if "failed to poll from model repository" not in exc.message or override is not None:
                raise CliError(exc.message) from None
            known = names_of(_call(client.repository_index))
            if model in known:  # there, but it failed: the message says why
                raise CliError(exc.message) from None
            raise CliError(f"{exc.message}; {unknown_model(model, known)}") from None
    print(f"loaded '{model}'")


def _config_override(path: Path) -> str:
    if not path.is_file():
        raise CliError(f"config file '{path}' not found")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            json.loads(text)
        except ValueError as exc:
            raise CliError(f"{path} is not valid JSON: {exc}") from None
        return text
    from server.config.parse import parse_config_text
    from server.protocol.config_json import to_json_dict
    from server.protocol.errors import TritonError

    try:
        return json.dumps(to_json_dict(parse_config_text(text, path)))
    except TritonError as exc:
        raise CliError(exc.message) from None


@app.command(cls=HelpCommand)
@with_tls
def unload(
    model: str,
    unload_dependents: Annotated[
        bool, typer.Option(help="Also unload ensembles that use this model.")
    ] = False,
    url: Url = None,
    protocol: Proto = Protocol.http,
) -> None:
    """Unload a model (explicit control mode)."""
    with _client(url, protocol) as client:
        _call(client.unload_model, model, unload_dependents)
    print(f"unloaded '{model}'")


@app.command(cls=HelpCommand)
@with_tls
def config(
    model: str,
    version: Version = "",
    url: Url = None,
    protocol: Proto = Protocol.http,
    format: Fmt = Format.table,
) -> None:
    """The model's configuration as the server completed it (pbtxt, or JSON with --format json)."""
    with _client(url, protocol) as client:
        data = _call(client.model_config, model, version)
    if format == Format.json:
        _print_json(data)
        return
    from server.config.write import to_pbtxt
    from server.protocol.config_json import from_json_dict

    print(to_pbtxt(from_json_dict(data)), end="")


@app.command(cls=HelpCommand)
@with_tls
def metadata(
    model: str,
    version: Version = "",
    url: Url = None,
    protocol: Proto = Protocol.http,
    format: Fmt = Format.table,
) -> None:
    """The model's inputs and outputs: names, data types, shapes (-1 = any size)."""
    from tcli import render

    with _client(url, protocol) as client:
        data = _call(client.model_metadata, model, version)
    if format == Format.json:
        _print_json(data)
    else:
        render.print_table(render.metadata_table(data))


@app.command(cls=HelpCommand)
@with_tls
def stats(
    model: Annotated[str, typer.Argument(help="Model (default: every loaded model).")] = "",
    version: Version = "",
    url: Url = None,
    protocol: Proto = Protocol.http,
    format: Fmt = Format.table,
) -> None:
    """Inference statistics: request counts, executions, and average time in queue and compute."""
    from tcli import render

    with _client(url, protocol) as client:
        data = _call(client.statistics, model, version)
    if format == Format.json:
        _print_json(data)
    else:
        render.print_table(render.statistics_table(data.get("model_stats", [])))
