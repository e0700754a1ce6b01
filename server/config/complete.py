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

from server.backends.locate import DEFAULT_BACKEND_DIRECTORY, BackendNotFound, LocatedBackend, locate_backend
from server.config import backends
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.config.model_folder import ModelFolder

# --backend-config=onnxruntime,default-max-batch-size (Triton's default is 4)
ONNX_DEFAULT_MAX_BATCH_SIZE = 4
DEFAULT_MAX_BATCH_SIZE_SETTING = "default-max-batch-size"
DEFAULT_SEQUENCE_IDLE_MICROSECONDS = 1_000_000
# backends whose CPU instance groups default to two instances (core SetDefaultInstanceCount)
_TWO_CPU_INSTANCE_BACKENDS = frozenset({"onnxruntime", "tensorflow", "openvino"})


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
        _auto_complete_python(completed, added.python_file, folder, python_based=True)
    elif auto_complete:
        model_file = _latest_model_file(completed, folder)
        if model_file is not None and completed.backend == "onnxruntime":
            _auto_complete_onnx(completed, model_file, default_max_batch_size(backend_config, "onnxruntime"))
        elif model_file is not None and completed.backend == "python":
            _auto_complete_python(completed, model_file, folder)
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


def _latest_model_file(config: ModelConfig, folder: ModelFolder) -> Path | None:
    if not folder.versions or not config.default_model_filename:
        return None
    path = folder.version_path(folder.versions[-1]) / config.default_model_filename
    return path if path.exists() else None


def default_max_batch_size(backend_config: Mapping[str, Mapping[str, str]] | None, backend: str) -> int:
    """--backend-config=<backend>,default-max-batch-size=N (or the setting for every backend), else 4."""
    for scope in (backend, ""):
        value = (backend_config or {}).get(scope, {}).get(DEFAULT_MAX_BATCH_SIZE_SETTING)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise TritonError(
                    ErrorCode.INVALID_ARG,
                    f"--backend-config {scope or 'default'}: {DEFAULT_MAX_BATCH_SIZE_SETTING} must be an integer, got '{value}'",
                ) from None
    return ONNX_DEFAULT_MAX_BATCH_SIZE


def _auto_complete_onnx(config: ModelConfig, model_file: Path, max_batch_size: int) -> None:
    """Fill inputs, outputs and max_batch_size from the ONNX graph, as the onnxruntime backend does."""
    from server.backends.onnx_signature import read_onnx_signature

    signature = read_onnx_signature(model_file)
    if signature.supports_batching:
        # Keep an explicit non-batching config whose dims already include the batch dimension.
        includes_batch = any(
            len(io.dims) == len(spec.shape)
            for io in list(config.input) + list(config.output)
            for spec in signature.inputs + signature.outputs
            if spec.name == io.name
        )
        if config.max_batch_size == 0 and not includes_batch:
            config.max_batch_size = max_batch_size
        if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"autofill failed for model '{config.name}': model does not support batching while non-zero "
            "max_batch_size is specified",
        )
    batched = config.max_batch_size > 0
    made = {target for b in config.batch_input for target in b.target_name}  # the server feeds these
    for specs, ios in ((signature.inputs, config.input), (signature.outputs, config.output)):
        if ios:
            # as the onnxruntime backend: a config that lists tensors keeps its list (sequence models
            # leave their control and state tensors out on purpose)
            continue
        for spec in specs:
            if spec.name in made:
                continue
            io = ios.add()
            io.name = spec.name
            io.data_type = _data_type_value(spec.data_type)
            dims = spec.shape[1:] if batched else spec.shape
            if dims:
                io.dims.extend(dims)
            elif batched:  # a [batch] tensor: Triton writes dims [1] with an empty reshape
                io.dims.append(1)
                io.reshape.SetInParent()
    for io in list(config.input) + list(config.output):
        if io.data_type == 0:
            for spec in signature.inputs + signature.outputs:
                if spec.name == io.name:
                    io.data_type = _data_type_value(spec.data_type)


def _auto_complete_python(
    config: ModelConfig, model_file: Path, folder: ModelFolder, *, python_based: bool = False
) -> None:
    from server.backends.python import execution_env
    from server.backends.python.autocomplete import complete_by_model
    from server.protocol.config_json import from_json_dict, to_json_dict

    name = config.name or model_file.parent.parent.name
    env_path = execution_env.configured_path(config, folder.path)  # EXECUTION_ENV_PATH: the model's python
    if env_path is not None and execution_env.problem(env_path) is not None:
        return  # its load (and repo validate) says what is wrong with the environment
    environment = execution_env.prepare(config, folder.path)
    if environment is not None:
        completed = execution_env.auto_complete(
            environment, model_file, name, to_json_dict(config), python_based
        )
    else:
        completed = complete_by_model(
            model_file, name, lambda: to_json_dict(config), python_based=python_based
        )
    if completed is not None:  # None: the model's class completes nothing, the config stays as it is
        config.CopyFrom(from_json_dict(completed))


def _data_type_value(name: str) -> int:
    from server.config.parse import model_config_pb2

    return int(model_config_pb2().DataType.Value(name))


def _complete_core_defaults(config: ModelConfig, gpu_count: int) -> None:
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("sequence_batching") and config.sequence_batching.max_sequence_idle_microseconds == 0:
        config.sequence_batching.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_MICROSECONDS
    if config.platform != backends.ENSEMBLE:
        _complete_instance_groups(config, gpu_count)
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
            two = group.kind == kind.Value("KIND_CPU") and config.backend in _TWO_CPU_INSTANCE_BACKENDS
            group.count = 2 if two else 1
