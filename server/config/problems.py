"""What validation finds: one Problem per finding, collected per model and per repository."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

Severity = Literal["error", "warning"]

# Triton checks a model in stages and reports the first problem it meets: the config's own rules
# (as the repository is polled), then that the folder is named as the model, then, loading a
# version, the version folders and the backend library, the instance groups, and the model file
STAGE_CONFIG = 0
STAGE_NAME = 1
STAGE_LOAD = 2
STAGE_INSTANCES = 3
STAGE_MODEL_FILE = 4


@dataclass(frozen=True)
class Problem:
    severity: Severity
    message: str  # worded as Triton words it where Triton has a message
    fix: str | None = None  # what to change, in plain words
    file: Path | str | None = None  # a str for a file in object storage (s3://...)
    line: int | None = None
    column: int | None = None
    # False for mistakes real Triton still loads (a label file of the wrong length, duplicate tensor
    # names): `tcli repo validate` fails on them, `tcli serve` loads the model as Triton would.
    blocks_load: bool = True
    # when Triton finds it (STAGE_*): a load reports the earliest stage's problem first
    stage: int = 0

    def one_line(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message

    def as_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "file": str(self.file) if self.file else None,
            "line": self.line,
            "column": self.column,
        }


@dataclass
class ModelReport:
    name: str
    path: Path | str
    versions: tuple[int, ...] = ()
    backend: str = ""
    problems: list[Problem] = field(default_factory=list)
    config: ModelConfig | None = None  # the completed config, when completion succeeded

    @property
    def status(self) -> Literal["error", "warning", "ok"]:
        if any(p.severity == "error" for p in self.problems):
            return "error"
        return "warning" if self.problems else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "versions": [str(v) for v in self.versions],
            "backend": self.backend,
            "status": self.status,
            "problems": [p.as_dict() for p in self.problems],
        }


@dataclass
class RepositoryReport:
    repositories: list[Path | str]
    models: list[ModelReport] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # not tied to one model

    def all_problems(self) -> list[Problem]:
        return self.problems + [p for m in self.models for p in m.problems]

    def has_errors(self, *, strict: bool = False) -> bool:
        return any(p.severity == "error" or strict for p in self.all_problems())

    def as_dict(self) -> dict[str, Any]:
        return {
            "repositories": [str(r) for r in self.repositories],
            "valid": not self.has_errors(),
            "models": [m.as_dict() for m in self.models],
            "problems": [p.as_dict() for p in self.problems],
        }
