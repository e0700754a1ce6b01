"""What an MLflow model URI names: a registered version or alias, a logged model, a run's artifact, or
a local folder; and the Triton model name and version folder it suggests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["registry", "logged", "run", "path"]


@dataclass(frozen=True)
class ModelUri:
    text: str
    kind: Kind
    default_name: str  # a valid Triton model (folder) name
    registered_name: str | None = None
    version: int | None = None  # the registry version when the URI gives one
    alias: str | None = None
    logged_model_id: str | None = None

    @property
    def needs_tracking_server(self) -> bool:
        return self.kind != "path"


def triton_name(text: str) -> str:
    """A folder-safe model or tensor name: MLflow allows spaces and punctuation that Triton users
    would have to quote everywhere."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.") or "model"


def parse_model_uri(text: str) -> ModelUri:
    if text.startswith("models:/"):
        parts = [p for p in text[len("models:/") :].split("/") if p]
        if not parts:
            raise ValueError(f"'{text}' names no model: use models:/NAME/VERSION or models:/NAME@ALIAS")
        first = parts[0]
        if "@" in first:
            name, alias = first.split("@", 1)
            return ModelUri(text, "registry", triton_name(name), name, alias=alias)
        if len(parts) == 1:  # MLflow 3: models:/m-<id> is a logged model, registered or not
            return ModelUri(text, "logged", triton_name(first), logged_model_id=first)
        version = int(parts[1]) if parts[1].isdigit() else None  # else a stage, or "latest"
        return ModelUri(text, "registry", triton_name(first), first, version=version)
    if text.startswith("runs:/"):
        parts = [p for p in text[len("runs:/") :].split("/") if p]
        if not parts:
            raise ValueError(f"'{text}' names no run: use runs:/RUN_ID/ARTIFACT_PATH")
        return ModelUri(text, "run", triton_name(parts[-1]))
    path = text.removeprefix("file://").rstrip("/")
    return ModelUri(text, "path", triton_name(path.rsplit("/", 1)[-1]))
