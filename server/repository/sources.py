"""Where a repository's model folders come from: a local folder, or object storage through a local copy.

The manager sees both the same way: `refresh()` reads what the repository holds now (a no-op for a
folder, one listing for a bucket), `folders()` names the model folders found, `fingerprint(name)`
tells whether a model changed since, and `fetch(name)` makes its files ready on local disk and
returns its folder. A remote repository that cannot be listed keeps its last listing, so the models
it served go on serving, and says why in `error`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from server.config.model_folder import DATA_FOLDERS, ModelFolder, is_version_name, scan_model
from server.config.parse import CONFIG_FILENAME
from server.protocol.errors import TritonError
from server.repository.layout import is_model_name, scan_repository
from server.repository.storage.location import RemoteLocation, parse_location
from server.repository.storage.mirror import RepositoryMirror

log = logging.getLogger("tcli.server")


class Repository(Protocol):
    label: str  # as the user gave it: a path or s3://..., for logs and tables
    error: str | None  # why the last refresh failed; None when it worked
    listed: bool  # listed successfully at least once (readiness waits for it)

    def refresh(self) -> None: ...

    def folders(self) -> dict[str, ModelFolder]: ...

    def folder(self, name: str) -> ModelFolder | None: ...

    def fingerprint(self, name: str) -> tuple[object, ...]: ...

    def fetch(self, name: str, config_only: bool = False) -> ModelFolder:
        """The model's folder on local disk, with its files (or only its config.pbtxt) up to date."""

    def remote(self, name: str) -> RemoteLocation | None:
        """The model folder's location in object storage; None for a local folder."""

    def local_paths(self) -> list[Path]:
        """Folders whose file events mean a change (watched in poll mode)."""

    def drop(self, name: str) -> None: ...

    def close(self) -> None: ...


def folder_fingerprint(path: Path) -> tuple[object, ...]:
    """Names, sizes and modification times of everything in a model folder, and the names of its
    folders (a new version folder may hold no file: a python-based backend's): changes mean reload."""
    entries: list[tuple[str, int, int]] = []
    # os.walk over scandir: one stat per file, where rglob + is_file + stat took three
    for folder, subfolders, files in os.walk(path, followlinks=True):  # as rglob, into linked folders
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        # a folder's name only: its modification time changes when Python writes __pycache__ in it
        entries.extend(
            (os.path.relpath(os.path.join(folder, name), path) + os.sep, 0, 0) for name in subfolders
        )
        for name in files:
            item = os.path.join(folder, name)
            try:
                stat = os.stat(item)
            except OSError:
                continue
            entries.append((os.path.relpath(item, path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


class LocalRepository:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)
        self.error: str | None = None
        # a folder that is not there (--exit-on-error=false) keeps the server unready, as Triton
        self.listed = path.is_dir()

    def refresh(self) -> None:
        if not self.path.is_dir():
            raise FileNotFoundError(f"model repository '{self.path}' is not a directory")
        self.listed = True

    def folders(self) -> dict[str, ModelFolder]:
        return {folder.name: folder for folder in scan_repository(self.path)}

    def folder(self, name: str) -> ModelFolder | None:
        if not is_model_name(name):
            return None
        path = self.path / name
        return scan_model(path, self.path) if path.is_dir() else None

    def fingerprint(self, name: str) -> tuple[object, ...]:
        return folder_fingerprint(self.path / name)

    def fetch(self, name: str, config_only: bool = False) -> ModelFolder:
        return scan_model(self.path / name, self.path)

    def remote(self, name: str) -> RemoteLocation | None:
        return None

    def local_paths(self) -> list[Path]:
        return [self.path]

    def drop(self, name: str) -> None:
        return None

    def close(self) -> None:
        return None


class RemoteRepository:
    def __init__(self, location: RemoteLocation, mirror: RepositoryMirror | None = None) -> None:
        self.location = location
        self.label = location.url
        self.mirror = mirror or RepositoryMirror(location)
        self.error: str | None = None
        self.listed = False

    def refresh(self) -> None:
        try:
            self.mirror.refresh()
        except TritonError as exc:
            self.error = exc.message
            raise
        self.error = None
        self.listed = True

    def folders(self) -> dict[str, ModelFolder]:
        return {name: self._listed(name) for name in sorted(self.mirror.models)}

    def folder(self, name: str) -> ModelFolder | None:
        return self._listed(name) if name in self.mirror.models else None

    def _listed(self, name: str) -> ModelFolder:
        """The model folder as the last listing shows it (its version folders), before any download."""
        top = {path.split("/", 1)[0] for path in self.mirror.models[name].folders}
        versions = tuple(sorted(int(sub) for sub in top if is_version_name(sub)))
        ignored = tuple(sorted(sub for sub in top if not is_version_name(sub) and sub not in DATA_FOLDERS))
        return ModelFolder(name, self.mirror.root / name, self.mirror.root, versions, ignored)

    def fingerprint(self, name: str) -> tuple[object, ...]:
        objects = self.mirror.models.get(name)
        return objects.fingerprint() if objects is not None else ()

    def fetch(self, name: str, config_only: bool = False) -> ModelFolder:
        # the config, and the custom configs --model-config-name can pick
        path = self.mirror.fetch(name, only={CONFIG_FILENAME, "configs"} if config_only else None)
        return scan_model(path, self.mirror.root)

    def remote(self, name: str) -> RemoteLocation | None:
        return self.location.child(name)

    def local_paths(self) -> list[Path]:
        return []

    def drop(self, name: str) -> None:
        self.mirror.drop(name)

    def close(self) -> None:
        self.mirror.close()


def open_repository(location: str | Path) -> Repository:
    """A repository for a path as tritonserver takes it (a folder, or s3:// gs:// as://)."""
    parsed = parse_location(location)
    if isinstance(parsed, RemoteLocation):
        return RemoteRepository(parsed)
    return LocalRepository(parsed)


@dataclass(frozen=True)
class LocalCopy:
    label: str  # the repository as given
    path: Path | None  # a local folder holding it; None when it could not be read
    error: str | None = None


@contextlib.contextmanager
def local_copies(locations: Sequence[str | Path]) -> Iterator[list[LocalCopy]]:
    """Each repository as a local folder, for reading it whole (`tcli repo validate`, `index`): a
    bucket is downloaded into a temporary copy, removed on exit."""
    opened: list[Repository] = []
    copies: list[LocalCopy] = []
    try:
        for location in locations:
            try:
                repository = open_repository(location)
            except TritonError as exc:
                copies.append(LocalCopy(str(location), None, exc.message))
                continue
            opened.append(repository)
            if isinstance(repository, LocalRepository):
                copies.append(LocalCopy(repository.label, repository.path))
                continue
            assert isinstance(repository, RemoteRepository)
            try:
                repository.refresh()
                for name in repository.folders():
                    repository.fetch(name)
            except TritonError as exc:
                copies.append(LocalCopy(repository.label, None, exc.message))
                continue
            copies.append(LocalCopy(repository.label, repository.mirror.root))
        yield copies
    finally:
        for repository in opened:
            repository.close()
