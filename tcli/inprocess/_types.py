"""The enums of the in-process API, with the names and values of Triton's C API (TRITONSERVER_*), as
the `tritonserver` package exports them."""

from __future__ import annotations

import enum


class DataType(enum.IntEnum):
    """TRITONSERVER_DataType; a member's name is the wire name (FP32, BYTES, ...)."""

    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14


class MemoryType(enum.IntEnum):
    """TRITONSERVER_MemoryType. tcli serves from CPU memory only."""

    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class ModelControlMode(enum.IntEnum):
    """TRITONSERVER_ModelControlMode: `tcli serve --model-control-mode none|poll|explicit`."""

    NONE = 0
    POLL = 1
    EXPLICIT = 2


class ModelBatchFlag(enum.IntFlag):
    """TRITONSERVER_ModelBatchFlag: FIRST_DIM when the model batches (max_batch_size > 0)."""

    UNKNOWN = 1
    FIRST_DIM = 2


class ModelTxnPropertyFlag(enum.IntFlag):
    """TRITONSERVER_ModelTxnPropertyFlag: DECOUPLED when a request may get any number of responses."""

    ONE_TO_ONE = 1
    DECOUPLED = 2


class RequestFlag(enum.IntFlag):
    """TRITONSERVER_RequestFlag, the `flags` of a request in a sequence (`tritonserver` takes them as
    plain ints: 1 starts a sequence, 2 ends it)."""

    SEQUENCE_START = 1
    SEQUENCE_END = 2


class DLDeviceType(enum.IntEnum):
    """DLPack's device types (the ones `tritonserver` names); tcli's tensors are all kDLCPU."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3


class LogFormat(enum.IntEnum):
    """TRITONSERVER_LogFormat: `I1127 17:38:45.510576 ...` (DEFAULT) or an ISO 8601 time."""

    DEFAULT = 0
    ISO8601 = 1


class RateLimitMode(enum.IntEnum):
    """TRITONSERVER_RateLimitMode: `tcli serve --rate-limit off|execution_count`."""

    OFF = 0
    EXEC_COUNT = 1


class InstanceGroupKind(enum.IntEnum):
    """TRITONSERVER_InstanceGroupKind (of `ModelLoadDeviceLimit`)."""

    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class MetricFormat(enum.IntEnum):
    """TRITONSERVER_MetricFormat: Prometheus' text format, the only one."""

    PROMETHEUS = 0
