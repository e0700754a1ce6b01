"""A model whose files came with its load request (`file:<path>` load parameters, Triton's model
repository extension): they are written into a fresh temporary folder that is a repository of one
model, loaded from there, and removed when the model is unloaded or loaded again.

Every path is relative to the model's folder and stays inside it: an absolute path, an empty one or
one that climbs out with `..` is refused before anything is written. The folder is new and private
(mkdtemp), so no symbolic link in it can point elsewhere.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from server.protocol.errors import invalid_arg
from server.repository.layout import is_model_name
from server.repository.sources import LocalRepository

FILE_PREFIX = "file:"


def relative_path(key: str, model: str) -> PurePosixPath:
    """The path a `file:<path>` parameter names inside the model folder; INVALID_ARG when it could
    land outside it (worded after Triton's words for it, which its qa looks for)."""
    path = PurePosixPath(key.removeprefix(FILE_PREFIX))
    if not path.parts or path.is_absolute() or ".." in path.parts or "\\" in str(path):
        raise invalid_arg(
            f"failed to load '{model}', failed to poll from model repository: load parameter '{key}': the "
            "path must stay inside the model's folder; name it relative to the folder, e.g. 'file:1/model.onnx'"
        )
    return path


class RequestFiles(LocalRepository):
    """A temporary repository holding the one model a load request carried."""

    def __init__(self, model: str, files: Mapping[str, bytes]) -> None:
        if not is_model_name(model):
            raise invalid_arg(f"'{model}' cannot be a model name: it must be a single folder name")
        paths = {relative_path(key, model): data for key, data in files.items()}  # all checked before writing
        super().__init__(Path(tempfile.mkdtemp(prefix="tcli-load-")))
        self.label = f"files of the load request for '{model}'"
        try:
            for path, data in paths.items():
                target = self.path / model / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        except OSError as exc:  # e.g. "1" sent as a file and "1/model.py" under it
            self.close()
            raise invalid_arg(f"cannot write the load request's files of '{model}': {exc.strerror}") from None

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
