"""The sequence batcher's implicit state (`sequence_batching.state`): the state tensors a sequence
carries from one request to the next, and their initial values.

Each slot keeps the sequence's state tensors. A request gets them as the inputs `input_name`; START
(or a slot that never had a state) starts from `initial_state` (zero_data, or data_file under
<model>/initial_state/; without one: zeros, a variable dimension being 1). The output `output_name`
of a successful response becomes the state of the sequence's next request, and is dropped from the
response unless the client asked for it (or, asking for no output in particular, the config declares
it). A failed request leaves the state as it was. Triton 2.51 does the same for ONNX models; its
python backend receives the input state but never updates it (every request sees the initial state)
-- tcli updates it for python models too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from server.config.validate import enum_name
from server.protocol import bytes_codec, datatypes
from server.protocol.errors import invalid_arg
from server.protocol.types import InferenceResponse, RequestedOutput, Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.errors import TritonError
    from server.scheduling.work import WorkItem

Array = np.ndarray[Any, Any]
StateStore = dict[str, Array]  # one slot's state tensors, by input name


@dataclass(frozen=True, slots=True)
class StateSpec:
    input_name: str
    output_name: str
    wire: str
    initial: Array  # with the batch dimension when the model batches


def state_specs(config: ModelConfig, model_dir: Path | None) -> list[StateSpec]:
    """The `state` entries with their initial values; raises Triton's load errors for bad ones."""
    batched = config.max_batch_size > 0
    specs = []
    for state in config.sequence_batching.state:
        wire = datatypes.config_to_wire(enum_name(state, "data_type"))
        if len(state.initial_state) > 1:
            raise invalid_arg(
                f"initial_state field for state input '{state.input_name}' must contain exactly one or zero "
                f"element. Found '{len(state.initial_state)}' elements."
            )
        if state.initial_state:
            initial = _initial_state(state, model_dir, wire)
        else:  # Triton leaves it uninitialized; a variable dimension is 1
            dims = tuple(1 if d < 0 else int(d) for d in state.dims)
            initial = _zeros(wire, dims)
        if batched:
            initial = initial.reshape((1, *initial.shape))
        initial.setflags(write=False)
        specs.append(StateSpec(state.input_name, state.output_name, wire, initial))
    return specs


def _initial_state(state: Any, model_dir: Path | None, wire: str) -> Array:
    initial = state.initial_state[0]
    name = state.input_name
    if initial.data_type != state.data_type:
        raise invalid_arg(
            f"The data type used for 'initial_state' field of state '{name}' does not match the state data type."
        )
    if not initial.name:
        raise invalid_arg(f"Field 'name' must be set when using initial_state for state input '{name}'.")
    if len(initial.dims) != len(state.dims):
        raise invalid_arg(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state "
            f"input '{name}'. {len(initial.dims)} != {len(state.dims)}"
        )
    for dim, state_dim in zip(initial.dims, state.dims, strict=True):
        if dim < 0:
            raise invalid_arg(
                f"'initial_state' field for state input name '{name}' contains variable dimensions."
            )
        if state_dim >= 0 and dim != state_dim:
            raise invalid_arg(
                f"'initial_state' dim for input name '{name}' doesn't match 'state' dim description. "
                f"{dim} != {state_dim}"
            )
    dims = tuple(int(d) for d in initial.dims)
    which = initial.WhichOneof("state_data")
    if which == "zero_data":
        return _zeros(wire, dims)
    if which != "data_file":
        raise invalid_arg(f"initial_state setting expects state'{name}' to have state_data set")
    path = (model_dir or Path(".")) / "initial_state" / initial.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"failed to open text file for read {path}: {exc.strerror}") from None
    if wire == "BYTES":
        return _deserialize_bytes(raw, dims, name, initial.data_file)
    dtype = np.dtype(datatypes.wire_to_numpy(wire))
    size = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if size > len(raw):
        raise invalid_arg(
            f"initial_state setting expects {size} bytes, but the data provided from {initial.data_file}only has "
            f"{len(raw)} bytes."
        )
    return np.frombuffer(raw[:size], dtype=dtype).reshape(dims).copy()


def _zeros(wire: str, dims: tuple[int, ...]) -> Array:
    if wire == "BYTES":
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, dtype=datatypes.wire_to_numpy(wire))


def _deserialize_bytes(raw: bytes, dims: tuple[int, ...], name: str, file: str) -> Array:
    """The state's strings from its file, in Triton's serialized BYTES layout; any beyond the state's
    element count are not read."""
    values = bytes_codec.deserialize(raw, f"initial_state file {file} of state input '{name}'")
    count = int(np.prod(dims, dtype=np.int64))
    if len(values) < count:
        raise invalid_arg(
            f"initial_state data for state input '{name}' holds {len(values)} of {count} strings"
        )
    return bytes_codec.object_array(values[:count], dims)


def attach_state(
    specs: list[StateSpec],
    state_outputs: dict[str, StateSpec],
    declared_outputs: list[str],
    stores: list[StateStore | None],
    slot: int,
    item: WorkItem,
) -> None:
    """Give the request its sequence's state inputs, make the model produce the state outputs, and
    keep them (out of the response, unless the client asked for them) when it completes."""
    store = stores[slot]
    request = item.request
    if store is None or request.sequence_start:
        store = {spec.input_name: spec.initial for spec in specs}
        stores[slot] = store
    for spec in specs:
        value = store[spec.input_name]
        request.inputs.append(Tensor(spec.input_name, spec.wire, tuple(value.shape), value))
    asked = {o.name for o in request.outputs}
    if not asked:
        request.outputs = [RequestedOutput(name) for name in declared_outputs]
    wanted = asked or set(declared_outputs)
    for spec in specs:
        if spec.output_name not in wanted:
            request.outputs.append(RequestedOutput(spec.output_name))
    original = item.complete

    def complete(result: InferenceResponse | TritonError) -> None:
        if isinstance(result, InferenceResponse):
            kept = []
            for tensor in result.outputs:
                spec = state_outputs.get(tensor.name)
                if spec is not None:
                    store[spec.input_name] = np.array(tensor.data, copy=True)
                    if tensor.name not in wanted:
                        continue
                kept.append(tensor)
            result.outputs = kept
        original(result)

    item.complete = complete
