"""The rules Triton applies to one model's config when it loads it, plus what it finds only at run time.

Each rule adds a Problem worded as Triton's message where Triton has one, with a plain-words fix and
the config.pbtxt line to edit. Rules that need other models (ensembles) or the model file live in
ensemble.py and model_files.py (which asks each backend to check its own file).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from server.backends.base import DEFAULT_BACKEND_DIRECTORY
from server.backends.locate import BackendNotFound, locate_backend
from server.config import backends
from server.config.ensemble_graph import platform_error, scheduling_error
from server.config.parse import SourceText
from server.config.problems import (
    STAGE_CONFIG,
    STAGE_INSTANCES,
    STAGE_LOAD,
    STAGE_MODEL_FILE,
    STAGE_NAME,
    Problem,
    Severity,
)
from server.config.reshape_rules import reshape_error
from server.config.runtime_rules import runtime_library_error

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.config.model_folder import ModelFolder

_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_FALSE_TRUE_FIELDS = ("int32_false_true", "fp32_false_true", "bool_false_true")


@dataclass
class Findings:
    """Collects problems for one model and points each at a line of its config.pbtxt."""

    model: str
    source: SourceText | None
    problems: list[Problem] = field(default_factory=list)

    def add(
        self,
        severity: Severity,
        message: str,
        fix: str | None = None,
        at: tuple[str, ...] = (),
        blocks_load: bool = True,
        stage: int = STAGE_CONFIG,
    ) -> None:
        line = self.source.line_of(*at) if self.source and at else None
        path = self.source.path if self.source else None
        self.problems.append(Problem(severity, message, fix, path, line, None, blocks_load, stage))

    def error(
        self,
        message: str,
        fix: str | None = None,
        at: tuple[str, ...] = (),
        blocks_load: bool = True,
        stage: int = STAGE_CONFIG,
    ) -> None:
        self.add("error", message, fix, at, blocks_load, stage)

    def warning(self, message: str, fix: str | None = None, at: tuple[str, ...] = ()) -> None:
        self.add("warning", message, fix, at)


def enum_name(message: object, field_name: str) -> str:
    descriptor = message.DESCRIPTOR.fields_by_name[field_name]  # type: ignore[attr-defined]
    return str(descriptor.enum_type.values_by_number[getattr(message, field_name)].name)


def validate_raw(
    config: ModelConfig,
    folder: ModelFolder,
    found: Findings,
    *,
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY,
) -> None:
    """Rules on the config as written, before completion fills in defaults (`backend_directory`:
    --backend-directory, where Python-based backends are looked for)."""
    m = config.name or folder.name
    if config.name and config.name != folder.name:
        found.error(
            f"unexpected directory name '{folder.name}' for model '{config.name}', "
            "directory name must equal model name",
            f'set name: "{folder.name}" or rename the folder to {config.name}',
            ("name",),
            stage=STAGE_NAME,
        )
    refusal = platform_error(config, m) if config.platform else None
    if refusal is not None:
        found.error(
            refusal,
            f"use one of {', '.join(sorted(p for p in backends.PLATFORMS if p != 'libtorch'))}, "
            'or a backend such as backend: "python" (an ensemble names no backend)',
            ("backend",) if config.backend else ("platform",),
        )
    else:
        check_backend(config, folder, found, backend_directory)
    if config.max_batch_size < 0:
        found.error(
            f"'max_batch_size' must be non-negative value for {m}",
            "use 0 for a model without a batch dimension, or the largest batch it accepts",
            ("max_batch_size",),
        )
    refusal = scheduling_error(config, m)
    if refusal is not None:
        found.error(
            refusal,
            'an ensemble has platform: "ensemble", no instance_group, optimization or model_warmup, and '
            "steps whose tensors flow from its inputs to its outputs",
            ("ensemble_scheduling",) if config.HasField("ensemble_scheduling") else ("platform",),
        )
    for group in config.instance_group:
        if group.count < 0:
            found.error(
                f"instance group {group.name or '<unnamed>'} of model {m} must specify count >= 1",
                "set count to the number of parallel instances (1 or more)",
                ("instance_group", "count"),
                blocks_load=False,
            )


def check_backend(config: ModelConfig, folder: ModelFolder, found: Findings, backend_directory: Path) -> None:
    """The backend the config names (or its platform implies) is one loading would find; a
    `runtime` library is looked for where Triton looks for it."""
    m = config.name or found.model
    platform, backend = config.platform, config.backend
    if platform and platform not in backends.PLATFORMS:
        return  # a backend a user added may name any platform
    if platform and backend:
        expected = backends.PLATFORMS[platform].backend
        if expected and backend != expected:
            found.error(
                f"platform '{platform}' is served by backend '{expected}' but model '{m}' sets "
                f"backend '{backend}'",
                f'remove backend, or set backend: "{expected}"',
                ("backend",),
                blocks_load=False,  # Triton loads it with the backend the config names
            )
            return
    backend = backend or (backends.PLATFORMS[platform].backend if platform else "")
    if not backend:
        return
    version_path = folder.version_path(folder.versions[-1]) if folder.versions else None
    refusal = runtime_library_error(config.runtime, backend, m, version_path, folder.path, backend_directory)
    if refusal is not None:
        found.error(refusal[0], refusal[1], ("runtime",), stage=STAGE_LOAD)
        return
    try:  # where loading looks, in the same order and words (server/backends/locate.py)
        locate_backend(backend, config.runtime, backend_directory, m)
    except BackendNotFound as exc:
        at = ("runtime",) if config.runtime else ("backend",) if config.backend else ("platform",)
        if backend in backends.KNOWN_BACKENDS and not config.runtime:
            found.warning(
                exc.message,
                f"'{backend}' is one of Triton's own backends: serve this model with Triton, or convert it "
                "to ONNX, TorchScript or a python model",
                at,
            )
        else:
            found.error(exc.message, exc.fix, at, stage=STAGE_LOAD)


def validate_completed(
    config: ModelConfig, folder: ModelFolder, found: Findings, *, gpu_count: int = 0
) -> None:
    """Rules on the completed config (what the server would run)."""
    _check_versions(config, folder, found)
    _check_tensors(config, found, "input")
    _check_tensors(config, found, "output")
    _check_labels(config, folder, found)
    _check_dynamic_batching(config, found)
    _check_sequence_batching(config, found)
    _check_instance_groups(config, found, gpu_count)
    _check_warmup(config, folder, found)
    _check_response_cache(config, found)


def _check_versions(config: ModelConfig, folder: ModelFolder, found: Findings) -> None:
    from server.config.model_folder import select_versions

    m = config.name
    for name in folder.ignored:
        found.warning(
            f"folder '{name}' in model '{m}' is ignored: version folders must be positive integers "
            "not starting with 0",
            f"rename it to a number such as {name.lstrip('0vV') or '1'} if it holds a version",
        )
    policy = config.version_policy
    unavailable = f"at least one version must be available under the version policy of model '{m}'"
    if not folder.versions:
        found.error(
            unavailable,
            f"put the model in a numbered version folder: {folder.path}/1/"
            f"{config.default_model_filename or 'model.<ext>'}",
            stage=STAGE_LOAD,
        )
        return
    if policy.WhichOneof("policy_choice") == "specific":
        for version in policy.specific.versions:
            if version not in folder.versions:
                found.error(
                    f"version {version} is specified for model '{m}', but the version directory is not present",
                    f"create {folder.path}/{version}/ or remove {version} from version_policy specific",
                    ("version_policy", str(version)),
                    blocks_load=False,  # Triton logs it and serves the versions that are there
                )
    if not select_versions(policy, folder.versions):
        found.error(
            unavailable,
            "serve at least one version: latest { num_versions: 1 } or a version folder that exists",
            ("version_policy",),
            stage=STAGE_LOAD,
        )
    if config.platform == backends.ENSEMBLE or not config.default_model_filename:
        return
    if not backends.default_model_filename(config.platform, config.backend):
        return  # a backend a user added finds its own files: none is required
    for version in select_versions(policy, folder.versions):
        model_file = folder.version_path(version) / config.default_model_filename
        if not model_file.exists():
            found.error(
                f"unable to find '{config.default_model_filename}' for model '{m}' version {version}",
                f"put the model file at {model_file}, or set default_model_filename",
                stage=STAGE_MODEL_FILE,
            )


def _io_label(config: ModelConfig, kind: str) -> str:
    return "model input" if kind == "input" else "model output"


def _check_tensors(config: ModelConfig, found: Findings, kind: str) -> None:
    m = config.name
    tensors = list(getattr(config, kind))
    label = _io_label(config, kind)
    counts = Counter(t.name for t in tensors)
    for name, count in counts.items():
        if name and count > 1:
            found.error(
                f"{label} '{name}' is specified {count} times for {m}",
                f"give each {kind} a unique name",
                (kind, f'"{name}"'),
                blocks_load=False,
            )
    for tensor in tensors:
        at = (kind, f'"{tensor.name}"')
        if not tensor.name:
            found.error(f"{label} must specify 'name'", f"add name: to every {kind}", (kind,))
            continue
        if tensor.data_type == 0:
            found.error(
                f"{label} '{tensor.name}' must specify 'data_type'",
                "add data_type, e.g. TYPE_FP32",
                at,
            )
        if not tensor.dims:
            found.error(
                f"{label} '{tensor.name}' must specify 'dims'",
                "add dims, e.g. dims: [ 16 ]; for a scalar per batch item use dims: [ 1 ] with "
                "reshape: { shape: [ ] }",
                at,
            )
        elif any(d < -1 or d == 0 for d in tensor.dims):
            found.error(
                f"{label} '{tensor.name}' dimension must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension for {m}",
                "use positive sizes, or -1 for a dimension that varies",
                (*at, "dims"),
            )
        if tensor.HasField("reshape"):
            refusal = reshape_error(config, tensor, label)
            if refusal is not None:
                found.error(refusal[0], refusal[1], (*at, "reshape"))


def _check_labels(config: ModelConfig, folder: ModelFolder, found: Findings) -> None:
    for output in config.output:
        if not output.label_filename:
            continue
        at = ("output", f'"{output.name}"', "label_filename")
        path = folder.path / output.label_filename
        if not path.is_file():
            found.error(
                f"failed to open text file for read {path}: No such file or directory",
                f"create {path} with one label per line, or fix label_filename",
                at,
            )
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            found.error(f"label file {path} cannot be read: {exc}", "save it as UTF-8 text", at)
            continue
        while lines and not lines[-1].strip():
            lines.pop()
        dims = [d for d in output.dims if d != 1]
        if dims and all(d > 0 for d in dims):
            classes = math.prod(dims)
            if classes != len(lines):
                found.error(
                    f"label file '{output.label_filename}' has {len(lines)} labels but output "
                    f"'{output.name}' of model '{config.name}' has {classes} classes",
                    f"write exactly {classes} lines, one label per class index",
                    at,
                    blocks_load=False,
                )


def _check_dynamic_batching(config: ModelConfig, found: Findings) -> None:
    if not config.HasField("dynamic_batching"):
        return
    m, batching = config.name, config.dynamic_batching
    at = ("dynamic_batching",)
    if config.max_batch_size == 0:
        found.warning(
            f"dynamic batching is enabled for model '{m}' but max_batch_size is 0, so no requests "
            "can be batched",
            "set max_batch_size > 0 (dims exclude the batch dimension) or remove dynamic_batching",
            at,
        )
    for size in batching.preferred_batch_size:
        if size < 1:
            found.error(
                f"dynamic batching preferred size must be positive for {m}",
                None,
                (*at, "preferred_batch_size"),
            )
        elif config.max_batch_size > 0 and size > config.max_batch_size:
            found.error(
                f"dynamic batching preferred size must be <= max batch size for {m}",
                f"preferred_batch_size {size} is larger than max_batch_size {config.max_batch_size}",
                (*at, "preferred_batch_size"),
            )
    levels = batching.priority_levels
    if levels > 0:
        if not 1 <= batching.default_priority_level <= levels:
            found.error(
                f"default priority level must be in range [1, {levels}] for {m}",
                f"set default_priority_level between 1 and {levels}",
                (*at, "default_priority_level"),
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                found.error(
                    f"priority queue policy must have priority level in range [1, {levels}] for {m}",
                    None,
                    (*at, "priority_queue_policy"),
                )
    if batching.preserve_ordering:
        if levels > 1:
            found.error(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {m}",
                None,
                (*at, "preserve_ordering"),
            )
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        if any(p.timeout_action == 1 for p in policies):  # DELAY
            found.error(
                f"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {m}",
                "use timeout_action: REJECT, or turn preserve_ordering off",
                (*at, "DELAY"),
            )


def _check_sequence_batching(config: ModelConfig, found: Findings) -> None:
    if not config.HasField("sequence_batching"):
        return
    m, seq = config.name, config.sequence_batching
    kinds_seen: Counter[str] = Counter()
    names_seen: set[str] = set()
    for control_input in seq.control_input:
        if control_input.name and control_input.name in names_seen:
            found.error(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple "
                f"control kinds for {m}",
                "give each control_input its own name",
                ("control_input", f'"{control_input.name}"'),
            )
        names_seen.add(control_input.name)
        at = ("control_input", f'"{control_input.name}"')
        if not control_input.name:
            found.error(
                f"sequence batching control tensor must have a name for {m}", None, ("control_input",)
            )
        if not control_input.control:
            found.error(
                f"sequence batching control tensor '{control_input.name}' must specify a control for {m}",
                "add control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ]",
                at,
            )
        own_kinds = {enum_name(c, "kind") for c in control_input.control}
        if len(own_kinds) < len(control_input.control) or len(own_kinds) > 1:
            found.error(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple "
                f"control kinds for {m}",
                "use one control_input per control kind",
                at,
            )
        for control in control_input.control:
            kind = enum_name(control, "kind")
            kinds_seen[kind] += 1
            _check_control(m, kind, control, found, at)
    for kind, count in kinds_seen.items():
        if count > 1:
            found.error(
                f"sequence batching specifies multiple {kind} tensors for {m}",
                "keep one control_input for each control kind",
                (kind,),
            )
    for state in seq.state:
        at = ("state", f'"{state.input_name}"')
        if not state.input_name or not state.output_name:
            found.error(
                f"sequence batching state of model {m} must specify 'input_name' and 'output_name'", None, at
            )
        if state.data_type == 0:
            found.error(
                f"sequence batching state '{state.input_name}' must specify 'data_type' for {m}", None, at
            )
        if not state.dims:
            found.error(f"sequence batching state '{state.input_name}' must specify 'dims' for {m}", None, at)
    if seq.WhichOneof("strategy_choice") == "oldest":
        for size in seq.oldest.preferred_batch_size:
            if config.max_batch_size > 0 and size > config.max_batch_size:
                found.error(
                    f"sequence batching preferred size must be <= max batch size for {m}",
                    None,
                    ("oldest", "preferred_batch_size"),
                )


def _check_control(m: str, kind: str, control: object, found: Findings, at: tuple[str, ...]) -> None:
    present = [f for f in _FALSE_TRUE_FIELDS if len(getattr(control, f))]
    if kind == "CONTROL_SEQUENCE_CORRID":
        if present:
            found.error(
                "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                f"'bool_false_true' for CONTROL_SEQUENCE_CORRID for {m}",
                "give the CORRID control only a data_type",
                at,
            )
        data_type = enum_name(control, "data_type")
        if data_type not in _CORRID_TYPES:
            found.error(
                f"sequence batching must specify data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, "
                f"TYPE_INT32 or TYPE_STRING for CONTROL_SEQUENCE_CORRID for {m}",
                "add data_type: TYPE_UINT64 to the CORRID control",
                at,
            )
        return
    if len(present) != 1:
        found.error(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind} for {m}",
            "add exactly one, e.g. int32_false_true: [ 0, 1 ]",
            at,
        )
        return
    values = getattr(control, present[0])
    if len(values) != 2:
        found.error(
            f"sequence batching control '{present[0]}' must have exactly 2 entries for {kind} for {m}",
            "give the false value then the true value, e.g. [ 0, 1 ]",
            at,
        )


def _check_instance_groups(config: ModelConfig, found: Findings, gpu_count: int) -> None:
    for group in config.instance_group:
        kind = enum_name(group, "kind")
        at = ("instance_group",)
        if kind == "KIND_CPU" and group.gpus:
            found.error(
                f"instance group {group.name} of model {config.name} has kind KIND_CPU but specifies one or "
                "more GPUs",
                "remove gpus, or use kind: KIND_GPU",
                (*at, "gpus"),
                stage=STAGE_INSTANCES,  # Triton checks instance groups as it creates the model
            )
        if kind == "KIND_GPU":
            bad = [g for g in group.gpus if g < 0 or g >= gpu_count]
            if bad:
                # Triton's words, its minimum compute capability (6.0) printed as C++ prints a double
                found.error(
                    f"instance group {group.name} of model {config.name} specifies invalid or unsupported "
                    f"gpu id {bad[0]}. GPUs with at least the minimum required CUDA compute compatibility of "
                    f"6.000000 are: {', '.join(str(g) for g in range(gpu_count))}",
                    f"use GPU ids 0..{gpu_count - 1}"
                    if gpu_count
                    else "no GPU is visible here: use kind: KIND_CPU",
                    (*at, "gpus"),
                    stage=STAGE_INSTANCES,
                )
            elif gpu_count == 0:
                found.warning(
                    f"instance group KIND_GPU requested for model {config.name} but no GPU is visible",
                    "fine for a GPU deployment; to run here, use kind: KIND_CPU",
                    (*at, "KIND_GPU"),
                )
    _check_rate_limiters(config, found)


def _check_rate_limiters(config: ModelConfig, found: Findings) -> None:
    """instance_group rate_limiter resources (used with --rate-limit=execution_count): each named, and
    a name either global or per device, never both. Neither blocks a load here: with
    --rate-limit=off Triton ignores rate limiters, and with execution_count the rate limiter refuses
    the second at load (server/scheduling/rate_limiter.py)."""
    scope: dict[str, bool] = {}
    for group in config.instance_group:
        for resource in group.rate_limiter.resources:
            at = ("instance_group", "rate_limiter", "resources")
            if not resource.name:
                found.error(
                    f"a rate_limiter resource of instance group {group.name} of model {config.name} has no name",
                    'name it: resources [ { name: "R1" count: 1 } ]',
                    at,
                    blocks_load=False,
                )
                continue
            is_global = bool(getattr(resource, "global"))  # a Python keyword: no attribute syntax
            if scope.setdefault(resource.name, is_global) != is_global:
                found.error(
                    f'Resource "{resource.name}" is present as both global and device-specific resource in '
                    "the model configuration.",
                    f"give every '{resource.name}' resource the same global setting",
                    (*at, f'"{resource.name}"'),
                    blocks_load=False,
                )


def _check_warmup(config: ModelConfig, folder: ModelFolder, found: Findings) -> None:
    input_names = {i.name for i in config.input}
    for warmup in config.model_warmup:
        at = ("model_warmup", f'"{warmup.name}"')
        if config.max_batch_size > 0 and warmup.batch_size > config.max_batch_size:
            found.error(
                f"model_warmup '{warmup.name}' of model {config.name} has batch_size {warmup.batch_size} "
                f"larger than max_batch_size {config.max_batch_size}",
                None,
                at,
            )
        for name, data in warmup.inputs.items():
            if input_names and name not in input_names:
                found.error(
                    f"model_warmup '{warmup.name}' of model {config.name} names unknown input '{name}'",
                    f"use one of {', '.join(sorted(input_names))}",
                    at,
                )
            if data.WhichOneof("input_data_type") == "input_data_file":
                path = Path(folder.path, "warmup", data.input_data_file)
                if not path.is_file():
                    found.error(
                        f"model_warmup input file {path} of model {config.name} not found",
                        "put the raw tensor bytes in the model's warmup/ folder",
                        at,
                    )


def response_cache_refusal(model: str, decoupled: bool, sequence: bool) -> str | None:
    """Triton's reason for refusing a model that asks for the response cache, or None."""
    if decoupled:
        return (
            f"Response Cache does not currently support model {model} with 'decoupled' transaction "
            "policy. Please disable the response cache."
        )
    if sequence:
        return (
            f"Response Cache does not currently support model {model} with sequence batching scheduler. "
            "Please disable the response cache."
        )
    return None


def _check_response_cache(config: ModelConfig, found: Findings) -> None:
    """Triton refuses these whether or not the server has a cache (--cache-config)."""
    if not config.response_cache.enable:
        return
    sequence = config.WhichOneof("scheduling_choice") == "sequence_batching"
    message = response_cache_refusal(config.name, config.model_transaction_policy.decoupled, sequence)
    if message is not None:
        found.error(message, "remove response_cache { enable: true }", ("response_cache",))
