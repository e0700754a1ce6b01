"""A config's `runtime` naming a backend library (a C++ `.so`) rather than a Python-based backend's
file: Triton looks for it in the version folder, the model folder and the backend's folder, in this
order, and refuses a name that is not there or that leads out of the folder it was found in. tcli
runs no C++ library: `libtriton_<backend>.so`, the backend's own library, is served by tcli's
implementation of that backend; any other library found is refused as one tcli cannot load.
"""

from __future__ import annotations

import os
from pathlib import Path


def runtime_library_error(
    runtime: str,
    backend: str,
    model: str,
    version_path: Path | None,
    model_path: Path,
    backend_directory: Path,
) -> tuple[str, str] | None:
    """Triton's refusal of `runtime` (with a fix), or None when tcli serves the model with `backend`."""
    if not runtime or runtime.endswith(".py") or runtime == f"libtriton_{backend}.so":
        return None
    searched = [p for p in (version_path, model_path, backend_directory / backend) if p is not None]
    for folder in searched:
        path = folder / runtime
        if not path.exists():
            continue
        if not os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep):
            return (
                f"backend library name '{runtime}' escapes backend directory '{folder}', for model "
                f"'{model}', check model config runtime field",
                "name a library file inside the folder, without '..'",
            )
        return (
            f"backend library '{path}' of model '{model}' is a C++ backend library, which tcli cannot load",
            f'remove runtime to serve the model with tcli\'s backend "{backend}", or serve it with Triton',
        )
    listed = " ".join(f"'{p}'" for p in searched)
    return (
        f"unable to find backend library '{runtime}' for model '{model}', searched: {listed} ",
        f'remove runtime to serve the model with backend "{backend}", or put {runtime} in one of those folders',
    )
