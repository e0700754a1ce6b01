"""The REST (JSON) bodies of the core service's answers other than inference
(`server/protocol/messages.py`), as Triton's HTTP front end writes them.

Most messages are written field by field as they are declared (orjson writes dataclasses natively);
two differ from their gRPC shape: the repository index is a bare array whose rows leave out what a
row does not have, and a model config is the config's own JSON form (`server/protocol/config_json.py`).
"""

from __future__ import annotations

from typing import Any

import orjson

from server.protocol.config_json import to_json_dict
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
