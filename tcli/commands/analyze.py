"""`tcli analyze -m MODEL [REPO]`: the model's config with the most throughput (or the lowest latency)
under a latency budget, found by loading candidate configs as variants and measuring each with
`tcli perf`'s windows: in-process by default, or on a running server (`-u URL`)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

from tcli.analyze.checkpoint import default_checkpoint
from tcli.commands.input_options import InputData, Shape, StringData, StringLength
from tcli.errors import CliError
from tcli.help import HelpCommand

app = typer.Typer()

INTERRUPTED_EXIT = 130
MAX_TIE = 0.10  # configs closer than the stability band (at most this) are a tie
DEFAULT_REPOSITORY = Path("model_repository")


class Mode(enum.StrEnum):
    quick = "quick"
    brute = "brute"


class Objective(enum.StrEnum):
    throughput = "throughput"
    latency = "latency"


class Format(enum.StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


class Switch(enum.StrEnum):
    both = "both"
    on = "on"
    off = "off"


class Placement(enum.StrEnum):
    both = "both"
    process = "process"
    server = "server"


class Protocol(enum.StrEnum):
    http = "http"
    grpc = "grpc"


def _int_list(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CliError(f"{flag} '{text}' is not a list of whole numbers (for example {flag} 0,100)") from None
    if not values or any(v < 0 for v in values):
        raise CliError(f"{flag} '{text}': give one or more whole numbers, 0 or more")
    return values


def _preferred(text: str | None) -> list[str] | None:
    if text is None:
        return None
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or any(v not in ("none", "max") for v in values):
        raise CliError(f"--preferred-batch-sizes '{text}': give none, max or none,max")
    return values


@app.command(cls=HelpCommand, no_args_is_help=True)
def analyze(
    model_name: Annotated[
        str, typer.Option("-m", help="The model to analyze (required).", show_default=False)
    ],
    repository: Annotated[
        Path | None,
        typer.Argument(
            help="Model repository (default: ./model_repository). With -u: only for --output-dir."
        ),
    ] = None,
    latency_budget: Annotated[
        float | None, typer.Option("--latency-budget", help="p99 latency budget, in ms.", show_default=False)
    ] = None,
    min_throughput: Annotated[
        float | None,
        typer.Option(
            "--min-throughput", help="Least throughput (infer/sec) a config must reach.", show_default=False
        ),
    ] = None,
    objective: Annotated[
        Objective, typer.Option("--objective", help="Most throughput, or lowest p99, within the constraints.")
    ] = Objective.throughput,
    mode: Annotated[
        Mode,
        typer.Option(
            "--mode",
            help="quick: one dimension at a time, pruned (default); brute: every config of the space.",
        ),
    ] = Mode.quick,
    url: Annotated[
        str | None,
        typer.Option(
            "-u",
            help="Measure on this running server (EXPLICIT model control) instead of in-process.",
            show_default=False,
        ),
    ] = None,
    protocol: Annotated[Protocol, typer.Option("-i", help="With -u: http or grpc.")] = Protocol.http,
    min_instance_count: Annotated[int, typer.Option("--min-instance-count", help="Fewest instances.")] = 1,
    max_instance_count: Annotated[int, typer.Option("--max-instance-count", help="Most instances.")] = 4,
    max_batch_size: Annotated[
        int | None,
        typer.Option(
            "--max-batch-size",
            help="Largest max_batch_size tried (powers of two; default 64, or the config's when larger).",
            show_default=False,
        ),
    ] = None,
    dynamic_batching: Annotated[
        Switch, typer.Option("--dynamic-batching", help="Try dynamic batching off, on, or both.")
    ] = Switch.both,
    preferred_batch_sizes: Annotated[
        str | None,
        typer.Option(
            "--preferred-batch-sizes",
            help="none, max or none,max: preferred_batch_size left out, or [max_batch_size] (default: the config's).",
            show_default=False,
        ),
    ] = None,
    queue_delays: Annotated[
        str | None,
        typer.Option(
            "--queue-delays",
            help="max_queue_delay_microseconds values to try, e.g. 0,100,500 (default: 0, 500 and the config's).",
            show_default=False,
        ),
    ] = None,
    python_placement: Annotated[
        Placement,
        typer.Option(
            "--python-placement",
            help="Python models: instances in processes of their own, in the server, or both.",
        ),
    ] = Placement.both,
    intra_op_threads: Annotated[
        str | None,
        typer.Option(
            "--intra-op-threads",
            help="onnxruntime: intra_op_thread_count values, 0 = not set (default 0,1).",
            show_default=False,
        ),
    ] = None,
    inter_op_threads: Annotated[
        str | None,
        typer.Option(
            "--inter-op-threads",
            help="onnxruntime: inter_op_thread_count values (default 0).",
            show_default=False,
        ),
    ] = None,
    max_concurrency: Annotated[
        int, typer.Option("--max-concurrency", help="Concurrency sweeps go 1, 2, 4, ... up to this.")
    ] = 64,
    measurement_interval: Annotated[
        int, typer.Option("--measurement-interval", "-p", help="Measurement window, in msec (as tcli perf).")
    ] = 200,
    measurement_request_count: Annotated[
        int,
        typer.Option(
            "--measurement-request-count",
            help="Stretch windows (up to 5 s) to hold at least this many requests at a sweep's first level; 0: never.",
        ),
    ] = 50,
    stability_percentage: Annotated[
        float,
        typer.Option(
            "--stability-percentage", "-s", help="Stable when the last 3 windows agree within this %."
        ),
    ] = 10.0,
    max_trials: Annotated[int, typer.Option("--max-trials", "-r", help="Windows per level at most.")] = 4,
    shape: Shape = None,
    input_data: InputData = "random",
    string_length: StringLength = 128,
    string_data: StringData = None,
    output_format: Annotated[Format, typer.Option("--format", help="table, json or csv.")] = Format.table,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write throughput against p99 per config (PNG; needs matplotlib).",
            show_default=False,
        ),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir",
            help="Write the best config as OUT/MODEL/config.pbtxt with the version folders: a repository.",
            show_default=False,
        ),
    ] = None,
    link: Annotated[
        bool,
        typer.Option("--link", help="With --output-dir: link the version folders instead of copying them."),
    ] = False,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Measured configs are kept here; an interrupted run resumes from it (default: a "
            "file per model and repository or server in ~/.cache/tcli/analyze/).",
            show_default=False,
        ),
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Ignore the checkpoint: measure everything again.")
    ] = False,
) -> None:
    """Find the config with the most throughput under a p99 latency budget: instance count, max batch
    size, dynamic batching (preferred batch size, queue delay), python models in a process or in the
    server, onnxruntime's threads. Each candidate is loaded as a variant of the model and measured as
    tcli perf measures; in-process, the best are then served over HTTP, and the concurrency
    recommended is one where p99 meets the budget served. Ctrl-C stops; the same command resumes."""
    from rich.console import Console

    from server.backends.devices import visible_gpu_count
    from tcli.analyze.measure import InputOptions, MeasureOptions
    from tcli.analyze.results import Constraints
    from tcli.analyze.run import run
    from tcli.analyze.session import Plan, Session
    from tcli.analyze.space import Bounds

    if latency_budget is not None and latency_budget <= 0:
        raise CliError("--latency-budget must be more than 0 ms")
    if min_throughput is not None and min_throughput <= 0:
        raise CliError("--min-throughput must be more than 0 infer/sec")
    if min_instance_count < 1 or max_instance_count < min_instance_count:
        raise CliError("--min-instance-count must be 1 or more and --max-instance-count at least as many")
    if max_batch_size is not None and max_batch_size < 1:
        raise CliError("--max-batch-size must be 1 or more")
    if max_concurrency < 1:
        raise CliError("--max-concurrency must be 1 or more")
    if measurement_interval <= 0:
        raise CliError("--measurement-interval must be more than 0 msec")
    if stability_percentage <= 0:
        raise CliError("--stability-percentage must be more than 0")
    if measurement_request_count < 0:
        raise CliError("--measurement-request-count must be 0 or more")
    if max_trials < 3:
        raise CliError("--max-trials must be 3 or more: stability compares the last 3 windows")
    if link and output_dir is None:
        raise CliError("--link goes with --output-dir")
    if url is None and repository is None:
        if not DEFAULT_REPOSITORY.is_dir():
            raise CliError(
                "no repository given and ./model_repository does not exist: pass the repository folder"
            )
        repository = DEFAULT_REPOSITORY
    if url is not None and output_dir is not None and repository is None:
        raise CliError(
            "--output-dir with -u needs the repository folder (REPO) too: the model's version folders are copied "
            "from it"
        )
    if repository is not None and not repository.is_dir():
        raise CliError(
            f"model repository '{repository}' is not a folder: pass the folder that holds the models"
        )
    if url is None:
        assert repository is not None
        folder = repository / model_name
        if not folder.is_dir():
            known = sorted(p.name for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
            raise CliError(
                f"unknown model '{model_name}': {repository} has no folder '{model_name}' "
                f"(its models: {', '.join(known) or 'none'})"
            )

    constraints = Constraints(
        latency_budget_ms=latency_budget,
        min_throughput=min_throughput,
        objective=objective.value,
        tolerance=min(stability_percentage / 100.0, MAX_TIE),
    )
    measure = MeasureOptions(
        measurement_ms=measurement_interval,
        stability=stability_percentage / 100.0,
        max_trials=max_trials,
        max_concurrency=max_concurrency,
        min_requests=measurement_request_count,
    )
    bounds = Bounds(
        min_instance_count=min_instance_count,
        max_instance_count=max_instance_count,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching.value,
        preferred_batch_sizes=_preferred(preferred_batch_sizes),
        queue_delays_us=_int_list(queue_delays, "--queue-delays"),
        python_placement=python_placement.value,
        intra_op_threads=_int_list(intra_op_threads, "--intra-op-threads"),
        inter_op_threads=_int_list(inter_op_threads, "--inter-op-threads"),
        gpu_count=visible_gpu_count(),
    )
    inputs = InputOptions(list(shape or []), input_data, string_length, string_data)
    plan = Plan(
        model=model_name,
        mode=mode.value,
        constraints=constraints,
        measure=measure,
        bounds=bounds,
        inputs=inputs,
        repository=repository,
        output_dir=output_dir,
        link=link,
        plot=plot,
        output_format=output_format.value,
        checkpoint=checkpoint or default_checkpoint(model_name, url, repository),
        checkpoint_given=checkpoint is not None,
        fresh=fresh,
        where=url or f"in-process: {repository.resolve() if repository is not None else ''}",
    )
    console = Console(soft_wrap=output_format != Format.table)
    err = Console(stderr=True)
    session = Session(plan, console, err)
    try:
        run(session, url, protocol.value)
    except KeyboardInterrupt:
        saved = session.checkpoint.path if session.checkpoint is not None else None
        where = (
            f"; the configs measured so far are in {saved}: run the same command again to resume"
            if saved
            else ""
        )
        raise CliError(f"interrupted{where}", INTERRUPTED_EXIT) from None
