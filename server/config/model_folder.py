"""One model's folder as Triton reads it: the folder named after the model, its config.pbtxt, its
numeric version folders, and the version policy that picks which of them are served.

It lives with the config because the config's rules are checked against it (a version policy that
serves nothing, a labels file that is missing); a repository of many such folders is repository/.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelVersionPolicy


# folders Triton reads from a model folder that are not versions
DATA_FOLDERS = frozenset({"warmup", "initial_state", "configs"})


@dataclass(frozen=True)
class ModelFolder:
    """One model's folder in a repository, with the version folders found in it."""

    name: str
    path: Path
    repository: Path
    versions: tuple[int, ...] = ()
    ignored: tuple[str, ...] = field(default=())  # subfolders Triton skips: not positive integers
    config_name: str = ""  # --model-config-name: configs/<name>.pbtxt is the config where it exists

    @property
    def config_path(self) -> Path:
        if self.config_name:
            custom = self.path / "configs" / f"{self.config_name}.pbtxt"
            if custom.is_file():
                return custom
        return self.path / "config.pbtxt"

    def version_path(self, version: int) -> Path:
        return self.path / str(version)


def is_version_name(name: str) -> bool:
    """Triton serves only positive integer folder names; names starting with '0' are ignored."""
    return name.isdigit() and not name.startswith("0")


def scan_model(path: Path, repository: Path) -> ModelFolder:
    versions: list[int] = []
    ignored: list[str] = []
    with os.scandir(path) as entries:  # entry types come with the listing: no stat per child
        folders = sorted(e.name for e in entries if e.is_dir())
    for name in folders:
        if name.startswith(".") or name == "__pycache__":
            continue
        if is_version_name(name):
            versions.append(int(name))
        elif name not in DATA_FOLDERS:
            ignored.append(name)
    return ModelFolder(path.name, path, repository, tuple(sorted(versions)), tuple(ignored))


def select_versions(policy: ModelVersionPolicy, available: tuple[int, ...]) -> tuple[int, ...]:
    """The versions a policy serves out of those on disk (latest N by default)."""
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return available
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return tuple(v for v in available if v in wanted)
    count = policy.latest.num_versions if choice == "latest" else 1
    return tuple(sorted(available)[-count:]) if count > 0 else ()
