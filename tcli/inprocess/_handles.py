"""What the request, response and flight modules know of the objects above them: a model by its name
and version, and a request that can be cancelled. Declared here, as protocols, so that those modules
never import the model or the server (which import them)."""

from __future__ import annotations

from typing import Protocol


class ModelHandle(Protocol):
    name: str
    version: int  # -1: the highest ready version

    def versioned(self, version: str) -> ModelHandle:
        """The same model at the version a response names."""
        ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...
