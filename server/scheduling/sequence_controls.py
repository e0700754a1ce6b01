"""The sequence batcher's control tensors: the START, END, READY and CORRID inputs it adds to every
request (clients never send them).

START, END, READY come from `int32_false_true`, `fp32_false_true` or `bool_false_true` ([false, true],
dtype INT32 / FP32 / BOOL), CORRID with its `data_type`: UINT64/INT64/UINT32/INT32 take the low 64/32
bits of the ID (two's complement for the signed ones); a string ID gives the bytes Triton copies (its
uint32 length, little-endian, then the UTF-8 bytes, cut or zero-padded to the width). Shape [1, 1] per
request with batching, [1] without. TYPE_STRING gives the ID as one BYTES element (an integer ID in
decimal). Real Triton 2.51 fails every request of such a model with the python backend ("unexpected
number of string elements 2 for inference input 'CORRID', expecting 1"); tcli gives the value the
documentation describes. A null request (padding) gets READY/START/END false and CORRID 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from server.config.validate import enum_name
from server.protocol import bytes_codec, datatypes
from server.protocol.types import Tensor

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelSequenceBatching

    from server.protocol.types import InferenceRequest

CorrelationId = int | str
Array = np.ndarray[Any, Any]


@dataclass(frozen=True, slots=True)
class FlagControl:
    name: str
    kind: str  # CONTROL_SEQUENCE_START | _END | _READY
    wire: str  # INT32 | FP32 | BOOL
    dtype: np.dtype[Any]
    values: tuple[Any, Any]  # (false, true)


@dataclass(frozen=True, slots=True)
class CorridControl:
    name: str
    wire: str  # UINT64 | INT64 | UINT32 | INT32 | BYTES
    dtype: np.dtype[Any]


def flag_controls(
    sequence_batching: ModelSequenceBatching,
) -> tuple[list[FlagControl], CorridControl | None]:
    """The START/END/READY controls of `control_input`, and its CORRID control if it has one."""
    flags: list[FlagControl] = []
    corrid: CorridControl | None = None
    for control_input in sequence_batching.control_input:
        for control in control_input.control:
            kind = enum_name(control, "kind")
            if kind == "CONTROL_SEQUENCE_CORRID":
                wire = datatypes.config_to_wire(enum_name(control, "data_type"))
                dtype = np.dtype(object) if wire == "BYTES" else np.dtype(datatypes.wire_to_numpy(wire))
                corrid = CorridControl(control_input.name, wire, dtype)
                continue
            if len(control.int32_false_true):
                wire, values = "INT32", tuple(control.int32_false_true)
            elif len(control.fp32_false_true):
                wire, values = "FP32", tuple(control.fp32_false_true)
            else:
                wire, values = "BOOL", tuple(control.bool_false_true)
            dtype = np.dtype(datatypes.wire_to_numpy(wire))
            flags.append(FlagControl(control_input.name, kind, wire, dtype, (values[0], values[1])))
    return flags, corrid


def corrid_array(correlation_id: CorrelationId, control: CorridControl, shape: tuple[int, ...]) -> Array:
    """The CORRID control value for `correlation_id`, as Triton fills it for the control's data type."""
    if control.wire == "BYTES":
        return np.array([str(correlation_id).encode()], dtype=object).reshape(shape)
    width = control.dtype.itemsize
    if isinstance(correlation_id, str):
        encoded = correlation_id.encode()
        raw = bytes_codec.serialize([encoded])[:width].ljust(width, b"\0")
    else:
        raw = (int(correlation_id) % (1 << (8 * width))).to_bytes(width, "little")
    return np.frombuffer(raw, dtype=control.dtype.newbyteorder("<")).astype(control.dtype).reshape(shape)


def add_controls(
    request: InferenceRequest,
    flags: list[FlagControl],
    corrid: CorridControl | None,
    shape: tuple[int, ...],
    ready: bool,
) -> None:
    """Append the control inputs to `request`: its own values when `ready`, a null request's otherwise."""
    inputs = request.inputs
    for control in flags:
        if control.kind == "CONTROL_SEQUENCE_READY":
            flag = ready
        elif control.kind == "CONTROL_SEQUENCE_START":
            flag = ready and request.sequence_start
        else:
            flag = ready and request.sequence_end
        data = np.full(shape, control.values[flag], dtype=control.dtype)
        inputs.append(Tensor(control.name, control.wire, shape, data))
    if corrid is not None:
        if ready:
            data = corrid_array(request.correlation_id, corrid, shape)
        elif corrid.wire == "BYTES":
            data = np.full(shape, b"", dtype=object)
        else:
            data = np.zeros(shape, dtype=corrid.dtype)
        inputs.append(Tensor(corrid.name, corrid.wire, shape, data))
