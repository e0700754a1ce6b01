"""What the onnxruntime backend reads from model.onnx for a config: the auto-complete of inputs,
outputs and batching, and the check of a config against the graph (`tcli repo validate`).

The batch-dimension mistake (dims that include the batch dimension while max_batch_size > 0, or the
reverse) is the most common Triton question, so its message says in plain words what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import FileFindings
    from server.backends.onnx_signature import TensorSpec

# --backend-config=onnxruntime,default-max-batch-size (Triton's default is 4)
ONNX_DEFAULT_MAX_BATCH_SIZE = 4
DEFAULT_MAX_BATCH_SIZE_SETTING = "default-max-batch-size"


def complete_config(
    config: ModelConfig, model_file: Path, model_dir: Path, backend_config: Mapping[str, Mapping[str, str]]
) -> None:
    """Fill inputs, outputs and max_batch_size from the ONNX graph, as the onnxruntime backend does."""
    _auto_complete_onnx(config, model_file, default_max_batch_size(backend_config, "onnxruntime"))


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


def _data_type_value(name: str) -> int:
    from tritonclient.grpc import model_config_pb2

    return int(model_config_pb2.DataType.Value(name))


def check_model_file(config: ModelConfig, model_file: Path, found: FileFindings) -> None:
    """ONNX names, data types and ranks of the config against the graph."""
    from server.backends.onnx_signature import read_onnx_signature

    try:
        signature = read_onnx_signature(model_file)
    except TritonError as exc:
        found.error(exc.message, "re-export the model, or check that the file is a complete ONNX model")
        return
    m = config.name
    for kind, specs, tensors in (
        ("input", signature.inputs, config.input),
        ("output", signature.outputs, config.output),
    ):
        by_name = {s.name: s for s in specs}
        if kind == "input" and len(tensors) > len(specs):  # Triton counts before it reads names
            found.error(
                f"unable to load model '{m}', configuration expects {len(tensors)} inputs, model provides "
                f"{len(specs)}",
                f"the model's inputs are {', '.join(by_name) or '(none)'}: remove the others from config.pbtxt",
                ("input",),
            )
            continue
        for tensor in tensors:
            at = (kind, f'"{tensor.name}"')
            spec = by_name.get(tensor.name)
            if spec is None:
                allowed = ", ".join(by_name) or "(none)"
                found.error(
                    f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: {allowed}",
                    f"rename the {kind} in config.pbtxt to the name the model file uses",
                    at,
                )
                continue
            _compare_tensor(config, kind, tensor, spec, found, at)
        provided = {t.name for t in tensors} | (_server_inputs(config) if kind == "input" else set())
        missing = [s.name for s in specs if s.name not in provided]
        if kind == "input":
            _check_batch_inputs(config, by_name, found)
        if kind == "input" and missing:
            found.error(
                f"unable to load model '{m}', configuration expects {len(tensors)} inputs, model provides "
                f"{len(specs)}",
                f"add input(s) {', '.join(missing)} to config.pbtxt, or remove the inputs to let "
                "auto-complete fill them",
                ("input",),
            )


def _server_inputs(config: ModelConfig) -> set[str]:
    """Model inputs the server fills: the sequence batcher's control tensors and implicit state, and
    batch inputs."""
    made = {target for b in config.batch_input for target in b.target_name}
    if not config.HasField("sequence_batching"):
        return made
    batching = config.sequence_batching
    return made | {c.name for c in batching.control_input} | {s.input_name for s in batching.state}


def _check_batch_inputs(config: ModelConfig, by_name: dict[str, TensorSpec], found: FileFindings) -> None:
    for batch_input in config.batch_input:
        for target in batch_input.target_name:
            if target not in by_name:
                found.error(
                    f"unexpected batch input '{target}' for model '{config.name}', the model has no input "
                    f"of that name; its inputs are: {', '.join(by_name) or '(none)'}",
                    "set target_name to the model input that takes the batch input",
                    ("batch_input", f'"{target}"'),
                )


def _compare_tensor(
    config: ModelConfig, kind: str, tensor: object, spec: TensorSpec, found: FileFindings, at: tuple[str, ...]
) -> None:
    m = config.name
    name = tensor.name  # type: ignore[attr-defined]
    data_type = _enum_name(tensor, "data_type")
    if data_type != "TYPE_INVALID" and data_type != spec.data_type:
        found.error(
            f"unexpected datatype {data_type} for inference {kind} '{name}', expecting {spec.data_type} for {m}",
            f"set data_type: {spec.data_type}",
            (*at, "data_type"),
        )
    shape = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)  # type: ignore[attr-defined]
    dims = list(tensor.dims)  # type: ignore[attr-defined]
    batched = config.max_batch_size > 0
    full = ([-1] if batched else []) + shape
    if kind == "input" and batched and tensor.allow_ragged_batch:  # type: ignore[attr-defined]
        full = [-1]  # the backend hands a ragged input over as the 1-D concatenation of the batch
    if kind == "output" and any(name in b.target_name for b in config.batch_output):
        return  # a batch output's shape is the model's to choose: it is scattered by element counts
    model_shape = list(spec.shape)
    if len(full) != len(model_shape):
        found.error(
            f"model '{m}', tensor '{name}': the model expects {len(model_shape)} dimensions (shape "
            f"{_fmt(model_shape)}) but the model configuration specifies {len(full)} dimensions "
            f"({_explain(batched, full)})",
            _batch_fix(batched, dims, model_shape),
            (*at, "dims"),
        )
        return
    for index, (want, have) in enumerate(zip(model_shape, full, strict=True)):
        if want != -1 and have != want:
            found.error(  # Triton's words whether the ranks or a dimension differ
                f"model '{m}', tensor '{name}': the model expects {len(model_shape)} dimensions (shape "
                f"{_fmt(model_shape)}) but the model configuration specifies {len(full)} dimensions "
                f"({_explain(batched, full)})",
                _batch_fix(batched, dims, model_shape)
                if index == 0 and batched
                else f"use dims {_fmt(model_shape[1:] if batched else model_shape)}",
                (*at, "dims"),
            )
            return


def _fmt(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _explain(batched: bool, full: list[int]) -> str:
    if batched:
        return (
            "an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, "
            f"making complete shape {_fmt(full)}"
        )
    return f"max_batch_size is 0, so the complete shape is dims alone: {_fmt(full)}"


def _batch_fix(batched: bool, dims: list[int], model_shape: list[int]) -> str:
    if batched and len(dims) == len(model_shape):
        return (
            "dims exclude the batch dimension when max_batch_size > 0: "
            f"use dims {_fmt(model_shape[1:])}, not {_fmt(dims)}"
        )
    if not batched and len(dims) + 1 == len(model_shape) and model_shape[0] == -1:
        return (
            "the model has a batch dimension: set max_batch_size > 0 and keep dims "
            f"{_fmt(dims)} (dims exclude the batch dimension), or write the full shape {_fmt(model_shape)} in dims"
        )
    expected = model_shape[1:] if batched else model_shape
    return f"use dims {_fmt(expected)}"


def _enum_name(message: object, field_name: str) -> str:
    descriptor = message.DESCRIPTOR.fields_by_name[field_name]  # type: ignore[attr-defined]
    return str(descriptor.enum_type.values_by_number[getattr(message, field_name)].name)
