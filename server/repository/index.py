"""A repository listing: models, version folders, the versions the policy serves, backend. Reads
configs without auto-complete, so it stays fast on large repositories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.config import backends
from server.config.model_folder import select_versions
from server.config.parse import new_config, read_config
from server.protocol.errors import TritonError
from server.repository.layout import scan_repository


def index_rows(repositories: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for repository in repositories:
        for folder in scan_repository(repository):
            config_state = "config.pbtxt" if folder.config_path.exists() else "auto-complete"
            try:
                config = read_config(folder.config_path)[0] if folder.config_path.exists() else new_config()
            except TritonError:
                config, config_state = new_config(), "unreadable"
            backend = config.platform or config.backend
            if not backend and folder.versions:
                files = {p.name for p in folder.version_path(folder.versions[-1]).iterdir()}
                backend = backends.backend_from_files(files) or ""
            served = (
                select_versions(config.version_policy, folder.versions)
                if config.HasField("version_policy")
                else folder.versions[-1:]
            )
            rows.append(
                {
                    "name": folder.name,
                    "versions": [str(v) for v in folder.versions],
                    "served": [str(v) for v in served],
                    "backend": backend,
                    "config": config_state,
                    "repository": str(repository),
                }
            )
    return rows
