"""PyTorch backend (`platform: "pytorch_libtorch"`, TorchScript model.pt).

Only TorchScript archives are loaded (torch.jit.load), never pickles, so a model file cannot run
arbitrary code when loaded. Inputs bind to forward() by argument name, or by Triton's `<name>__<index>`
convention, or else by the order of config inputs; outputs bind by `<name>__<index>` or by the order of
config outputs. `tcli repo validate`
checks a config's inputs against forward() (`check_model_file`).
"""

from __future__ import annotations

import functools
import traceback
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from server.backends.base import InstanceSpec, ModelContext, ModelError, ModelInstance, TensorModel
from server.backends.pytorch_import import import_torch
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import FileFindings


def _named_index(name: str) -> int | None:
    """The index of a `<name>__<index>` tensor name, read as Triton's pytorch backend reads it: all
    after the first "__" must be digits."""
    _, delimiter, index = name.partition("__")
    return int(index) if delimiter and index.isascii() and index.isdigit() else None


def _named_indices(names: list[str]) -> dict[int, str] | None:
    """{index: name} when every name follows `<name>__<index>`, else None."""
    indexed = {}
    for name in names:
        index = _named_index(name)
        if index is None:
            return None
        indexed[index] = name
    return indexed


def input_order(config_inputs: list[str], forward_arguments: list[str]) -> list[str]:
    """Config input names in the order forward() takes them, by the rules of Triton's pytorch backend:
    all named after forward()'s arguments, else all `<name>__<index>`, else the config's own order
    (its "strict config ordering")."""
    if all(name in forward_arguments for name in config_inputs):
        return sorted(config_inputs, key=forward_arguments.index)
    indexed = _named_indices(config_inputs)
    if indexed is None:
        return list(config_inputs)
    if sorted(indexed) != list(range(len(config_inputs))):
        raise TritonError(ErrorCode.INVALID_ARG, "input indices <name>__<index> must run 0..N-1 without gaps")
    return [indexed[i] for i in range(len(config_inputs))]


def model_inputs(config: ModelConfig) -> list[str]:
    """Every tensor forward() is given, as Triton's pytorch backend counts them: the config's inputs,
    the batch inputs the server makes, and a sequence model's control inputs and implicit state."""
    names = [i.name for i in config.input]
    names += [t for b in config.batch_input for t in b.target_name]
    sequence = config.sequence_batching
    names += [c.name for c in sequence.control_input]
    names += [state.input_name for state in sequence.state]
    return names


def model_outputs(config: ModelConfig) -> list[str]:
    """What forward() returns: the config's outputs and a sequence model's next implicit state."""
    return [o.name for o in config.output] + [state.output_name for state in config.sequence_batching.state]


def output_positions(config_outputs: list[str]) -> dict[str, int]:
    """Position of each config output in what forward() returns: by `<name>__<index>` when every
    output is so named, else by the config's order, as Triton's pytorch backend."""
    indexed = _named_indices(config_outputs)
    if indexed is None:
        return {name: order for order, name in enumerate(config_outputs)}
    return {name: index for index, name in indexed.items()}


@functools.cache
def _share_read_only_inputs() -> None:
    """Binary inputs are read-only numpy views on the request body. torch.from_numpy shares their
    memory and warns, once per process, that the tensor is not writable; forward() never writes its
    inputs, so sharing is safe. Spend that one warning here, silenced, so requests never show it.

    Measured alternatives: copying each input costs ~250 us per 4 MB; warnings.catch_warnings around
    each call ~4 us (and it is not thread-safe while instances run on their own threads); a
    process-wide filter is lost when set inside another catch_warnings block (as test runners do);
    torch.frombuffer (~6 us) warns the same way. torch.from_numpy itself takes ~1.4 us.
    """
    torch = import_torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.from_numpy(np.frombuffer(bytes(4), dtype=np.float32))


class TorchScriptModel(TensorModel):
    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:
        torch = import_torch()
        _share_read_only_inputs()
        self._torch = torch
        self._device = torch.device(f"cuda:{instance.device_id}" if instance.kind == "KIND_GPU" else "cpu")
        try:
            with warnings.catch_warnings():  # torch marks TorchScript deprecated; Triton still serves it
                warnings.simplefilter("ignore", DeprecationWarning)
                self._module: Any = torch.jit.load(str(context.model_file), map_location=self._device)
        except Exception as exc:  # torch raises RuntimeError and others for files that are not TorchScript
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TritonError(
                ErrorCode.INVALID_ARG, f"failed to load TorchScript model {context.model_file}: {first}"
            ) from None
        self._module.eval()
        arguments = [a.name for a in self._module.forward.schema.arguments[1:]]
        # batch inputs, sequence controls and state are forward() arguments too, made by the server
        self._inputs = input_order(model_inputs(context.config), arguments)
        self._outputs = output_positions(model_outputs(context.config))

    def execute(
        self, inputs: dict[str, np.ndarray[Any, Any]], output_names: list[str]
    ) -> dict[str, np.ndarray[Any, Any]]:
        torch = self._torch
        with torch.inference_mode():
            tensors = [
                torch.from_numpy(np.ascontiguousarray(inputs[n])).to(self._device) for n in self._inputs
            ]
            try:
                result = self._module(*tensors)
            except Exception as exc:  # a failure inside forward() belongs to this request only
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                trace = "".join(traceback.format_exception(exc)).rstrip()
                raise ModelError(f"PyTorch execute failure: {first}", trace) from None
        results = list(result) if isinstance(result, tuple | list) else [result]
        out = {}
        for name in output_names:
            position = self._outputs[name]
            if position >= len(results):
                raise TritonError(
                    ErrorCode.INTERNAL,
                    f"output '{name}' expects position {position} but forward() returned {len(results)} tensors",
                )
            out[name] = results[position].detach().cpu().numpy()
        return out

    def unload(self) -> None:
        self._module = None


def load(context: ModelContext, instance: InstanceSpec) -> TorchScriptModel:
    return TorchScriptModel(context, instance)


def instance_classes() -> tuple[type[ModelInstance], ...]:
    return (TorchScriptModel,)


complete_config = None  # Triton's pytorch backend completes nothing from model.pt


def check_model_file(config: ModelConfig, model_file: Path, found: FileFindings) -> None:
    """The config's inputs against forward()'s arguments (the model is loaded on the CPU, not run)."""
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
    expected = model_inputs(config)
    if len(arguments) != len(expected):
        found.error(
            f"unable to load model '{config.name}', configuration expects {len(expected)} inputs, "
            f"model provides {len(arguments)}",
            f"the model's forward() takes ({', '.join(arguments)}): list that many inputs, named "
            "INPUT__0, INPUT__1, ... or after the forward() arguments",
            ("input",),
        )
        return
    names = expected
    if not all(name in arguments for name in names) and _named_indices(names) is None:
        # Triton loads it and feeds the inputs in config order: worth a word, not a refusal
        found.warning(
            f"inputs of model '{config.name}' match neither forward()'s arguments ({', '.join(arguments)}) "
            "nor the naming convention <name>__<index>: forward() takes them in the configuration's order",
            "name them INPUT__0, INPUT__1, ... or after the forward() arguments",
            ("input",),
        )
    if not config.output:  # Triton's pytorch backend refuses a model with nothing to answer
        found.error(
            "model configuration must contain at least one output, none were specified",
            "list the model's outputs, named OUTPUT__0, OUTPUT__1, ... in forward()'s return order",
            ("output",),
        )
