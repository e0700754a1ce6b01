"""The protobuf messages of `inference.GRPCInferenceService` other than inference: server and model
metadata, model config, statistics, the repository index, load and unload parameters, shared memory
status, log and trace settings. Pure functions between the protobuf messages (tritonclient's
generated `service_pb2`) and the core facade's typed answers (`server/protocol/messages.py`), which
the REST front end encodes as JSON instead; checks and messages follow Triton's gRPC front end
(server/src/grpc/grpc_server.cc).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from server.protocol.errors import TritonError, invalid_arg, not_found, unsupported
from server.protocol.messages import (
    LogSettingsResponse,
    ModelConfigResponse,
    ModelMetadataResponse,
    ModelReadyResponse,
    ModelStatistics,
    ModelStatisticsResponse,
    RepositoryIndexResponse,
    ServerMetadataResponse,
    StatisticDuration,
    TensorMetadata,
    TraceSettingResponse,
)


# ------------------------------------------------------------------------------------------ metadata
def model_ready_response(answer: ModelReadyResponse) -> Any:
    return pb.ModelReadyResponse(ready=answer.ready)


def server_metadata_response(metadata: ServerMetadataResponse) -> Any:
    return pb.ServerMetadataResponse(
        name=metadata.name, version=metadata.version, extensions=metadata.extensions
    )


def model_metadata_response(metadata: ModelMetadataResponse) -> Any:
    Tensor_ = pb.ModelMetadataResponse.TensorMetadata

    def tensors(described: list[TensorMetadata]) -> list[Any]:
        return [Tensor_(name=t.name, datatype=t.datatype, shape=t.shape) for t in described]

    return pb.ModelMetadataResponse(
        name=metadata.name,
        versions=metadata.versions,
        platform=metadata.platform,
        inputs=tensors(metadata.inputs),
        outputs=tensors(metadata.outputs),
    )


def model_config_response(answer: ModelConfigResponse) -> Any:
    return pb.ModelConfigResponse(config=answer.config)


def statistics_response(statistics: ModelStatisticsResponse) -> Any:
    Duration = pb.StatisticDuration

    def duration(value: StatisticDuration) -> Any:
        return Duration(count=value.count, ns=value.ns)

    def model(stats: ModelStatistics) -> Any:
        infer = stats.inference_stats
        return pb.ModelStatistics(
            name=stats.name,
            version=stats.version,
            last_inference=stats.last_inference,
            inference_count=stats.inference_count,
            execution_count=stats.execution_count,
            inference_stats=pb.InferStatistics(
                success=duration(infer.success),
                fail=duration(infer.fail),
                queue=duration(infer.queue),
                compute_input=duration(infer.compute_input),
                compute_infer=duration(infer.compute_infer),
                compute_output=duration(infer.compute_output),
                cache_hit=duration(infer.cache_hit),
                cache_miss=duration(infer.cache_miss),
            ),
            batch_stats=[
                pb.InferBatchStatistics(
                    batch_size=batch.batch_size,
                    compute_input=duration(batch.compute_input),
                    compute_infer=duration(batch.compute_infer),
                    compute_output=duration(batch.compute_output),
                )
                for batch in stats.batch_stats
            ],
        )

    return pb.ModelStatisticsResponse(model_stats=[model(stats) for stats in statistics.model_stats])


def repository_index_response(index: RepositoryIndexResponse) -> Any:
    Index = pb.RepositoryIndexResponse.ModelIndex
    return pb.RepositoryIndexResponse(
        models=[
            Index(name=row.name, version=row.version, state=row.state, reason=row.reason)
            for row in index.models
        ]
    )


def load_parameters(message: Any) -> tuple[str | None, dict[str, bytes]]:
    """A RepositoryModelLoadRequest's config override (None when there is none) and the model files
    it carries, `file:<path>` to their bytes."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, parameter in message.parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if key == "config":
            if which != "string_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected string_param.")
            config = parameter.string_param
        elif key.startswith("file:"):
            if which != "bytes_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected bytes_param.")
            files[key] = parameter.bytes_param
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'.")
    return config, files


def unload_dependents(message: Any) -> bool:
    """The `unload_dependents` flag of a RepositoryModelUnloadRequest."""
    if "unload_dependents" not in message.parameters:
        return False
    parameter = message.parameters["unload_dependents"]
    if parameter.WhichOneof("parameter_choice") != "bool_param":
        raise invalid_arg("invalid value type for 'unload_dependents' parameter, expected bool_param.")
    return bool(parameter.bool_param)


def system_shm_status_response(regions: Iterable[Mapping[str, Any]]) -> Any:
    Status = pb.SystemSharedMemoryStatusResponse.RegionStatus
    message = pb.SystemSharedMemoryStatusResponse()
    for region in regions:
        message.regions[region["name"]].CopyFrom(
            Status(
                name=region["name"],
                key=region["key"],
                offset=int(region["offset"]),
                byte_size=int(region["byte_size"]),
            )
        )
    return message


def cuda_shm_status(name: str) -> Any:
    """CUDA shared memory status without a GPU: nothing is registered."""
    if name:
        raise not_found(f"Unable to find cuda shared memory region: '{name}'")
    return pb.CudaSharedMemoryStatusResponse()


def cuda_shm_register_error(name: str) -> TritonError:
    return unsupported(f"failed to register CUDA shared memory region: '{name}', GPUs not supported")


# ------------------------------------------------------------------------------------------ logging
_LOG_SETTINGS = (  # Triton's order, and the SettingValue field each setting takes
    ("log_file", "string_param", "string"),
    ("log_info", "bool_param", "boolean"),
    ("log_warning", "bool_param", "boolean"),
    ("log_error", "bool_param", "boolean"),
    ("log_verbose_level", "uint32_param", "int32"),
    ("log_format", "string_param", "string"),
)


def log_settings_changes(message: Any) -> dict[str, Any]:
    """The settings a LogSettingsRequest changes (unknown keys are ignored, as Triton does)."""
    changes: dict[str, Any] = {}
    settings = message.settings
    for key, field, kind in _LOG_SETTINGS:
        if key not in settings:
            continue
        value = settings[key]
        if value.WhichOneof("parameter_choice") != field:
            raise invalid_arg(f"expect {kind} for '{key}'")
        changes[key] = getattr(value, field)
    return changes


def log_settings_response(settings: LogSettingsResponse) -> Any:
    message = pb.LogSettingsResponse()
    for key, field, _ in _LOG_SETTINGS:
        setattr(message.settings[key], field, getattr(settings, key))
    return message


# ------------------------------------------------------------------------------------------ trace
_TRACE_SETTINGS = ("trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency")


def trace_settings_changes(message: Any) -> dict[str, Any]:
    """The settings a TraceSettingRequest changes, as the core takes them: trace_level a list of
    names, the others one string (the core reads and checks the values); an empty value list is None
    (back to the global value, or the default). Unknown keys are ignored, as Triton does."""
    changes: dict[str, Any] = {}
    settings = message.settings
    for key in _TRACE_SETTINGS:
        if key not in settings:
            continue
        values = list(settings[key].value)
        if not values:
            changes[key] = None
        elif key == "trace_level":
            changes[key] = values
        elif len(values) > 1:
            raise invalid_arg(f"expect only 1 value for '{key}'")
        else:
            changes[key] = values[0]
    return changes


def trace_settings_response(settings: TraceSettingResponse) -> Any:
    message = pb.TraceSettingResponse()
    for key in TraceSettingResponse.__dataclass_fields__:
        value = getattr(settings, key)
        message.settings[key].value.extend(value if isinstance(value, list) else [value])
    return message
