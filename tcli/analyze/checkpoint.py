"""The checkpoint: every candidate measured so far, written after each one, so that a search that was
interrupted (Ctrl-C, a timeout, a crash) resumes where it stopped: the same command reads it and
measures only what is missing. A checkpoint belongs to one analysis (model, where it is measured, the
measurement settings, the search and its constraints); another analysis refuses it rather than mix
its numbers in."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tcli.analyze.results import Measured
from tcli.errors import CliError

FORMAT = 1


def default_checkpoint(model: str, url: str | None, repository: Path | None) -> Path:
    """Where a checkpoint goes unless --checkpoint says: the user's cache, one file per model and place
    measured (server or repository). Never the current folder, which is often a source checkout,
    and where the file of one analysis met another's."""
    where = url or str(repository.resolve() if repository is not None else "")
    digest = hashlib.sha256(where.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tcli" / "analyze" / f"{model}-{digest}.checkpoint.json"


class Checkpoint:
    def __init__(self, path: Path | None, signature: dict[str, Any], fresh: bool = False) -> None:
        self.path = path
        self.signature = signature
        self.entries: dict[str, Measured] = {}  # "model:candidate key" -> what it measured
        self.from_file: set[str] = set()  # the keys read from the file (measured by an earlier run)
        if path is not None and path.exists() and not fresh:
            self._read(path)

    def _read(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CliError(
                f"--checkpoint {path}: cannot read it ({exc}); remove it, or pass --fresh to start over"
            ) from None
        if data.get("format") != FORMAT or data.get("signature") != self.signature:
            raise CliError(
                f"--checkpoint {path} was written by another analysis (other model, options or settings): "
                "pass --fresh to start over, or another --checkpoint file"
            )
        for key, item in (data.get("measured") or {}).items():
            self.entries[key] = Measured.from_dict(item)
            self.from_file.add(key)

    def get(self, key: str) -> Measured | None:
        return self.entries.get(key)

    def put(self, measured: Measured, key: str) -> None:
        self.entries[key] = measured
        if self.path is None:
            return
        data = {
            "format": FORMAT,
            "signature": self.signature,
            "measured": {key: item.to_dict() for key, item in self.entries.items()},
        }
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
            os.replace(temporary, self.path)  # a reader never sees half a file
        except OSError as exc:
            raise CliError(f"--checkpoint {self.path}: cannot write it: {exc.strerror or exc}") from None
