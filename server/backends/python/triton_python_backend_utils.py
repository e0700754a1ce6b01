"""tcli's `triton_python_backend_utils`: the module Triton python models import as `pb_utils`.

Models written for Triton 2.51 run unchanged: names, signatures, return types and error messages follow
the real python backend (its `triton_python_backend_utils.py` plus the classes its C++ stub adds).
Where Triton 2.51 is broken or stricter than useful, the code says so next to it.

This module is the facade: the code lives in `server.backends.python.pb_utils`, one concept per module,
and this module exposes the names models use (Triton's, plus `json` and `np` as Triton's module has them).
It also still exposes the host API (BLS executor, model manager, model scope, custom-metrics registry,
request and tensor factories) under the old names; tcli's own code imports those from the owning
modules. State (hooks, context variables, METRICS) lives in those modules only: set it with the
`set_*` functions, never by assigning attributes here.
"""

# Triton's own module imports these two at its top, and models have been seen reaching them through it
import json
import sys as _sys

import numpy as np

from server.backends.python.pb_utils.datatypes import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    TYPE_BF16,
    TYPE_BOOL,
    TYPE_BYTES,
    TYPE_INVALID,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from server.backends.python.pb_utils.errors import TritonError, TritonModelException
from server.backends.python.pb_utils.host_api import (
    config_to_dtype,
    dtype_to_wire,
    error_code_name,
    new_execute_request,
    release_flags,
    request_parameters,
    response_parameters,
    tensor_from_storage,
    tensor_storage,
    wire_to_dtype,
)
from server.backends.python.pb_utils.logger import Logger, LogLevel
from server.backends.python.pb_utils.memory import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    InferenceTrace,
    MemoryType,
    PreferredMemory,
)
from server.backends.python.pb_utils.metric_registry import (
    METRICS,
    MetricFamilySnapshot,
    MetricKind,
    MetricRegistry,
    MetricSample,
)
from server.backends.python.pb_utils.metrics import Metric, MetricFamily
from server.backends.python.pb_utils.model_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from server.backends.python.pb_utils.model_control import (
    ModelManager,
    is_model_ready,
    load_model,
    set_model_manager,
    unload_model,
)
from server.backends.python.pb_utils.requests import (
    BLSExecutor,
    InferenceRequest,
    get_input_tensor_by_name,
    set_bls_executor,
)
from server.backends.python.pb_utils.responses import (
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
    ResponseTransport,
    get_output_tensor_by_name,
)
from server.backends.python.pb_utils.scope import (
    ModelScope,
    current_model_scope,
    get_model_dir,
    model_scope,
    set_default_model_scope,
)
from server.backends.python.pb_utils.tensor import Tensor

__all__ = [
    "METRICS",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "TYPE_BF16",
    "TYPE_BOOL",
    "TYPE_BYTES",
    "TYPE_INVALID",
    "BLSExecutor",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricFamilySnapshot",
    "MetricKind",
    "MetricRegistry",
    "MetricSample",
    "ModelConfig",
    "ModelManager",
    "ModelScope",
    "PreferredMemory",
    "ResponseIterator",
    "ResponseTransport",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "config_to_dtype",
    "current_model_scope",
    "deserialize_bytes_tensor",
    "dtype_to_wire",
    "error_code_name",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "json",
    "load_model",
    "model_scope",
    "new_execute_request",
    "np",
    "numpy_to_triton_type",
    "release_flags",
    "request_parameters",
    "response_parameters",
    "serialize_byte_tensor",
    "set_bls_executor",
    "set_default_model_scope",
    "set_model_manager",
    "tensor_from_storage",
    "tensor_storage",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
    "wire_to_dtype",
]


def _register_aliases() -> None:
    """One module object whichever name imported it first, so hooks installed through one name are
    seen by models importing the other."""
    this = _sys.modules[__name__]
    for alias in ("triton_python_backend_utils", "server.backends.python.triton_python_backend_utils"):
        _sys.modules.setdefault(alias, this)


_register_aliases()
