"""The REST (JSON) bodies of the core service's answers other than inference
(`server/protocol/messages.py`), as Triton's HTTP front end writes them, and the parameters of a
model load request, as it reads them.

Most messages are written field by field as they are declared (orjson writes dataclasses natively);
two differ from their gRPC shape: the repository index is a bare array whose rows leave out what a
row does not have, and a model config is the config's own JSON form (`server/protocol/config_json.py`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from server.protocol.config_json import to_json_dict
from server.protocol.errors import invalid_arg
from server.protocol.messages import ModelConfigResponse, ModelIndex, RepositoryIndexResponse


def encode(message: Any) -> bytes:
    """The JSON body answering with `message`."""
    if isinstance(message, RepositoryIndexResponse):
        return orjson.dumps([_index_row(row) for row in message.models])
    if isinstance(message, ModelConfigResponse):
        return orjson.dumps(to_json_dict(message.config))
    return orjson.dumps(message)


def _index_row(row: ModelIndex) -> dict[str, str]:
    """A model that is not loaded is listed by name only; a version by name, version and state, and
    the reason when there is one."""
    entry = {"name": row.name}
    if row.version:
        entry["version"] = row.version
        entry["state"] = row.state
    if row.reason:
        entry["reason"] = row.reason
    return entry


def load_parameters(params: dict[str, Any]) -> tuple[str | None, dict[str, bytes]]:
    """A load request's `parameters`: the JSON config override (None when absent) and the model files
    it carries, `file:<path>` to their bytes (base64 in JSON)."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if type(value) is not str:
            raise invalid_arg(f"Unable to parse '{key}': attempt to access JSON non-string as string")
        if key == "config":
            config = value
        elif key.startswith("file:"):
            try:
                files[key] = base64.b64decode(value, validate=True)
            except binascii.Error:
                raise invalid_arg(
                    f"Unable to parse '{key}': the file's content must be base64-encoded"
                ) from None
        else:
            raise invalid_arg(f"unexpected load parameter '{key}': expected 'config' or 'file:<path>'")
    return config, files
