"""What `tcli repo import` prints: the files written and the tensors served, for people (Rich) and for
machines (JSON), with the validation of the new model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from server.config.problems import ModelReport
    from tcli.mlflow_import.entry import WrittenEntry


def _tensors(entry: WrittenEntry) -> list[dict[str, Any]]:
    from server.config.validate import enum_name

    return [
        {"name": t.name, "direction": direction, "data_type": enum_name(t, "data_type"), "dims": list(t.dims)}
        for direction, tensors in (("input", entry.config.input), ("output", entry.config.output))
        for t in tensors
    ]


def as_dict(source: str, entry: WrittenEntry, report: ModelReport) -> dict[str, Any]:
    return {
        "source": source,
        "flavour": entry.flavour,
        "model": entry.config.name,
        "version": entry.version,
        "backend": entry.config.platform or entry.config.backend,
        "max_batch_size": entry.config.max_batch_size,
        "files": [str(path) for path in entry.files],
        "tensors": _tensors(entry),
        "status": report.status,
        "problems": [problem.as_dict() for problem in report.problems],
    }


def show(console: Console, source: str, entry: WrittenEntry, report: ModelReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.print(
        f"imported [bold]{escape(source)}[/] ({entry.flavour} flavour) as model "
        f"[bold]{escape(entry.config.name)}[/] version {entry.version}",
        highlight=False,
    )
    for path in entry.files:
        console.print(f"  wrote {escape(str(path))}", highlight=False)
    table = Table(title=f"max_batch_size {entry.config.max_batch_size}", title_justify="left")
    for column in ("tensor", "direction", "data type", "dims"):
        table.add_column(column)
    for tensor in _tensors(entry):
        dims = ",".join(str(d) for d in tensor["dims"])
        table.add_row(escape(tensor["name"]), tensor["direction"], tensor["data_type"], f"[{dims}]")
    console.print(table)
    if entry.flavour == "python_function":
        from tcli.mlflow_import.entry import MODEL_FOLDER

        console.print(
            "  the server needs the model's own dependencies: "
            f"{escape(str(entry.folder / str(entry.version) / MODEL_FOLDER / 'requirements.txt'))}",
            highlight=False,
        )
    for problem in report.problems:
        colour = "red" if problem.severity == "error" else "yellow"
        console.print(f"[{colour}]{problem.severity}[/]: {escape(problem.one_line())}", highlight=False)
