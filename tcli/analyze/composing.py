"""Which models a model calls, so that an ensemble or a BLS model is analyzed through its composing
models, one by one: an ensemble's steps are in its config; a python model that builds
`pb_utils.InferenceRequest`s (BLS) names the models it calls as string literals in its model.py,
read here with `ast` (never imported) and kept when they name a model of the repository."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


def ensemble_steps(config: ModelConfig) -> list[str]:
    names: list[str] = []
    for step in config.ensemble_scheduling.step:
        if step.model_name not in names:
            names.append(step.model_name)
    return names


def _model_files(folder: Path) -> list[Path]:
    versions = sorted(
        (entry for entry in folder.iterdir() if entry.is_dir() and entry.name.isdigit()),
        key=lambda entry: int(entry.name),
    )
    return [version / "model.py" for version in versions[-1:] if (version / "model.py").is_file()]


def bls_targets(folder: Path, repository: Path) -> list[str]:
    """The repository's models a python model's latest model.py names, when it makes BLS requests."""
    names: list[str] = []
    for path in _model_files(folder):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        calls = any(
            (isinstance(node, ast.Attribute) and node.attr == "InferenceRequest")
            or (isinstance(node, ast.Name) and node.id == "InferenceRequest")
            for node in ast.walk(tree)
        )
        if not calls:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if text and text != folder.name and text not in names and (repository / text).is_dir():
                    names.append(text)
    return names


def composing_models(
    config: ModelConfig, backend: str, folder: Path | None, repository: Path | None
) -> list[str]:
    """The models to analyze in place of this one (empty: analyze the model itself)."""
    if backend == "ensemble" or config.platform == "ensemble":
        return ensemble_steps(config)
    if backend == "python" and folder is not None and repository is not None and folder.is_dir():
        return bls_targets(folder, repository)
    return []
