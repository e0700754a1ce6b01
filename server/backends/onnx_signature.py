"""Read the input and output tensors an ONNX file declares, with onnxruntime (no graph optimisation)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

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
