"""Model control from inside python models: `pb_utils.load_model`, `unload_model` and
`is_model_ready` call the core service as the repository API's clients do (explicit control mode,
the same errors), run on the server's event loop and waited for on the model's own thread."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from server.backends.python.pb_utils import model_control

if TYPE_CHECKING:
    from server.service import InferenceService

T = TypeVar("T")


class ServiceModelControl(model_control.ModelManager):
    """pb_utils' model-management hook over one server's service."""

    def __init__(self, service: InferenceService, loop: asyncio.AbstractEventLoop) -> None:
        self.service = service
        self.loop = loop

    def _wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def load_model(self, model_name: str, config: str, files: dict[str, bytes], /) -> None:
        self._wait(self.service.load(model_name, config or None, files))

    def unload_model(self, model_name: str, unload_dependents: bool, /) -> None:
        self._wait(self.service.unload(model_name, unload_dependents))

    def is_model_ready(self, model_name: str, model_version: int, /) -> bool:
        version = "" if model_version < 0 else str(model_version)
        return self.service.model_ready(model_name, version).ready


def install(service: InferenceService, loop: asyncio.AbstractEventLoop) -> ServiceModelControl:
    control = ServiceModelControl(service, loop)
    model_control.set_model_manager(control)
    return control


def uninstall(control: ServiceModelControl) -> None:
    if model_control.current_model_manager() is control:
        model_control.set_model_manager(None)
