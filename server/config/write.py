"""Write a ModelConfig back as canonical pbtxt, and as Triton's REST JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def to_pbtxt(config: ModelConfig) -> str:
    """Canonical text format: fields in schema order, two-space indent, as protobuf prints it."""
    from google.protobuf import text_format

    return text_format.MessageToString(config, indent=2)


def to_json_dict(config: ModelConfig) -> dict[str, Any]:
    """Triton's JSON form: snake_case names, every scalar with its default, enums as names, and
    int64 fields as numbers (protobuf's own printer writes int64 as strings)."""
    from google.protobuf import json_format

    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _int64_to_numbers(data, config.DESCRIPTOR)


def from_json_dict(data: dict[str, Any]) -> ModelConfig:
    from google.protobuf import json_format

    from server.config.parse import new_config

    return json_format.ParseDict(data, new_config())


def _int64_to_numbers(value: Any, descriptor: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor

    int64_types = {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
    if not isinstance(value, dict) or descriptor is None:
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            out[key] = item
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[key] = {k: _convert_scalar_or_message(v, value_field, int64_types) for k, v in item.items()}
        elif field.is_repeated:
            out[key] = [_convert_scalar_or_message(v, field, int64_types) for v in item]
        else:
            out[key] = _convert_scalar_or_message(item, field, int64_types)
    return out


def _convert_scalar_or_message(item: Any, field: Any, int64_types: set[int]) -> Any:
    if field.message_type is not None:
        return _int64_to_numbers(item, field.message_type)
    if field.type in int64_types and isinstance(item, str):
        return int(item)
    return item
