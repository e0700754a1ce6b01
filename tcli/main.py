"""The `tcli` command: one Typer app with a sub-app per command group.

Start-up stays light (`tcli --help` imports no numpy, torch or grpc): command modules import their
heavy dependencies inside the command functions.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from tcli import startup_signals
from tcli.commands import analyze, infer, model, perf, repo, serve, trace

app = typer.Typer(
    name="tcli",
    help="A Triton-compatible toolkit: check model repositories, serve them, and drive any Triton server.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(repo.app, name="repo")
app.add_typer(model.app, name="model")
app.add_typer(trace.app, name="trace")
app.registered_commands += serve.app.registered_commands
app.registered_commands += infer.app.registered_commands
app.registered_commands += perf.app.registered_commands
app.registered_commands += analyze.app.registered_commands


def run(command: Any = None, prog_name: str | None = None) -> None:
    """Console-script entry point (of `command`, the whole app by default): every failure is one line
    on stderr and a non-zero exit."""
    from tcli.errors import CliError, describe, exit_with

    if command is None and sys.argv[1:2] != ["serve"]:  # serve's server handles signals itself
        startup_signals.python_handles()
    try:
        (command or app)(prog_name=prog_name)
    except CliError as exc:
        exit_with(exc.message, exc.exit_code)
    except KeyboardInterrupt:
        exit_with("interrupted", 130)
    except Exception as exc:  # the last line of defence: never show a traceback to a user
        from server.protocol.errors import TritonError

        if isinstance(exc, TritonError):
            exit_with(exc.message, 1)
        exit_with(describe(exc), 1)


if __name__ == "__main__":
    run()
