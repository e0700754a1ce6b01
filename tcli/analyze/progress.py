"""The live progress of a search: a Rich bar of configs measured out of those planned, the config and
concurrency being measured, the best so far, and the time left. On stderr, and only on a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


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
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            disable=not self.enabled,
        )
        self.model = model
        self.task = self.progress.add_task(f"analyze {model}", total=planned, best="")

    def __enter__(self) -> SearchProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def measuring(self, label: str) -> None:
        self.progress.update(self.task, description=f"{self.model}: {label}")

    def done(self, best: str, resumed: bool = False) -> None:
        self.progress.update(self.task, advance=1, best=best)
        if resumed:
            self.progress.update(self.task, description=f"{self.model}: resumed from the checkpoint")

    def replan(self, planned: int) -> None:
        """Quick mode learns as it goes how many configs it will measure."""
        task = self.progress.tasks[0]
        self.progress.update(self.task, total=max(planned, task.completed + 1))
