"""Write a ModelConfig back as canonical pbtxt (its JSON form is protocol/config_json.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def to_pbtxt(config: ModelConfig) -> str:
    """Canonical text format: fields in schema order at the left margin, nested fields two spaces in, as
    protobuf prints it (its `indent` argument would shift every line, the top level too)."""
    from google.protobuf import text_format

    return text_format.MessageToString(config)
