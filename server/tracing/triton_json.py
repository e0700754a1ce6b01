"""A finished trace as the entries of Triton's trace file (docs/user_guide/trace.md, "JSON Trace
Output"): one object per timestamp, the model's identity before REQUEST_START, one object per tensor.

Entries go in the order Triton 2.51 writes them (checked against its files): the front end's receive
stamps, the identity, REQUEST_START and QUEUE_START, the tensors, gRPC's wait/read stamps, the
response's completion and its sends, then the compute stamps and REQUEST_END, which Triton's core
reports when it releases the request. The stamps themselves were all taken on the request's path;
only their order in the file is chosen here."""

from __future__ import annotations

from typing import Any

import numpy as np

from server.protocol import trace as names
from server.protocol.trace import Trace

_RANK = {
    names.HTTP_RECV_START: 0,
    names.HTTP_RECV_END: 1,
    names.REQUEST_START: 3,
    names.QUEUE_START: 4,
    names.GRPC_WAITREAD_START: 6,
    names.GRPC_WAITREAD_END: 7,
    names.INFER_RESPONSE_COMPLETE: 8,
    names.HTTP_SEND_START: 10,
    names.HTTP_SEND_END: 10,
    names.GRPC_SEND_START: 10,
    names.GRPC_SEND_END: 10,
    names.COMPUTE_START: 11,
    names.COMPUTE_INPUT_END: 12,
    names.COMPUTE_OUTPUT_START: 13,
    names.COMPUTE_END: 14,
    names.REQUEST_END: 15,
}
_IDENTITY_RANK = 2
_TENSOR_RANK = 5
_EARLY_REQUEST_END = 9  # a trace without compute (an ensemble's): Triton ends it before the sends


def entries(trace: Trace, timestamps: bool = True) -> list[dict[str, Any]]:
    """The trace's own entries (not its children's), in Triton's order."""
    ranked: list[tuple[int, dict[str, Any]]] = []
    ident: dict[str, Any] = {
        "id": trace.id,
        "model_name": trace.model_name,
        "model_version": trace.model_version,
    }
    if trace.request_id:
        ident["request_id"] = trace.request_id
    if trace.parent_id:
        ident["parent_id"] = trace.parent_id
    ranked.append((_IDENTITY_RANK, ident))
    stamps = list(trace.stamps)
    computed = any(name == names.COMPUTE_START for name, _ in stamps)
    if timestamps:
        for name, ns in stamps:
            rank = _RANK.get(name, _RANK[names.REQUEST_END])
            if name == names.REQUEST_END and not computed:
                rank = _EARLY_REQUEST_END
            ranked.append((rank, {"id": trace.id, "timestamps": [{"name": name, "ns": ns}]}))
    for activity, tensor in list(trace.tensors):
        ranked.append((_TENSOR_RANK, {"id": trace.id, "activity": activity, "tensor": tensor_entry(tensor)}))
    ranked.sort(key=lambda pair: pair[0])  # stable: same-rank entries keep the order they were taken in
    return [entry for _, entry in ranked]


def trace_group(trace: Trace, timestamps: bool = True) -> list[dict[str, Any]]:
    """A trace with its children (an ensemble's steps), the latest child first and the parent last,
    as Triton writes one sampled request."""
    out: list[dict[str, Any]] = []
    for child in reversed(trace.children):
        out.extend(trace_group(child, timestamps))
    out.extend(entries(trace, timestamps))
    return out


def tensor_entry(tensor: Any) -> dict[str, str]:
    """{name, data, shape, dtype} as Triton writes a traced tensor: values comma-separated the way a
    C++ stream prints them (6 significant digits for floats), strings quoted, FP16/BF16 left empty."""
    return {
        "name": tensor.name,
        "data": _data(tensor.datatype, tensor.data),
        "shape": ",".join(str(int(d)) for d in tensor.shape),
        "dtype": tensor.datatype,
    }


def _data(datatype: str, array: Any) -> str:
    if datatype in ("FP16", "BF16"):
        return ""
    flat = np.asarray(array).reshape(-1)
    if datatype == "BYTES":
        return ",".join(f'"{_text(v)}"' for v in flat)  # as \" in the file's JSON text, as Triton
    if datatype in ("FP32", "FP64"):
        return ",".join(f"{float(v):g}" for v in flat)
    if datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat)
    if datatype in ("INT8", "UINT8"):  # a C++ stream prints 8-bit integers as characters
        return ",".join(chr(int(v) & 0xFF) for v in flat)
    return ",".join(str(int(v)) for v in flat)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
