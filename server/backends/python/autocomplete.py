"""Python model auto-complete: `TritonPythonModel.auto_complete_config(ModelConfig)` on a config dict.

Triton runs it in a throwaway stub process; here the model file is imported as an isolated module and
forgotten afterwards. Every failure is one line naming the file and the cause, never a traceback.
Triton reports all of them as Internal errors; a missing file is an invalid repository, INVALID_ARG.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from server.backends.base import DependencyMissing
from server.protocol.errors import ErrorCode, TritonError

_PB_UTILS_NAME = "triton_python_backend_utils"


class _ModelProblem(Exception):
    """A failure already worded for the user (no exception type to prefix)."""


def auto_complete_config(
    model_file: Path, config: dict[str, Any], *, python_based: bool = False
) -> dict[str, Any]:
    """Return `config` as the model's `auto_complete_config` completes it (unchanged in content when the
    class does not define one). `config` is Triton's JSON form of ModelConfig (snake_case keys); the
    result has plain JSON types, dims as numbers, and always `name`, `max_batch_size`, `input`, `output`.
    `python_based`: `model_file` is a Python-based backend's (model_import.py)."""
    model_name = str(config.get("name") or Path(model_file).parent.parent.name)
    completed = complete_by_model(model_file, model_name, lambda: config, python_based=python_based)
    if completed is None:
        completed = _json_round_trip(_pb_utils().ModelConfig({**config, "name": model_name}))
    return completed


def complete_by_model(
    model_file: Path,
    model_name: str,
    config: Callable[[], dict[str, Any]],
    *,
    python_based: bool = False,
) -> dict[str, Any] | None:
    """`auto_complete_config` for a caller holding the config in another form: `config()` makes its
    JSON form, only when the model's class defines `auto_complete_config` (None is returned when it
    does not: the config stays as it is). Loading 10,000 copies of add_sub spent a sixth of its time
    turning configs into JSON and back for classes that complete nothing."""
    from server.backends.python.model_import import forget_module, import_model_file
    from server.backends.python.pb_utils import scope as pb_scope

    model_file = Path(model_file)
    where = f"{model_file.name} for '{model_name}'"
    if not model_file.is_file():
        raise TritonError(ErrorCode.INVALID_ARG, f"{where}: Python model file not found in '{model_file}'")

    pb_utils = _pb_utils()
    scope = pb_scope.ModelScope(model_name, model_file.parent.name, str(model_file.resolve().parent))
    module = None
    try:
        with pb_scope.model_scope(scope):
            module = import_model_file(model_file, model_name, python_based=python_based)
            model_class = getattr(module, "TritonPythonModel", None)
            if model_class is None:
                raise _ModelProblem(
                    f"AttributeError: module '{model_file.stem}' has no attribute 'TritonPythonModel'"
                )
            if not hasattr(model_class, "auto_complete_config"):
                return None
            model_config = pb_utils.ModelConfig({**config(), "name": model_name})
            model_config = model_class.auto_complete_config(model_config)
            if not isinstance(model_config, pb_utils.ModelConfig):
                raise _ModelProblem(
                    f"auto_complete_config function in model '{model_name}' must return a valid "
                    "pb.ModelConfig object."
                )
            return _json_round_trip(model_config)
    except _ModelProblem as e:
        raise TritonError(ErrorCode.INTERNAL, f"{where}: {e}") from None
    except ModuleNotFoundError as e:
        if e.name and not _own_module(e.name, model_file, python_based):
            raise DependencyMissing(f"{where}: {_one_line(e)}", e.name.partition(".")[0]) from None
        raise TritonError(ErrorCode.INTERNAL, f"{where}: {_one_line(e)}") from None
    except (Exception, SystemExit) as e:
        raise TritonError(ErrorCode.INTERNAL, f"{where}: {_one_line(e)}") from None
    finally:
        if module is not None:
            forget_module(module, scan=False)


def _own_module(name: str, model_file: Path, python_based: bool) -> bool:
    """Whether the module the model failed to import would be one of the model's own files (a missing
    helper is a broken model; a missing package is a machine without the model's dependencies)."""
    top = name.partition(".")[0]
    version_dir = model_file.resolve().parent
    folders = (version_dir,) if python_based else (version_dir, version_dir.parent)
    return top == _PB_UTILS_NAME or any(
        (folder / top).is_dir() or (folder / f"{top}.py").is_file() for folder in folders
    )


def _pb_utils() -> Any:
    from server.backends.python.model_import import ensure_pb_utils

    return ensure_pb_utils()


def _json_round_trip(model_config: Any) -> dict[str, Any]:
    """As Triton's stub does: only plain JSON values get through."""
    completed: dict[str, Any] = json.loads(json.dumps(model_config.as_dict()))
    return completed


def _one_line(error: BaseException) -> str:
    """`Type: message` on one line; SyntaxError's str() already names file and line."""
    message = " ".join(str(error).split())
    name = type(error).__name__
    return f"{name}: {message}" if message else name
