"""The answers of the core service as typed messages, named after the KServe v2 / Triton protocol's
(`inference.GRPCInferenceService` in grpc_service.proto, and the REST bodies of the same names). The
service builds them; each front end only encodes them: REST with `server/protocol/json_messages.py`,
gRPC with `server/protocol/grpc_messages.py`. Inference answers are `InferenceResponse`
(`server/protocol/types.py`).

Fields are in the order Triton's REST answers list them, so that a message written as JSON (orjson
writes a dataclass's fields in order) reads as Triton's does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


# ------------------------------------------------------------------------------------------ health
@dataclass(frozen=True, slots=True)
class ModelReadyResponse:
    ready: bool


# ------------------------------------------------------------------------------------------ metadata
@dataclass(frozen=True, slots=True)
class ServerMetadataResponse:
    name: str
    version: str
    extensions: list[str]


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str  # wire name: FP32, BYTES, ...
    shape: list[int]  # -1 for a variable dimension, the batch dimension first when the model batches


@dataclass(frozen=True, slots=True)
class ModelMetadataResponse:
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


@dataclass(frozen=True, slots=True)
class ModelConfigResponse:
    config: ModelConfig  # the completed inference.ModelConfig the model is served with


# ------------------------------------------------------------------------------------------ statistics
@dataclass(slots=True)
class StatisticDuration:
    count: int = 0
    ns: int = 0


@dataclass(slots=True)
class InferStatistics:
    success: StatisticDuration
    fail: StatisticDuration
    queue: StatisticDuration
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration
    cache_hit: StatisticDuration = field(default_factory=StatisticDuration)
    cache_miss: StatisticDuration = field(default_factory=StatisticDuration)


@dataclass(slots=True)
class InferBatchStatistics:
    batch_size: int
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration


@dataclass(slots=True)
class ModelStatistics:
    name: str
    version: str
    last_inference: int  # ms since the epoch
    inference_count: int
    execution_count: int
    inference_stats: InferStatistics
    response_stats: dict[str, Any] = field(default_factory=dict)  # per response index; none kept
    batch_stats: list[InferBatchStatistics] = field(default_factory=list)
    memory_usage: list[Any] = field(default_factory=list)  # none reported without a GPU


@dataclass(frozen=True, slots=True)
class ModelStatisticsResponse:
    model_stats: list[ModelStatistics]


# ------------------------------------------------------------------------------------------ repository
@dataclass(frozen=True, slots=True)
class ModelIndex:
    """A row of the repository index: a model version, or (version "") a model that is not loaded."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RepositoryIndexResponse:
    models: list[ModelIndex]


# ------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True, slots=True)
class LogSettingsResponse:
    log_file: str
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    log_format: str


@dataclass(frozen=True, slots=True)
class TraceSettingResponse:
    """The trace settings in force, each a string but the level, a list of names."""

    trace_level: list[str]
    trace_rate: str
    trace_count: str
    log_frequency: str
    trace_file: str
    trace_mode: str
