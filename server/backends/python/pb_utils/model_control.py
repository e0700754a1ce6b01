"""Model management from python (explicit model control): load_model, unload_model, is_model_ready,
over the server's ModelManager hook (installed with set_model_manager).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from server.backends.python.pb_utils.errors import TritonModelException


class ModelManager(Protocol):
    """The server's model-management hook. Failures raise (any exception; the message is kept)."""

    def load_model(self, model_name: str, config: str, files: dict[str, bytes], /) -> None: ...

    def unload_model(self, model_name: str, unload_dependents: bool, /) -> None: ...

    def is_model_ready(self, model_name: str, model_version: int, /) -> bool: ...


_model_manager: ModelManager | None = None


def _manager(action: str) -> ModelManager:
    manager = _model_manager
    if manager is None:
        raise TritonModelException(
            f"{action}: no model repository is available (the model is not running in tcli)"
        )
    return manager


def _manager_call(action: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except TritonModelException as e:
        raise TritonModelException(f"{action}: {e}") from None
    except Exception as e:
        message = getattr(e, "message", None)  # server.protocol.errors.TritonError carries the bare text
        raise TritonModelException(f"{action}: {message if isinstance(message, str) else e}") from None


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) a model; `config` is a JSON model config, `files` maps "file:<path>" to bytes."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError("load_model(): model_name and config must be str")
    file_map: dict[str, bytes] = {}
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of file paths and file contents"
            )
        for key, value in files.items():
            if not isinstance(key, str) or not isinstance(value, bytes):
                raise TypeError("load_model(): files must map str paths to bytes contents")
            file_map[key] = value
    action = "Failed to load model"
    manager = _manager(action)
    _manager_call(action, lambda: manager.load_model(model_name, config, file_map))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    if not isinstance(model_name, str) or not isinstance(unload_dependents, bool):
        raise TypeError("unload_model(): expected (model_name: str, unload_dependents: bool = False)")
    action = "Failed to unload model"
    manager = _manager(action)
    _manager_call(action, lambda: manager.unload_model(model_name, unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """`model_version` is a string; "" means the latest version."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError("is_model_ready(): expected (model_name: str, model_version: str = '')")
    action = "Failed to check model readiness"
    version = -1
    if model_version:
        try:
            version = int(model_version)
        except ValueError:
            raise TritonModelException(
                f"{action}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            ) from None
        if version < 0:
            raise TritonModelException(
                f"{action}: failed to get model version from specified version string '{model_version}', "
                "version should be an integral value > 0"
            )
    manager = _manager(action)
    return bool(_manager_call(action, lambda: manager.is_model_ready(model_name, version)))


# host side: the tcli server calls this -------------------------------------------------------------
def set_model_manager(manager: ModelManager | None) -> None:
    """Install (or remove) the hook behind load_model / unload_model / is_model_ready."""
    global _model_manager
    _model_manager = manager


def current_model_manager() -> ModelManager | None:
    """The hook installed now (None when the model runs outside a server)."""
    return _model_manager
