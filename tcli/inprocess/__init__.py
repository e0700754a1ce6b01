"""tcli's in-process API: the server inside a Python program, no sockets, shaped after Triton's
`tritonserver` package (the "In-Process Python API") so that code written for it ports by changing
its import:

    import tcli.inprocess as tritonserver

    with tritonserver.Server(model_repository="model_repository") as server:
        model = server.model("add_sub")
        for response in model.infer(inputs={"INPUT0": a, "INPUT1": b}):
            print(numpy.from_dlpack(response.outputs["OUTPUT0"]))

Named `inprocess` after what Triton calls this API; `tcli.tritonserver` is already the `tritonserver`
command. Triton's `tritonfrontend` (HTTP, gRPC and metrics front ends on an in-process server) is
`tcli.frontend`. Requests go through the core service, the schedulers and the instances exactly as requests
over HTTP and gRPC do; errors are raised as `tritonserver`'s exception classes, one per Triton status
code. Everything not exported here is private.
"""

from tcli.inprocess._allocators import MemoryAllocator, default_memory_allocators
from tcli.inprocess._errors import (
    AlreadyExistsError,
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from tcli.inprocess._memorybuffer import MemoryBuffer
from tcli.inprocess._metrics import Metric, MetricFamily, MetricKind
from tcli.inprocess._model import Model
from tcli.inprocess._options import ModelLoadDeviceLimit, Options, RateLimiterResource
from tcli.inprocess._request import InferenceRequest
from tcli.inprocess._response import AsyncResponseIterator, InferenceResponse, ResponseIterator
from tcli.inprocess._server import ModelDictionary, Server
from tcli.inprocess._tensor import Tensor
from tcli.inprocess._types import (
    DataType,
    DLDeviceType,
    InstanceGroupKind,
    LogFormat,
    MemoryType,
    MetricFormat,
    ModelBatchFlag,
    ModelControlMode,
    ModelTxnPropertyFlag,
    RateLimitMode,
    RequestFlag,
)

__all__ = [
    "AlreadyExistsError",
    "AsyncResponseIterator",
    "CancelledError",
    "DLDeviceType",
    "DataType",
    "InferenceRequest",
    "InferenceResponse",
    "InstanceGroupKind",
    "InternalError",
    "InvalidArgumentError",
    "LogFormat",
    "MemoryAllocator",
    "MemoryBuffer",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricFormat",
    "MetricKind",
    "Model",
    "ModelBatchFlag",
    "ModelControlMode",
    "ModelDictionary",
    "ModelLoadDeviceLimit",
    "ModelTxnPropertyFlag",
    "NotFoundError",
    "Options",
    "RateLimitMode",
    "RateLimiterResource",
    "RequestFlag",
    "ResponseIterator",
    "Server",
    "Tensor",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "default_memory_allocators",
]
