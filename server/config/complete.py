"""Complete a parsed config the way Triton normalises it when it loads a model.

Order follows Triton: name from the folder, backend and platform, the default model file, the
backend's own auto-complete from the model file (ONNX signature, python `auto_complete_config`),
then the core defaults (version policy, instance groups, sequence idle time, pinned memory).
A model a Python-based backend serves (server/backends/locate.py) gets `runtime: "model.py"` and no
default model file, as Triton fills them, and is auto-completed by the backend's model.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from server.backends import table
from server.backends.base import DEFAULT_BACKEND_DIRECTORY
from server.backends.locate import BackendNotFound, LocatedBackend, locate_backend
from server.config import backends
from server.config.model_folder import select_versions
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.config.model_folder import ModelFolder

DEFAULT_SEQUENCE_IDLE_MICROSECONDS = 1_000_000


def complete_config(
    config: ModelConfig,
    folder: ModelFolder,
    *,
    auto_complete: bool = True,
    gpu_count: int = 0,
    backend_config: Mapping[str, Mapping[str, str]] | None = None,
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY,
) -> ModelConfig:
    """A completed copy of `config`; raises TritonError when Triton would refuse to load the model.
    `backend_config` is --backend-config by backend ("" for every backend); `backend_directory` is
    --backend-directory."""
    completed = type(config)()
    completed.CopyFrom(config)
    if not completed.name:
        completed.name = folder.name
    _complete_backend(completed, folder)
    added = _added_backend(completed, backend_directory)
    if added is not None and added.python_file is not None and not completed.runtime:
        completed.runtime = added.python_file.name
    if not completed.default_model_filename and completed.platform != backends.ENSEMBLE and added is None:
        # Triton's backend-named default; a Python-based backend's model gets none, as from Triton
        completed.default_model_filename = backends.default_model_filename(
            completed.platform, completed.backend
        )
    if auto_complete and added is not None and added.python_file is not None:
        from server.backends.python import backend as python_backend  # runs every Python-based backend

        python_backend.complete_config(completed, added.python_file, folder.path, {}, python_based=True)
    elif auto_complete:
        _auto_complete(completed, folder, backend_config or {})
    _complete_core_defaults(completed, gpu_count)
    return completed


def _complete_backend(config: ModelConfig, folder: ModelFolder) -> None:
    if config.platform in backends.PLATFORMS and not config.backend:
        config.backend = backends.PLATFORMS[config.platform].backend
    elif config.backend and not config.platform:
        config.platform = backends.BACKEND_PLATFORMS.get(config.backend, "")
    elif not config.platform and not config.backend:
        files: set[str] = set()
        if folder.versions:
            files = {p.name for p in folder.version_path(folder.versions[-1]).iterdir()}
        backend = backends.backend_from_files(files)
        if backend is None and "." in config.name and not config.default_model_filename:
            # Triton's custom-backend autofill: model "<anything>.<backend>" is served by <backend>
            config.backend = config.name.split(".", 1)[1]
            config.default_model_filename = f"model.{config.backend}"
            return
        if backend is None:
            raise TritonError(
                ErrorCode.INVALID_ARG,
                f"Invalid model name: Could not determine backend for model '{config.name}' with no "
                "backend in model configuration. Expected model name of the form 'model.<backend_name>'.",
            )
        config.backend = backend
        config.platform = backends.BACKEND_PLATFORMS.get(backend, "")


def _added_backend(config: ModelConfig, directory: Path) -> LocatedBackend | None:
    """The backend a user added that serves the model (None: a built-in one, or none at all, which
    validation reports)."""
    if config.platform == backends.ENSEMBLE or not config.backend:
        return None
    try:
        located = locate_backend(config.backend, config.runtime, directory, config.name)
    except BackendNotFound:
        return None
    return None if located.built_in else located


def _auto_complete(
    config: ModelConfig, folder: ModelFolder, backend_config: Mapping[str, Mapping[str, str]]
) -> None:
    """The built-in backend's own auto-complete from the latest version's model file, if it has one."""
    entry = table.built_in(config.backend)
    model_file = _latest_model_file(config, folder)
    if entry is None or model_file is None:
        return
    complete = entry.module().complete_config
    if complete is not None:
        complete(config, model_file, folder.path, backend_config)


def _latest_model_file(config: ModelConfig, folder: ModelFolder) -> Path | None:
    """The model file of the newest version the policy serves that has one (Triton's backends
    complete each version from its own file; a version folder left empty is not served anyway)."""
    if not folder.versions or not config.default_model_filename:
        return None
    served = (
        select_versions(config.version_policy, folder.versions) if config.HasField("version_policy") else ()
    )
    for version in sorted(served or folder.versions[-1:], reverse=True):
        path = folder.version_path(version) / config.default_model_filename
        if path.exists():
            return path
    return None


def _complete_core_defaults(config: ModelConfig, gpu_count: int) -> None:
    """core NormalizeModelConfig (and what ensemble validation sets), so the config served is
    Triton's: a batching model's preferred batch size is its max_batch_size unless it names some."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    batching = config.max_batch_size > 0
    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size and batching:
        config.dynamic_batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_MICROSECONDS
        if sequence.HasField("oldest") and not sequence.oldest.preferred_batch_size and batching:
            sequence.oldest.preferred_batch_size.append(config.max_batch_size)
    if config.platform != backends.ENSEMBLE:
        _complete_instance_groups(config, gpu_count)
    if config.HasField("ensemble_scheduling"):
        # Triton leaves an ensemble's optimization alone and sets its transaction policy
        config.model_transaction_policy.SetInParent()
        return
    config.optimization.input_pinned_memory.enable = True
    config.optimization.output_pinned_memory.enable = True


def _complete_instance_groups(config: ModelConfig, gpu_count: int) -> None:
    """core NormalizeInstanceGroup: one default group, names, KIND_AUTO resolved, default counts."""
    from server.config.parse import model_config_pb2

    kind = model_config_pb2().ModelInstanceGroup.Kind
    if not config.instance_group:
        group = config.instance_group.add()
        group.name = config.name
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == kind.Value("KIND_AUTO"):
            group.kind = kind.Value("KIND_GPU") if gpu_count > 0 else kind.Value("KIND_CPU")
        if group.kind == kind.Value("KIND_GPU") and not group.gpus:
            group.gpus.extend(range(gpu_count))
        if group.count == 0:  # proto3 cannot tell an explicit 0 from unset; negatives fail validation
            cpu = group.kind == kind.Value("KIND_CPU")
            group.count = backends.default_cpu_instances(config.backend) if cpu else 1
