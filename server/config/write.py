"""Write a ModelConfig back as canonical pbtxt (its JSON form is protocol/config_json.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def to_pbtxt(config: ModelConfig) -> str:
    """Canonical text format: fields in schema order, two-space indent, as protobuf prints it."""
    from google.protobuf import text_format

    return text_format.MessageToString(config, indent=2)
