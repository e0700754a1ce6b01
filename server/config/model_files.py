"""Does the model file agree with its config? ONNX names, data types and ranks; TorchScript arity.

The batch-dimension mistake (dims that include the batch dimension while max_batch_size > 0, or the
reverse) is the most common Triton question, so its message says in plain words what to change.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from server.config.validate import Findings, enum_name
from server.protocol.errors import TritonError

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.onnx_signature import TensorSpec


def check_model_file(config: ModelConfig, model_file: Path, found: Findings) -> None:
    if config.backend == "onnxruntime":
        _check_onnx(config, model_file, found)
    elif config.backend == "pytorch":
        _check_torchscript(config, model_file, found)
    elif config.backend == "tensorrt":
        found.warning(
            f"model '{config.name}': TensorRT plans are checked only when loaded on a GPU",
            "run tcli serve on a machine with a GPU and TensorRT to check this model",
        )


def _check_onnx(config: ModelConfig, model_file: Path, found: Findings) -> None:
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


def _check_batch_inputs(config: ModelConfig, by_name: dict[str, TensorSpec], found: Findings) -> None:
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
    config: ModelConfig, kind: str, tensor: object, spec: TensorSpec, found: Findings, at: tuple[str, ...]
) -> None:
    m = config.name
    name = tensor.name  # type: ignore[attr-defined]
    data_type = enum_name(tensor, "data_type")
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
            found.error(
                f"model '{m}', tensor '{name}': the model expects shape {_fmt(model_shape)} but the model "
                f"configuration specifies shape {_fmt(full)} (dimension {index} differs)",
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


def _check_torchscript(config: ModelConfig, model_file: Path, found: Findings) -> None:
    from server.backends.pytorch_import import import_torch

    try:
        torch = import_torch()
    except ImportError:
        found.warning(
            f"model '{config.name}': torch is not installed, so model.pt was not checked",
            "pip install 'tcli[torch]' (on these machines: pip install torch==2.13.0 first)",
        )
        return
    try:
        with warnings.catch_warnings():  # torch 2.9+ marks TorchScript deprecated; Triton still serves it
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(model_file), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError or its own types for unreadable archives
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        found.error(
            f"cannot load TorchScript model {model_file}: {reason}",
            "save the model with torch.jit.save (a TorchScript archive, not a pickled state_dict)",
        )
        return
    arguments = [a.name for a in module.forward.schema.arguments[1:]]
    if len(arguments) != len(config.input):
        found.error(
            f"unable to load model '{config.name}', configuration expects {len(config.input)} inputs, "
            f"model provides {len(arguments)}",
            f"the model's forward() takes ({', '.join(arguments)}): list that many inputs, named "
            "INPUT__0, INPUT__1, ... or after the forward() arguments",
            ("input",),
        )
        return
    for index, tensor in enumerate(config.input):
        if tensor.name not in arguments and not tensor.name.endswith(f"__{index}"):
            found.error(
                f"input '{tensor.name}' of model '{config.name}' matches neither a forward() argument "
                f"({', '.join(arguments)}) nor the naming convention <name>__{index}",
                f"rename it to INPUT__{index} or to {arguments[index]}",
                ("input", f'"{tensor.name}"'),
            )
