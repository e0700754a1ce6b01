"""The protobuf messages of `inference.GRPCInferenceService` other than inference: server and model
metadata, model config, statistics, the repository index, load and unload parameters, shared memory
status, log and trace settings. Pure functions between the messages (tritonclient's generated
`service_pb2`, `model_config_pb2`) and the dict forms the core facade gives the HTTP front end too;
checks and messages follow Triton's gRPC front end (server/src/grpc/grpc_server.cc).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc import service_pb2 as pb

from server.protocol.errors import TritonError, invalid_arg, not_found, unsupported


# ------------------------------------------------------------------------------------------ metadata
def server_metadata_response(metadata: Mapping[str, Any]) -> Any:
    return pb.ServerMetadataResponse(
        name=metadata["name"], version=metadata["version"], extensions=list(metadata.get("extensions", ()))
    )


def model_metadata_response(metadata: Mapping[str, Any]) -> Any:
    Tensor_ = pb.ModelMetadataResponse.TensorMetadata

    def tensors(key: str) -> list[Any]:
        return [
            Tensor_(name=t["name"], datatype=t["datatype"], shape=[int(d) for d in t["shape"]])
            for t in metadata.get(key, ())
        ]

    return pb.ModelMetadataResponse(
        name=metadata["name"],
        versions=[str(v) for v in metadata.get("versions", ())],
        platform=metadata.get("platform", ""),
        inputs=tensors("inputs"),
        outputs=tensors("outputs"),
    )


def model_config_response(config: Mapping[str, Any]) -> Any:
    """The ModelConfigResponse of a config in its JSON form (as the REST API gives it)."""
    message = model_config_pb2.ModelConfig()
    json_format.ParseDict(config, message, ignore_unknown_fields=True)
    return pb.ModelConfigResponse(config=message)


def statistics_response(statistics: Mapping[str, Any]) -> Any:
    """The ModelStatisticsResponse of statistics in their JSON form."""
    message = pb.ModelStatisticsResponse()
    json_format.ParseDict(statistics, message, ignore_unknown_fields=True)
    return message


def repository_index_response(rows: Iterable[Mapping[str, Any]]) -> Any:
    Index = pb.RepositoryIndexResponse.ModelIndex
    return pb.RepositoryIndexResponse(
        models=[
            Index(
                name=row["name"],
                version=str(row.get("version", "")),
                state=str(row.get("state", "")),
                reason=str(row.get("reason", "")),
            )
            for row in rows
        ]
    )


def load_parameters(message: Any) -> str | None:
    """The config override of a RepositoryModelLoadRequest (None when there is none)."""
    config: str | None = None
    for key, parameter in message.parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if key == "config":
            if which != "string_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected string_param.")
            config = parameter.string_param
        elif key.startswith("file:"):
            if which != "bytes_param":
                raise invalid_arg(f"invalid value type for load parameter '{key}', expected bytes_param.")
            raise unsupported(f"loading model files from the request ('{key}') is not supported")
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'.")
    return config


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


def log_settings_response(settings: Mapping[str, Any]) -> Any:
    message = pb.LogSettingsResponse()
    for key, field, _ in _LOG_SETTINGS:
        if key in settings:
            value = settings[key]
            setattr(message.settings[key], field, int(value) if field == "uint32_param" else value)
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


def trace_settings_response(settings: Mapping[str, Any]) -> Any:
    message = pb.TraceSettingResponse()
    for key, value in settings.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        message.settings[key].value.extend(str(v) for v in values)
    return message
