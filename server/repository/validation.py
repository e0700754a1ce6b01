"""Validate whole model repositories: each model's config and files, then the ensembles across them.

A broken model never stops the others from being checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from server.backends.base import DEFAULT_BACKEND_DIRECTORY, DependencyMissing
from server.config import backends
from server.config.batch_io_rules import check_batch_io
from server.config.environment_rules import check_execution_env
from server.config.model_folder import ModelFolder, select_versions
from server.config.parse import CONFIG_FILENAME, ConfigParseError, SourceText, new_config, read_config
from server.config.problems import ModelReport, Problem, RepositoryReport
from server.config.validate import Findings, check_backend, validate_completed, validate_raw
from server.protocol.errors import TritonError
from server.repository.layout import scan_repository

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def validate_repositories(
    repositories: list[Path],
    *,
    auto_complete: bool = True,
    gpu_count: int = 0,
    on_model: Callable[[str], None] | None = None,
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY,
    require_imports: bool = True,
) -> RepositoryReport:
    """`on_model` is called with each model's name before it is checked (for progress displays);
    `backend_directory` is --backend-directory; `require_imports`: a model whose code imports a
    package missing here is an error (else a warning, see validate_model)."""
    report = RepositoryReport(list(repositories))
    folders: list[ModelFolder] = []
    for repository in repositories:
        try:
            folders.extend(scan_repository(repository))
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            report.problems.append(
                Problem("error", str(exc), "pass the folder that holds the model folders", repository)
            )
    seen: dict[str, ModelFolder] = {}
    for folder in folders:
        if on_model:
            on_model(folder.name)
        model = validate_model(
            folder,
            auto_complete=auto_complete,
            gpu_count=gpu_count,
            backend_directory=backend_directory,
            require_imports=require_imports,
        )
        if folder.name in seen:
            model.problems.append(
                Problem(
                    "error",
                    f"model '{folder.name}' appears in more than one repository: {seen[folder.name].path} and "
                    f"{folder.path}; Triton marks it UNAVAILABLE",
                    "keep one copy, or rename one of them",
                    folder.path,
                )
            )
        seen.setdefault(folder.name, folder)
        report.models.append(model)
    _check_ensembles(report)
    return report


def validate_model(
    folder: ModelFolder,
    *,
    auto_complete: bool = True,
    gpu_count: int = 0,
    config_override: ModelConfig | None = None,
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY,
    require_imports: bool = True,
) -> ModelReport:
    """Check one model; `config_override` stands in for config.pbtxt (the load API's config);
    `backend_config` is --backend-config by backend, `backend_directory` --backend-directory.
    Without `require_imports`, model code that imports a package this machine lacks is a warning
    (a CI runner seldom has the serving image's packages) and the config is checked as written."""
    report = ModelReport(folder.name, folder.path, folder.versions)
    found = Findings(folder.name, None, report.problems)
    raw = config_override if config_override is not None else _read(folder, found, auto_complete)
    if raw is None:
        return report
    report.backend = raw.platform or raw.backend
    validate_raw(raw, folder, found, backend_directory=backend_directory)
    check_execution_env(raw, folder, found)
    try:
        config = _complete(raw, folder, auto_complete, gpu_count, backend_config, backend_directory)
    except TritonError as exc:
        if isinstance(exc, DependencyMissing) and not require_imports:
            found.warning(
                f"{exc.message} (not installed where this check runs)",
                f"install {exc.module} here, or give the model an EXECUTION_ENV_PATH that has it, to "
                "check its code too; add --require-imports where the serving image's packages are "
                "installed. The config was checked as written",
            )
        else:
            found.error(
                exc.message, _completion_fix(exc.message), ("platform",) if "backend" in exc.message else ()
            )
        if auto_complete:
            # the model file could not complete the config: still check the config as written
            try:
                written = _complete(raw, folder, False, gpu_count, backend_directory=backend_directory)
            except TritonError:
                return report
            validate_completed(written, folder, found, gpu_count=gpu_count)
            check_batch_io(written, found)
        return report
    report.config = config
    report.backend = config.platform or config.backend
    if not raw.backend and not raw.platform and config.backend:
        # the backend came from the model's files or name: look for it as for one written
        check_backend(config, folder, found, backend_directory)
    if (
        raw.max_batch_size != config.max_batch_size
        and found.source
        and found.source.line_of("max_batch_size")
    ):
        found.warning(
            f"max_batch_size {raw.max_batch_size} of model '{config.name}' was auto-completed to "
            f"{config.max_batch_size}, because every input and output of the model has a dynamic first "
            "dimension",
            "if the model must not batch, write the batch dimension into dims; otherwise set "
            f"max_batch_size: {config.max_batch_size} (dims exclude the batch dimension)",
            ("max_batch_size",),
        )
    validate_completed(config, folder, found, gpu_count=gpu_count)
    check_batch_io(config, found)
    _check_model_files(config, folder, found)
    return report


def load_refusals(report: ModelReport) -> list[Problem]:
    """The errors that keep the model from loading, the one Triton reports first first: the config's
    own rules before the folder's name, before what loading a version finds (problems.py's stages)."""
    blocking = (p for p in report.problems if p.severity == "error" and p.blocks_load)
    return sorted(blocking, key=lambda p: p.stage)


def _read(folder: ModelFolder, found: Findings, auto_complete: bool) -> ModelConfig | None:
    path = folder.config_path
    if not path.exists():
        found.source = None
        if not auto_complete:  # Triton's words: with auto-complete off, the file must be there
            found.problems.append(
                Problem(
                    "error",
                    f"failed to open text file for read {path}: No such file or directory",
                    "write the model's config.pbtxt, or start without --disable-auto-complete-config",
                    path,
                )
            )
            return None
        return new_config()  # Triton auto-completes a model without config.pbtxt from its files
    try:
        config, text = read_config(path)
    except ConfigParseError as exc:
        found.problems.append(Problem("error", exc.reason, exc.fix, exc.path, exc.line, exc.column))
        return None
    except TritonError as exc:
        found.problems.append(Problem("error", exc.message, None, path))
        return None
    found.source = SourceText(path, text)
    return config


def _complete(
    raw: ModelConfig,
    folder: ModelFolder,
    auto_complete: bool,
    gpu_count: int,
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY,
) -> ModelConfig:
    from server.config.complete import complete_config

    try:
        return complete_config(
            raw,
            folder,
            auto_complete=auto_complete,
            gpu_count=gpu_count,
            backend_config=backend_config,
            backend_directory=backend_directory,
        )
    except TritonError:
        raise
    except Exception as exc:  # a model file or model.py that fails in an unforeseen way must not stop the run
        raise _as_error(folder, exc) from None


def _as_error(folder: ModelFolder, exc: Exception) -> TritonError:
    from server.protocol.errors import internal

    return internal(f"completing the config of '{folder.name}' failed: {type(exc).__name__}: {exc}")


def _completion_fix(message: str) -> str | None:
    if "Could not determine backend" in message:
        return (
            'add platform: "onnxruntime_onnx" / "pytorch_libtorch" / "ensemble", or backend: "python", '
            "to config.pbtxt"
        )
    if "does not support batching" in message:
        return "the model's first dimension is fixed: set max_batch_size: 0 and give dims including that dimension"
    return None


def _check_model_files(config: ModelConfig, folder: ModelFolder, found: Findings) -> None:
    from server.config.model_files import check_model_file

    if config.platform == backends.ENSEMBLE or not config.default_model_filename:
        return
    for version in select_versions(config.version_policy, folder.versions):
        model_file = folder.version_path(version) / config.default_model_filename
        if model_file.exists():
            check_model_file(config, model_file, found)


def _check_ensembles(report: RepositoryReport) -> None:
    from server.config.ensemble import check_ensemble

    known = {m.name for m in report.models}
    configs = {m.name: m.config for m in report.models}
    served = {  # the versions each model's policy serves, which an ensemble's steps may ask for
        m.name: select_versions(m.config.version_policy, m.versions)
        for m in report.models
        if m.config is not None
    }
    for model in report.models:
        config = model.config
        if config is None or config.platform != backends.ENSEMBLE:
            continue
        if any(p.severity == "error" and p.blocks_load for p in model.problems):
            continue  # its own config is refused before its steps are looked at, as in Triton
        path = Path(model.path) / CONFIG_FILENAME
        source = SourceText(path, path.read_text(encoding="utf-8")) if path.exists() else None
        found = Findings(model.name, source, model.problems)
        refusal = _triton_ensemble_refusal(config, known, configs, served)
        if refusal is not None:  # what the server refuses the ensemble with, in the same words
            found.error(
                refusal, "see the ensemble's steps and the models they name", ("ensemble_scheduling",)
            )
            continue
        check_ensemble(config, known, configs, found)


def _triton_ensemble_refusal(
    config: ModelConfig,
    known: set[str],
    configs: Mapping[str, ModelConfig | None],
    served: Mapping[str, tuple[int, ...]],
) -> str | None:
    """What the server refuses the ensemble with, once its steps' models are loaded, or None."""
    from server.config.ensemble_steps import ensemble_error
    from server.repository import ensemble_deps

    def steps_of(name: str) -> list[str]:
        other = configs.get(name)
        return [step.model_name for step in other.ensemble_scheduling.step] if other is not None else []

    refusal = ensemble_deps.missing_models(config, known) or ensemble_deps.circular_dependency(
        config, steps_of
    )
    if refusal is not None:
        return refusal
    composing = {name: other for name, other in configs.items() if other is not None}
    if any(step.model_name not in composing for step in config.ensemble_scheduling.step):
        return None  # a step's own config is broken: check_ensemble says so
    return ensemble_deps.version_error(config, served) or ensemble_error(config, composing)
