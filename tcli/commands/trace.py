"""`tcli trace summary FILE`: where requests spent their time, per model, from Triton's trace file."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from tcli.help import HelpCommand

app = typer.Typer(
    help="Read Triton trace files (--trace-config triton,file=...).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class Format(enum.StrEnum):
    table = "table"
    json = "json"


@app.command(cls=HelpCommand)
def summary(
    file: Annotated[
        Path, typer.Argument(help="The trace file given to triton,file= (F, and F.0, F.1, ... beside it).")
    ],
    format: Annotated[Format, typer.Option("--format", "-f", help="table or json.")] = Format.table,
    png: Annotated[
        Path | None, typer.Option(help="Also draw each model's median phases as a stacked bar.")
    ] = None,
) -> None:
    """Per model: traces, and the p50/p99 of network in, queue, compute input, infer, compute output
    and network out (microseconds)."""
    import json

    from tcli.trace.summary import as_json, summarize, trace_files

    files = trace_files(file)
    models = summarize(files)
    if png is not None:
        from tcli.trace.chart import write_chart

        write_chart(png, models)
    if format == Format.json:
        typer.echo(json.dumps(as_json(files, models), indent=2))
        return
    from rich.console import Console

    from tcli.render import trace_summary_table

    Console().print(trace_summary_table(files, models))
