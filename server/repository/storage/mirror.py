"""The local copy of a repository in object storage: models are loaded from files, so each model's
objects are downloaded into a folder of its own before it loads, and only the objects that changed
since (by ETag) are downloaded again.

`refresh()` lists the whole repository once (one paginated listing per poll); `fetch(name)` brings
one model's folder up to date with that listing, downloading in parallel and deleting local files
whose objects are gone. A download is written beside its target and renamed into place, so a
failed one leaves the previous file whole.

Where the copy lives: the folder named by TRITON_AWS_MOUNT_DIRECTORY (s3), TRITON_GCS_MOUNT_DIRECTORY
(gs) or TRITON_AZURE_MOUNT_DIRECTORY (as), as Triton reads them, in a subfolder per repository; it
is kept at shutdown, with a manifest of what it holds, so a restart downloads only what changed.
Without the variable, a temporary folder that is removed at shutdown, as Triton does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from server.protocol.errors import TritonError, internal
from server.repository.storage.location import RemoteLocation
from server.repository.storage.objects import ObjectInfo, ObjectStore
from server.repository.storage.stores import open_store

MOUNT_VARIABLES = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}
DOWNLOAD_WORKERS = 8
_MANIFEST = ".tcli-mirror.json"
log = logging.getLogger("tcli.server")


@dataclass
class ModelObjects:
    """One model folder's objects in the last listing, by path relative to the model folder."""

    files: dict[str, ObjectInfo] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)  # every folder path, markers and implied ones

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted((path, info.etag, info.size) for path, info in self.files.items()))


@dataclass
class Transfer:
    """What the mirror has downloaded since it was opened."""

    objects: int = 0
    bytes: int = 0


class RepositoryMirror:
    def __init__(self, location: RemoteLocation, store: ObjectStore | None = None) -> None:
        self.location = location
        self._store = store
        self.transfer = Transfer()
        mount = os.environ.get(MOUNT_VARIABLES[location.scheme])
        if mount:
            digest = hashlib.sha256(location.url.encode()).hexdigest()[:10]
            self.root = Path(mount) / f"{location.bucket}-{digest}"
            self.root.mkdir(parents=True, exist_ok=True)
            self._temporary = False
        else:
            self.root = Path(tempfile.mkdtemp(prefix="tcli-repository-"))
            self._temporary = True
        self.models: dict[str, ModelObjects] = {}
        self._held = self._read_manifest()  # relative key -> ETag of the file on disk
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(DOWNLOAD_WORKERS, thread_name_prefix="download")

    @property
    def store(self) -> ObjectStore:
        if self._store is None:  # opened on first use: the SDK import and the client cost time
            self._store = open_store(self.location)
        return self._store

    def refresh(self) -> dict[str, ModelObjects]:
        """List the repository; raises TritonError (the listing before stays in place)."""
        base = f"{self.location.prefix}/" if self.location.prefix else ""
        models: dict[str, ModelObjects] = {}
        for info in self.store.list(base):
            relative = info.key[len(base) :]
            name, _, inside = relative.partition("/")
            if not name or not inside or name.startswith("."):
                continue  # a file at the top of the repository, or the model folder's own marker
            objects = models.setdefault(name, ModelObjects())
            parts = inside.rstrip("/").split("/")
            objects.folders.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
            if inside.endswith("/"):
                objects.folders.add(inside.rstrip("/"))  # an empty folder's marker object
            else:
                objects.files[inside] = info
        self.models = models
        return models

    def fetch(self, name: str, only: set[str] | None = None) -> Path:
        """Bring the local copy of model `name` up to date with the last listing (only the files and
        top-level folders named in `only`, relative to the model folder, when given); its folder."""
        objects = self.models.get(name, ModelObjects())
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        for sub in sorted(objects.folders):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        wanted = {
            f"{name}/{path}": info
            for path, info in objects.files.items()
            if only is None or path in only or path.split("/", 1)[0] in only
        }
        stale = [
            (relative, info)
            for relative, info in wanted.items()
            if self._held.get(relative) != info.etag or not (self.root / relative).is_file()
        ]
        if stale:
            futures = [self._pool.submit(self._download, relative, info) for relative, info in stale]
            errors = [f.exception() for f in futures if f.exception() is not None]
            if errors:
                self._write_manifest()
                error = errors[0]
                raise (
                    error if isinstance(error, TritonError) else internal(f"{type(error).__name__}: {error}")
                )
            log.info(
                "downloaded %d object(s), %d bytes, of model '%s' from %s",
                len(stale),
                sum(info.size for _, info in stale),
                name,
                self.location,
            )
        if only is None:
            self._remove_extra(folder, name, wanted, objects.folders)
        self._write_manifest()
        return folder

    def drop(self, name: str) -> None:
        """Remove the local copy of a model that is gone from the repository."""
        shutil.rmtree(self.root / name, ignore_errors=True)
        with self._lock:
            for relative in [r for r in self._held if r.startswith(f"{name}/")]:
                del self._held[relative]
        self._write_manifest()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    # internals ------------------------------------------------------------------------------------
    def _download(self, relative: str, info: ObjectInfo) -> None:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        try:
            self.store.download(info.key, partial)
            partial.replace(target)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
        with self._lock:
            self._held[relative] = info.etag
            self.transfer.objects += 1
            self.transfer.bytes += info.size

    def _remove_extra(
        self, folder: Path, name: str, wanted: dict[str, ObjectInfo], folders: set[str]
    ) -> None:
        """Local files and folders whose objects are gone (a deleted version, a removed file)."""
        for path in sorted(folder.rglob("*"), reverse=True):  # children before their folders
            relative = path.relative_to(self.root).as_posix()
            inside = path.relative_to(folder).as_posix()
            if "__pycache__" in path.parts:
                continue
            if path.is_file() and relative not in wanted:
                path.unlink()
                with self._lock:
                    self._held.pop(relative, None)
            elif path.is_dir() and inside not in folders and not any(path.iterdir()):
                path.rmdir()

    def _read_manifest(self) -> dict[str, str]:
        try:
            held = json.loads((self.root / _MANIFEST).read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in held.items() if isinstance(v, str)} if isinstance(held, dict) else {}

    def _write_manifest(self) -> None:
        with self._lock:
            text = json.dumps(self._held, sort_keys=True)
        with contextlib.suppress(OSError):
            (self.root / _MANIFEST).write_text(text)
