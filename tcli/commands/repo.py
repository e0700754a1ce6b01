"""`tcli repo validate | scaffold | import | index`: check and create model repositories before deployment."""

from __future__ import annotations

import dataclasses
import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcli.errors import CliError
from tcli.help import HelpCommand

if TYPE_CHECKING:
    from server.config.scaffold import ScaffoldOptions

app = typer.Typer(
    help="Check, create and list Triton model repositories.", no_args_is_help=True, rich_markup_mode=None
)

DEFAULT_REPOSITORY = Path("model_repository")


class ValidateFormat(enum.StrEnum):
    table = "table"
    json = "json"
    github = "github"


class OutputFormat(enum.StrEnum):
    table = "table"
    json = "json"


class Kind(enum.StrEnum):
    cpu = "cpu"
    gpu = "gpu"


def _repositories(repositories: list[str] | None) -> list[str | Path]:
    if repositories:
        return list(repositories)
    if DEFAULT_REPOSITORY.is_dir():
        return [DEFAULT_REPOSITORY]
    raise CliError("no repository given and ./model_repository does not exist: pass the repository folder")


def _relabel(text: str | Path | None, copies: list[Any]) -> Any:
    """A path inside a downloaded copy of a bucket, written as the bucket path the user gave."""
    if text is None:
        return None
    for copy in copies:
        if copy.path is not None and copy.label != str(copy.path) and str(text).startswith(str(copy.path)):
            return copy.label + str(text)[len(str(copy.path)) :]
    return text


@app.command(cls=HelpCommand)
def validate(
    repositories: Annotated[
        list[str] | None,
        typer.Argument(
            help="Model repositories: folders or s3:// gs:// as:// paths (default: ./model_repository)."
        ),
    ] = None,
    format: Annotated[
        ValidateFormat, typer.Option("--format", "-f", help="table, json, or github (Actions annotations).")
    ] = ValidateFormat.table,
    strict: Annotated[bool, typer.Option(help="Fail on warnings too.")] = False,
    disable_auto_complete_config: Annotated[
        bool,
        typer.Option(
            "--disable-auto-complete-config", help="Check configs as written, as Triton does with this flag."
        ),
    ] = False,
    backend_directory: Annotated[
        Path, typer.Option(help="Folder of Python-based backends, as tcli serve --backend-directory.")
    ] = Path("/opt/tritonserver/backends"),
    require_imports: Annotated[
        bool,
        typer.Option(
            "--require-imports",
            help="A model.py importing a package not installed here is an error, not a warning "
            "(for checks run inside the serving image).",
        ),
    ] = False,
) -> None:
    """Check every model as Triton would when loading it, plus what Triton finds only at run time.

    Exit code 0 when valid, 1 when any model has an error (or a warning, with --strict).
    """
    from rich.console import Console

    from server.config.problems import Problem
    from server.repository.sources import local_copies
    from server.repository.validation import validate_repositories
    from tcli import render

    err = Console(stderr=True)
    show_progress = format == ValidateFormat.table and err.is_terminal
    with local_copies(_repositories(repositories)) as copies:
        repos = [copy.path for copy in copies if copy.path is not None]
        if show_progress:
            with err.status("checking models…") as status:
                report = validate_repositories(
                    repos,
                    auto_complete=not disable_auto_complete_config,
                    on_model=lambda name: status.update(f"checking [bold]{name}[/]…"),
                    backend_directory=backend_directory,
                    require_imports=require_imports,
                )
        else:
            report = validate_repositories(
                repos,
                auto_complete=not disable_auto_complete_config,
                backend_directory=backend_directory,
                require_imports=require_imports,
            )
        report.repositories = [copy.label for copy in copies]
        report.problems[:0] = [
            Problem("error", copy.error, "check the path and the storage credentials", copy.label)
            for copy in copies
            if copy.error
        ]
        for model in report.models:
            model.path = _relabel(model.path, copies)
            model.problems = [dataclasses.replace(p, file=_relabel(p.file, copies)) for p in model.problems]
        report.problems = [dataclasses.replace(p, file=_relabel(p.file, copies)) for p in report.problems]
    if format == ValidateFormat.json:
        print(render.validation_json(report))
    elif format == ValidateFormat.github:
        text = render.github_annotations(report)
        if text:
            print(text)
    else:
        console = Console()
        if report.models:
            console.print(render.validation_table(report))
        for line in render.problem_lines(report):
            console.print(line, highlight=False, soft_wrap=True)
        console.print(render.validation_summary(report))
    if report.has_errors(strict=strict):
        raise typer.Exit(1)


@app.command(cls=HelpCommand)
def scaffold(
    model_file_or_name: Annotated[
        str,
        typer.Argument(
            metavar="MODEL_FILE",
            help="An ONNX (.onnx) or TorchScript (.pt) file, a Hugging Face model folder (config.json, "
            "weights, tokenizer: a language model generating with transformers); with --backend python, "
            "the model name.",
        ),
    ],
    repository: Annotated[
        Path, typer.Option("--repository", "--repo", "-r", help="Repository to create the model in.")
    ] = DEFAULT_REPOSITORY,
    name: Annotated[
        str | None, typer.Option(help="Model name (default: the file name without extension).")
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="'python' writes a model.py skeleton instead of copying a file.")
    ] = None,
    max_batch_size: Annotated[
        int | None, typer.Option(help="0 for no batching (default: 4 when the model can batch).")
    ] = None,
    dynamic_batching: Annotated[
        bool | None,
        typer.Option("--dynamic-batching/--no-dynamic-batching", help="Default: on when max_batch_size > 1."),
    ] = None,
    instance_count: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Instances of the model to run in parallel (default 1; a language model: by the cores).",
        ),
    ] = None,
    kind: Annotated[Kind, typer.Option(help="Instance kind.")] = Kind.cpu,
    input: Annotated[
        list[str] | None,
        typer.Option("--input", help="NAME:TYPE:DIMS, e.g. INPUT__0:FP32:3,224,224 (repeatable)."),
    ] = None,
    output: Annotated[list[str] | None, typer.Option("--output", help="NAME:TYPE:DIMS (repeatable).")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing config.pbtxt.")] = False,
    copy_weights: Annotated[
        bool,
        typer.Option(
            "--copy-weights/--no-copy-weights",
            help="A Hugging Face folder: copy it into the version folder (default), or name it where it is.",
        ),
    ] = True,
) -> None:
    """Create <repository>/<name>/config.pbtxt and <name>/1/<model file> from a model file.

    From a Hugging Face model folder: a decoupled python model in Triton's LLM conventions
    (text_input, stream, sampling_parameters -> text_output) that streams token by token, with
    max_batch_size and instances chosen for this machine.
    """
    from server.backends import table
    from server.config import scaffold as sc
    from server.config.model_folder import scan_model
    from server.config.scaffold_llm import is_huggingface_folder, write_llm_folder
    from server.protocol.errors import TritonError
    from server.repository.validation import validate_model

    try:
        options = sc.ScaffoldOptions(
            name=name or "",
            max_batch_size=max_batch_size,
            dynamic_batching=dynamic_batching,
            instance_count=instance_count or 1,
            instance_kind="KIND_GPU" if kind == Kind.gpu else "KIND_CPU",
            inputs=tuple(sc.parse_tensor_arg(s) for s in input or ()),
            outputs=tuple(sc.parse_tensor_arg(s) for s in output or ()),
        )
        # the backend's default model file says what to write (server/backends/table.py)
        entry = table.built_in(backend) if backend is not None else None
        backend_file = entry.model_file if entry is not None else None
        if backend is None and is_huggingface_folder(Path(model_file_or_name)):
            hf_folder = Path(model_file_or_name)
            options = _named(options, name or hf_folder.resolve().name)
            options = dataclasses.replace(options, instance_count=instance_count or 0)
            folder, sizing = write_llm_folder(repository, hf_folder, options, copy=copy_weights, force=force)
            print(f"chose {sizing.describe()}")
        elif backend_file == "model.py":
            options = _named(options, name or model_file_or_name)
            config = sc.config_for_python(options)
            folder = sc.write_model_folder(repository, config, None, "model.py", force=force)
        elif backend is not None and backend_file not in ("model.onnx", "model.pt"):
            raise CliError(f"--backend {backend} is not scaffolded: use python, or pass an .onnx or .pt file")
        else:
            model_file = Path(model_file_or_name)
            if not model_file.is_file():
                raise CliError(f"model file '{model_file}' not found: pass an .onnx or .pt file")
            options = _named(options, name or model_file.stem)
            if model_file.suffix == ".onnx" or backend_file == "model.onnx":
                config = sc.config_for_onnx(model_file, options)
                file_name = "model.onnx"
            elif model_file.suffix in (".pt", ".pth", ".torchscript") or backend_file == "model.pt":
                config = sc.config_for_torchscript(options)
                file_name = "model.pt"
            else:
                raise CliError(
                    f"cannot tell the backend of '{model_file.name}': use .onnx or .pt, or --backend"
                )
            folder = sc.write_model_folder(repository, config, model_file, file_name, force=force)
    except TritonError as exc:
        raise CliError(exc.message) from None
    report = validate_model(scan_model(folder, repository))
    print(f"created {folder / 'config.pbtxt'} and {folder / '1'}/")
    for problem in report.problems:
        print(f"{problem.severity}: {problem.one_line()}", file=sys.stderr)
    errors = sum(problem.severity == "error" for problem in report.problems)
    warnings = len(report.problems) - errors
    verdict = "invalid" if errors else "valid"  # as `tcli repo validate` says it
    print(f"validated {report.name}: {verdict}; {errors} errors, {warnings} warnings")
    if report.status == "error":
        raise typer.Exit(1)


def _named(options: ScaffoldOptions, name: str) -> ScaffoldOptions:
    import dataclasses

    return dataclasses.replace(options, name=name)


@app.command("import", cls=HelpCommand)
def import_(
    model_uri: Annotated[
        str,
        typer.Argument(
            metavar="MODEL_URI",
            help="models:/NAME/VERSION, models:/NAME@ALIAS, runs:/RUN_ID/PATH, or a local MLmodel folder.",
        ),
    ],
    repository: Annotated[
        Path, typer.Option("--repository", "--repo", "-r", help="Repository to create the model in.")
    ] = DEFAULT_REPOSITORY,
    name: Annotated[
        str | None, typer.Option(help="Model name (default: the registered model's or the artifact's).")
    ] = None,
    version: Annotated[
        int | None, typer.Option(min=1, help="Version folder (default: the registry version, else 1).")
    ] = None,
    max_batch_size: Annotated[
        int | None, typer.Option(help="0 for no batching (default: 4 when the model can batch).")
    ] = None,
    dynamic_batching: Annotated[
        bool | None,
        typer.Option("--dynamic-batching/--no-dynamic-batching", help="Default: on when max_batch_size > 1."),
    ] = None,
    instance_count: Annotated[
        int, typer.Option(min=1, help="Instances of the model to run in parallel.")
    ] = 1,
    tracking_uri: Annotated[
        str | None,
        typer.Option(envvar="MLFLOW_TRACKING_URI", help="The MLflow tracking server (models:/, runs:/)."),
    ] = None,
    timeout: Annotated[
        int, typer.Option(min=1, help="Seconds to wait for each answer of the tracking server.")
    ] = 30,
    force: Annotated[bool, typer.Option(help="Replace an existing version folder and config.")] = False,
    format: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.table,
) -> None:
    """Import an MLflow model: an ONNX flavour as an onnxruntime model, a pyfunc model as a python model.

    The model is downloaded with mlflow (pip install 'tcli[mlflow]') and validated straight away.
    """
    import json
    import tempfile

    from rich.console import Console

    from server.config.model_folder import scan_model
    from server.config.scaffold import ScaffoldOptions
    from server.protocol.errors import TritonError
    from server.repository.validation import validate_model
    from tcli.mlflow_import import report as import_report
    from tcli.mlflow_import.entry import write_entry
    from tcli.mlflow_import.fetch import fetch_model

    if name is not None and (not name or "/" in name or name in (".", "..")):
        raise CliError(f"--name '{name}' is not a model folder name")
    with tempfile.TemporaryDirectory(prefix="tcli-mlflow-") as download:
        model = fetch_model(model_uri, Path(download), tracking_uri=tracking_uri, timeout=timeout)
        options = ScaffoldOptions(
            name=name or model.name,
            max_batch_size=max_batch_size,
            dynamic_batching=dynamic_batching,
            instance_count=instance_count,
        )
        try:
            entry = write_entry(model, repository, options, version or model.version or 1, force=force)
        except TritonError as exc:
            raise CliError(exc.message) from None
    report = validate_model(scan_model(entry.folder, repository))
    if format == OutputFormat.json:
        print(json.dumps(import_report.as_dict(model_uri, entry, report), indent=2))
    else:
        import_report.show(Console(), model_uri, entry, report)
    if report.status == "error":
        raise typer.Exit(1)


@app.command(cls=HelpCommand)
def index(
    repositories: Annotated[
        list[str] | None,
        typer.Argument(
            help="Model repositories: folders or s3:// gs:// as:// paths (default: ./model_repository)."
        ),
    ] = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.table,
) -> None:
    """List the models and versions in repositories, and which versions the version policy serves."""
    import json

    from rich.console import Console

    from server.repository.index import index_rows
    from server.repository.sources import local_copies
    from tcli import render

    with local_copies(_repositories(repositories)) as copies:
        failed = [copy for copy in copies if copy.error]
        if failed:
            raise CliError(f"cannot read model repository '{failed[0].label}': {failed[0].error}")
        rows = []
        for copy in copies:
            assert copy.path is not None
            try:
                found = index_rows([copy.path])
            except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
                raise CliError(f"{exc}: pass the folder that holds the model folders") from None
            for row in found:
                rows.append({**row, "repository": copy.label})
    if format == OutputFormat.json:
        print(json.dumps(rows, indent=2))
    else:
        Console().print(render.index_table(rows))
