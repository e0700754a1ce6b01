"""perf_analyzer's input options (--shape, --input-data, --string-length, --string-data) as typer
options, shared by `tcli perf` and `tcli analyze`, which make requests the same way."""

from __future__ import annotations

from typing import Annotated

import typer

Shape = Annotated[
    list[str] | None,
    typer.Option("--shape", help="NAME:d1,d2,... for inputs with variable dimensions (no batch dim)."),
]
InputData = Annotated[
    str, typer.Option("--input-data", help="random, zero, or a JSON file in perf_analyzer's format.")
]
StringLength = Annotated[int, typer.Option("--string-length", help="Length of random strings.")]
StringData = Annotated[
    str | None, typer.Option("--string-data", help="Use this string for every string element.")
]
