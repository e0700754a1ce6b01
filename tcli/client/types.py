"""The request and result types shared by tcli's HTTP and gRPC clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server.protocol import datatypes


class ClientError(Exception):
    """A server's error answer or a transport failure, as one line for the user."""

    def __init__(self, message: str, status: int | str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class InferInput:
    name: str
    data: np.ndarray[Any, Any]
    datatype: str = ""  # wire name; derived from the array when empty

    def __post_init__(self) -> None:
        if not self.datatype:
            self.datatype = datatypes.numpy_to_wire(self.data.dtype)
        if self.datatype == "BYTES" and self.data.dtype != object:
            self.data = np.array([_as_bytes(v) for v in self.data.reshape(-1)], dtype=object).reshape(
                self.data.shape
            )

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.data.shape]


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, np.bytes_):
        return bytes(value)
    return str(value).encode()


@dataclass
class RequestedOutput:
    name: str
    class_count: int = 0  # classification extension: top-N "value:index[:label]" strings


@dataclass
class InferResult:
    model_name: str
    model_version: str
    id: str = ""
    outputs: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    datatypes: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)

    def as_numpy(self, name: str) -> np.ndarray[Any, Any]:
        if name not in self.outputs:
            raise ClientError(
                f"the response has no output '{name}' (it has {', '.join(self.outputs) or 'none'})"
            )
        return self.outputs[name]
