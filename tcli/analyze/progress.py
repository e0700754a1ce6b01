"""The live progress of a search, on stderr: on a terminal a Rich bar of configs measured out of those
planned, the config being measured, the best so far and the time left; elsewhere (a pipe, a CI log)
one line per config measured, so that a search of minutes is never silent.

The time left is the average time of the configs measured so far times those left, less the time the
current one has run: Rich's own estimate comes from the bar's recent speed, which a search that
completes one config a minute does not have (it showed "ETA 0:00:01" for a whole config)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class _TimeLeft(ProgressColumn):
    """ETA from the configs measured so far (see the module's text); '?' before the first."""

    def render(self, task: Task) -> Text:
        return Text(f"ETA {time_left(task.fields, task.total, task.completed)}", style="progress.remaining")


def time_left(fields: dict[str, Any], total: float | None, completed: float) -> str:
    measured, spent, started = fields.get("measured", 0), fields.get("spent", 0.0), fields.get("started")
    if not measured or total is None:
        return "?"
    per_config = spent / measured
    running = time.monotonic() - started if started is not None else 0.0
    seconds = max(0.0, per_config * max(total - completed, 0) - running)
    return str(timedelta(seconds=round(seconds)))


class SearchProgress:
    def __init__(self, model: str, planned: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            _TimeLeft(),
            console=self.console,
            transient=True,
            disable=not self.enabled,
        )
        self.model = model
        self.label = ""
        self.task = self.progress.add_task(
            f"analyze {model}", total=planned, best="", measured=0, spent=0.0, started=None
        )

    def __enter__(self) -> SearchProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def measuring(self, label: str) -> None:
        self.label = label
        self.progress.update(self.task, description=f"{self.model}: {label}", started=time.monotonic())

    def checking(self, label: str) -> None:
        """A config served over HTTP before it is recommended (verify.py): not a config measured."""
        self.progress.update(self.task, description=f"{self.model}: {label}, served over HTTP")
        if not self.enabled:
            self.console.print(
                f"analyze {self.model}, over HTTP: serving {label} to check its figures",
                highlight=False,
                soft_wrap=True,
            )

    def done(self, best: str, resumed: bool = False) -> None:
        task = self.progress.tasks[0]
        fields = task.fields
        started: float | None = fields.get("started")
        measured = started is not None  # a config from the checkpoint took no time
        spent = fields["spent"] + (time.monotonic() - started if started is not None else 0.0)
        count = fields["measured"] + (1 if measured else 0)
        self.progress.update(self.task, advance=1, best=best, measured=count, spent=spent, started=None)
        if resumed:
            self.progress.update(self.task, description=f"{self.model}: resumed from the checkpoint")
        if not self.enabled:  # no bar: a line per config, so that a log shows the search moving
            task = self.progress.tasks[0]
            what = self.label if measured else "from the checkpoint"
            total = int(task.total) if task.total is not None else "?"
            left = time_left(task.fields, task.total, task.completed)
            self.console.print(
                f"analyze {self.model}: {int(task.completed)}/{total} configs ({what}); {best or '-'}; "
                f"ETA {left}",
                highlight=False,
                soft_wrap=True,
            )

    def replan(self, planned: int) -> None:
        """Quick mode learns as it goes how many configs it will measure."""
        task = self.progress.tasks[0]
        self.progress.update(self.task, total=max(planned, task.completed + 1))
