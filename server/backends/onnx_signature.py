"""Read the input and output tensors an ONNX file declares.

The graph's declared inputs and outputs are read straight from the file's protobuf (about a
millisecond), not from an onnxruntime session: a session over DenseNet-121 costs 0.3-0.6 s of a
start-up that holds the GIL, and the instances that load next build their own sessions anyway (a graph
onnxruntime cannot run fails there, with onnxruntime's message). Files that are not a readable ONNX
protobuf go to onnxruntime, whose error names what is wrong.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.protocol.errors import ErrorCode, TritonError

# onnxruntime's type strings -> Triton config data types
_ONNX_TYPES = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str  # Triton config enum name, e.g. TYPE_FP32; TYPE_INVALID when unsupported
    shape: tuple[int, ...]  # -1 for a dynamic (symbolic or unknown) dimension


@dataclass(frozen=True)
class OnnxSignature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def supports_batching(self) -> bool:
        """Triton's rule: batching iff every input and output has a dynamic first dimension."""
        tensors = self.inputs + self.outputs
        return bool(tensors) and all(t.shape and t.shape[0] == -1 for t in tensors)


def read_onnx_signature(path: Path) -> OnnxSignature:
    """The model's tensors; cached per file version, since completing, validating and scaffolding a
    model each ask (a session over a large graph costs a second)."""
    target = path / "model.onnx" if path.is_dir() else path
    try:
        stat = target.stat()
    except OSError:
        return _read(target)  # reports the missing file
    return _read_cached(str(target.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read_cached(path: str, mtime_ns: int, size: int) -> OnnxSignature:
    return _read(Path(path))


def _read(target: Path) -> OnnxSignature:
    return _read_protobuf(target) or _read_with_session(target)


# TensorProto.DataType numbers (onnx.proto) -> onnxruntime's type strings
_ELEM_TYPES = {
    1: "tensor(float)",
    2: "tensor(uint8)",
    3: "tensor(int8)",
    4: "tensor(uint16)",
    5: "tensor(int16)",
    6: "tensor(int32)",
    7: "tensor(int64)",
    8: "tensor(string)",
    9: "tensor(bool)",
    10: "tensor(float16)",
    11: "tensor(double)",
    12: "tensor(uint32)",
    13: "tensor(uint64)",
    16: "tensor(bfloat16)",
}


def _read_protobuf(target: Path) -> OnnxSignature | None:
    """The signature as onnxruntime reports it (graph inputs that are not initializers, and the
    outputs), or None when the file is not an ONNX model protobuf with a graph."""
    from google.protobuf.message import DecodeError

    model = _onnx_messages()["ModelProto"]()
    try:
        model.ParseFromString(target.read_bytes())
    except (OSError, DecodeError):
        return None
    if not model.HasField("graph") or not model.graph.output:
        return None
    graph = model.graph
    initializers = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}

    def spec(value: Any) -> TensorSpec:
        tensor = value.type.tensor_type
        data_type = "TYPE_INVALID"
        if value.type.HasField("tensor_type"):
            data_type = _ONNX_TYPES.get(_ELEM_TYPES.get(tensor.elem_type, ""), "TYPE_INVALID")
        shape = tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else -1 for d in tensor.shape.dim
        )
        return TensorSpec(value.name, data_type, shape)

    return OnnxSignature(
        tuple(spec(v) for v in graph.input if v.name not in initializers),
        tuple(spec(v) for v in graph.output),
    )


@functools.cache
def _onnx_messages() -> dict[str, Any]:
    """Message classes for the few fields of onnx.proto (proto2) a signature needs, by their field
    numbers there; every other field (nodes, weights) is skipped as unknown. The onnx package would
    give the full classes, but it is a development dependency only."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    optional, repeated = field.LABEL_OPTIONAL, field.LABEL_REPEATED
    messages: dict[str, list[tuple[str, int, int, int, str]]] = {
        "ModelProto": [("graph", 7, optional, field.TYPE_MESSAGE, "GraphProto")],
        "GraphProto": [
            ("initializer", 5, repeated, field.TYPE_MESSAGE, "TensorProto"),
            ("input", 11, repeated, field.TYPE_MESSAGE, "ValueInfoProto"),
            ("output", 12, repeated, field.TYPE_MESSAGE, "ValueInfoProto"),
            ("sparse_initializer", 15, repeated, field.TYPE_MESSAGE, "SparseTensorProto"),
        ],
        "TensorProto": [("name", 8, optional, field.TYPE_STRING, "")],
        "SparseTensorProto": [("values", 1, optional, field.TYPE_MESSAGE, "TensorProto")],
        "ValueInfoProto": [
            ("name", 1, optional, field.TYPE_STRING, ""),
            ("type", 2, optional, field.TYPE_MESSAGE, "TypeProto"),
        ],
        "TypeProto": [("tensor_type", 1, optional, field.TYPE_MESSAGE, "TensorType")],
        "TensorType": [
            ("elem_type", 1, optional, field.TYPE_INT32, ""),
            ("shape", 2, optional, field.TYPE_MESSAGE, "TensorShapeProto"),
        ],
        "TensorShapeProto": [("dim", 1, repeated, field.TYPE_MESSAGE, "Dimension")],
        "Dimension": [
            ("dim_value", 1, optional, field.TYPE_INT64, ""),
            ("dim_param", 2, optional, field.TYPE_STRING, ""),
        ],
    }
    file = descriptor_pb2.FileDescriptorProto(
        name="tcli_onnx_signature.proto", package="tcli_onnx", syntax="proto2"
    )
    for message, fields in messages.items():
        described = file.message_type.add(name=message)
        for name, number, label, kind, type_name in fields:
            described.field.add(
                name=name,
                number=number,
                label=label,
                type=kind,
                type_name=f".tcli_onnx.{type_name}" if type_name else None,
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        message: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tcli_onnx.{message}"))
        for message in messages
    }


def _read_with_session(target: Path) -> OnnxSignature:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for any unreadable file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TritonError(ErrorCode.INVALID_ARG, f"cannot read ONNX model {target}: {reason}") from None

    def spec(arg: object) -> TensorSpec:
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)  # type: ignore[attr-defined]
        data_type = _ONNX_TYPES.get(arg.type, "TYPE_INVALID")  # type: ignore[attr-defined]
        return TensorSpec(arg.name, data_type, shape)  # type: ignore[attr-defined]

    return OnnxSignature(
        tuple(spec(a) for a in session.get_inputs()), tuple(spec(a) for a in session.get_outputs())
    )
