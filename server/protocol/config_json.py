"""A ModelConfig in Triton's JSON form: what GET /v2/models/<m>/config answers, what the python backend
hands a model as args["model_config"], and what a load request's "config" parameter carries."""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def to_json_dict(config: ModelConfig) -> dict[str, Any]:
    """Triton's JSON form (what GET /v2/models/<m>/config answers): snake_case names, every scalar
    with its default, enums as names, int64 fields as numbers (protobuf's own printer writes int64 as
    strings), keys in the order the schema declares the fields and map entries sorted by key, as
    Triton's C++ printer writes them (Python's printer puts set fields first, then the defaults).

    Configs that differ only in the model's name (and the instance group names made of it) share one
    conversion: protobuf's printer is pure python, and a python model converts its config for each
    instance (a fifth of loading 10,000 copies of add_sub)."""
    unnamed = type(config)()
    unnamed.CopyFrom(config)
    unnamed.name = ""
    for group in unnamed.instance_group:
        group.name = ""
    key = unnamed.SerializeToString(deterministic=True)
    with _converted_lock:
        text = _converted.get(key)
    if text is None:
        text = json.dumps(_convert(unnamed))
        with _converted_lock:
            _converted[key] = text
            while len(_converted) > _CONVERTED_KEPT:
                _converted.popitem(last=False)
    data: dict[str, Any] = json.loads(text)  # a copy of its own for each caller
    data["name"] = config.name
    for group, written in zip(config.instance_group, data.get("instance_group", []), strict=True):
        written["name"] = group.name
    return data


# JSON forms of configs lately converted, by the config less its names, newest last
_converted: OrderedDict[bytes, str] = OrderedDict()
_converted_lock = threading.Lock()
_CONVERTED_KEPT = 64


def _convert(config: ModelConfig) -> dict[str, Any]:
    from google.protobuf import json_format

    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    result: dict[str, Any] = _canonical_message(data, config.DESCRIPTOR)
    return result


def from_json_dict(data: dict[str, Any]) -> ModelConfig:
    from google.protobuf import json_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    return json_format.ParseDict(data, ModelConfig())


def parse_override(text: str) -> ModelConfig:
    """A load request's JSON config, read as Triton reads it: a repeated message field may be given
    as one object (`"instance_group": {"count": 2}`) as well as a list. Raises json_format.ParseError
    for text that is not such a config."""
    from google.protobuf import json_format
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise json_format.ParseError(str(exc)) from None
    if not isinstance(data, dict):
        raise json_format.ParseError("a model config must be a JSON object")
    try:
        return json_format.ParseDict(_lists_for_repeated(data, ModelConfig.DESCRIPTOR), ModelConfig())
    except json_format.ParseError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a value of an unexpected shape
        raise json_format.ParseError(f"{type(exc).__name__}: {exc}") from None


def _lists_for_repeated(value: Any, descriptor: Any) -> Any:
    """`value` with a lone object given for a repeated message field wrapped in a list, recursively."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None or field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if _repeated(field):
            items = [item] if isinstance(item, dict) else item
            if isinstance(items, list):
                out[key] = [_lists_for_repeated(each, field.message_type) for each in items]
        else:
            out[key] = _lists_for_repeated(item, field.message_type)
    return out


def _repeated(field: Any) -> bool:
    """protobuf 6.x has `is_repeated` (a property) and deprecates `label`; older ones only `label`."""
    flag = getattr(field, "is_repeated", None)
    return flag if isinstance(flag, bool) else bool(field.label == field.LABEL_REPEATED)


@functools.cache
def _int64_types() -> frozenset[int]:
    from google.protobuf.descriptor import FieldDescriptor

    return frozenset(
        {
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED64,
            FieldDescriptor.TYPE_SFIXED64,
        }
    )


def _canonical_message(value: Any, descriptor: Any) -> Any:
    """Keys in declaration order, int64 values as numbers, recursively."""
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            # map entries sorted by key, as Triton's printer writes them (Python's order is the hash
            # table's, which changes from one process to the next); integer keys sort as numbers
            value_field = field.message_type.fields_by_name["value"]
            numeric = field.message_type.fields_by_name["key"].cpp_type in _integer_cpp_types()
            keys = sorted(item, key=int) if numeric else sorted(item)
            out[field.name] = {k: _canonical_item(item[k], value_field) for k in keys}
        elif field.is_repeated:
            out[field.name] = [_canonical_item(v, field) for v in item]
        else:
            out[field.name] = _canonical_item(item, field)
    for key, item in value.items():  # nothing the descriptor does not know is dropped
        out.setdefault(key, item)
    return out


@functools.cache
def _integer_cpp_types() -> frozenset[int]:
    from google.protobuf.descriptor import FieldDescriptor

    return frozenset(
        {
            FieldDescriptor.CPPTYPE_INT32,
            FieldDescriptor.CPPTYPE_INT64,
            FieldDescriptor.CPPTYPE_UINT32,
            FieldDescriptor.CPPTYPE_UINT64,
        }
    )


def _canonical_item(item: Any, field: Any) -> Any:
    if field.message_type is not None:
        return _canonical_message(item, field.message_type)
    if field.type in _int64_types() and isinstance(item, str):
        return int(item)
    return item
