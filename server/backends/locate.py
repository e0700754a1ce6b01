"""Where the backend a model config names comes from.

Searched in this order, as Triton looks for a C++ backend library before a Python-based backend:
1. tcli's built-in backends (table.py);
2. a Python-based backend in the backend directory (--backend-directory, Triton's default
   /opt/tritonserver/backends): `<directory>/<backend>/model.py`, a `TritonPythonModel` that serves
   every model whose config names the backend, run by tcli's python backend;
3. an installed package announcing the backend in the entry point group `tcli.backends` (tcli's own
   way: Triton has no Python packages of backends), whose object loads instances through the
   interface of base.py.

`runtime: "model.py"` in a config asks for the Python-based backend even where a built-in backend
has the name (Triton's PyTorch 2 runtime is `backends/pytorch/model.py`, chosen this way). tcli also
takes any other `<file>.py` there, a file of the backend's folder; Triton takes only model.py.

Loading (registry.py), completing a config and validating it (server/config/) all ask here, so they
find the same backend and word a missing one alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from server.backends.table import NAMES
from server.protocol.errors import ErrorCode, TritonError

ENTRY_POINT_GROUP = "tcli.backends"
PYTHON_RUNTIME = "model.py"  # the file of a Python-based backend, and the runtime Triton fills in


@dataclass(frozen=True)
class LocatedBackend:
    """The backend that serves a model: built in, a Python-based backend's file, or an entry point."""

    name: str
    python_file: Path | None = None  # <backend directory>/<backend>/model.py
    entry_point: EntryPoint | None = None

    @property
    def built_in(self) -> bool:
        return self.python_file is None and self.entry_point is None


class BackendNotFound(TritonError):
    """No place tcli searches has the backend; `fix` says what would provide it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(ErrorCode.INVALID_ARG, message)
        self.fix = fix


def locate_backend(backend: str, runtime: str, directory: Path, model: str) -> LocatedBackend:
    """The backend `backend` (with the config's `runtime`) for `model`, or BackendNotFound naming every
    place searched."""
    if runtime.endswith(".py"):
        return _python_based(backend, runtime, directory, model)
    if backend in NAMES:
        return LocatedBackend(backend)
    path = directory / backend / PYTHON_RUNTIME
    if path.is_file():
        return LocatedBackend(backend, python_file=path)
    entry = announced(backend)
    if entry is not None:
        return LocatedBackend(backend, entry_point=entry)
    searched = [
        f"built-in backends ({', '.join(NAMES)})",
        str(path),
        f"entry points in group '{ENTRY_POINT_GROUP}'",
    ]
    raise BackendNotFound(
        f"unable to find backend library for backend '{backend}', try specifying runtime on the model "
        f"configuration. tcli searched: {', '.join(searched)}",
        f"put its model.py in {directory / backend}/ (--backend-directory), install a package that "
        f"declares '{backend}' in entry point group '{ENTRY_POINT_GROUP}', or set backend to one of "
        f"{', '.join(NAMES)}",
    )


def announced(backend: str) -> EntryPoint | None:
    """The installed entry point named `backend` in the group (not loaded: validation only asks)."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == backend:
            return entry
    return None


def _python_based(backend: str, runtime: str, directory: Path, model: str) -> LocatedBackend:
    folder = directory / backend
    if Path(runtime).name != runtime or runtime.startswith("."):
        raise BackendNotFound(
            f"backend library name '{runtime}' escapes backend directory '{folder}', for model "
            f"'{model}', check model config runtime field",
            f'name a file of {folder}, e.g. runtime: "{PYTHON_RUNTIME}"',
        )
    path = folder / runtime
    if not path.is_file():
        # Triton's words for a runtime: "model.py" it cannot find
        raise BackendNotFound(
            f"unable to find Python backend based backend library '{runtime}' for model '{model}', "
            f"searched: '{path}'",
            f"put the backend's {runtime} at {path} (--backend-directory sets {folder.parent}), or remove runtime",
        )
    return LocatedBackend(backend, python_file=path)
