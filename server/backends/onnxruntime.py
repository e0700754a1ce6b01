"""onnxruntime backend (`platform: "onnxruntime_onnx"`, model.onnx): one InferenceSession per instance.
What it reads from model.onnx for a config (auto-complete, `tcli repo validate`'s check) is onnx_config.py."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

import numpy as np

from server.backends import onnx_config
from server.backends.base import InstanceSpec, ModelContext, ModelError, ModelInstance, TensorModel
from server.backends.devices import onnx_providers
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    import onnxruntime as ort


def _int_parameter(context: ModelContext, key: str) -> int | None:
    parameter = context.config.parameters.get(key)
    if parameter is None or not parameter.string_value:
        return None
    try:
        return int(parameter.string_value)
    except ValueError:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"parameter '{key}' of model '{context.config.name}' must be an integer, got "
            f"'{parameter.string_value}'",
        ) from None


def session_options(context: ModelContext) -> ort.SessionOptions:
    """Triton's onnxruntime backend parameters: intra_op_thread_count, inter_op_thread_count, and
    optimization.graph.level (-1 basic, 1 extended, otherwise all)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    intra = _int_parameter(context, "intra_op_thread_count")
    inter = _int_parameter(context, "inter_op_thread_count")
    if intra is not None:
        options.intra_op_num_threads = intra
    if inter is not None:
        options.inter_op_num_threads = inter
    level = context.config.optimization.graph.level
    options.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    return options


class OnnxModel(TensorModel):
    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:
        import onnxruntime as ort

        accelerators = [
            a.name for a in context.config.optimization.execution_accelerators.gpu_execution_accelerator
        ]
        providers = onnx_providers(
            instance.kind, instance.device_id, ort.get_available_providers(), accelerators
        )
        try:
            self._session: Any = ort.InferenceSession(
                str(context.model_file), session_options(context), providers=providers
            )
        except Exception as exc:  # onnxruntime raises its own types for unreadable or invalid graphs
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TritonError(ErrorCode.INVALID_ARG, f"failed to load ONNX model: {first}") from None
        self._string_inputs = {i.name for i in self._session.get_inputs() if i.type == "tensor(string)"}

    def execute(
        self, inputs: dict[str, np.ndarray[Any, Any]], output_names: list[str]
    ) -> dict[str, np.ndarray[Any, Any]]:
        feed = {
            name: _bytes_to_str(value) if name in self._string_inputs else value
            for name, value in inputs.items()
        }
        try:
            results = self._session.run(output_names, feed)
        except Exception as exc:  # a runtime failure inside the graph belongs to this request only
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            trace = "".join(traceback.format_exception(exc)).rstrip()
            raise ModelError(f"onnxruntime execute failure: {first}", trace) from None
        return {
            name: _str_to_bytes(value) if value.dtype == object else value
            for name, value in zip(output_names, results, strict=True)
        }

    def unload(self) -> None:
        self._session = None


def _bytes_to_str(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    flat = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape)


def _str_to_bytes(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape)


def load(context: ModelContext, instance: InstanceSpec) -> OnnxModel:
    return OnnxModel(context, instance)


def instance_classes() -> tuple[type[ModelInstance], ...]:
    return (OnnxModel,)


complete_config = onnx_config.complete_config
check_model_file = onnx_config.check_model_file
