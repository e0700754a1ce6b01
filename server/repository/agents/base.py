"""What a repository agent is given and what it implements, after Triton's repository agent API.

An agent is told of each action on a model that lists it in `model_repository_agents`: LOAD before the
model loads (agents in their listed order), then LOAD_COMPLETE or LOAD_FAIL (reverse order), and
UNLOAD then UNLOAD_COMPLETE when it goes. On LOAD it may check the model's files and refuse the load
by raising TritonError (its message becomes the model's reason), or give the model a new location: a
folder it writes into (`acquire_mutable_location`, removed by tcli when the model is unloaded) handed
over with `update_location`. The next agent, and then the loader, use the newest location.

A model in object storage is handed to its first agent as REMOTE_FILESYSTEM with its s3:// (gs://,
as://) location, so an agent can fetch it another way (dragonfly); an agent that reads only local
files (`accepts` without REMOTE_FILESYSTEM, e.g. checksum) is handed the downloaded copy instead.
"""

from __future__ import annotations

import enum
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.protocol.errors import invalid_arg

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig


class ArtifactType(enum.Enum):
    FILESYSTEM = "FILESYSTEM"  # a local folder
    REMOTE_FILESYSTEM = "REMOTE_FILESYSTEM"  # a path in object storage, in repository syntax


class Action(enum.Enum):
    LOAD = "LOAD"
    LOAD_COMPLETE = "LOAD_COMPLETE"
    LOAD_FAIL = "LOAD_FAIL"
    UNLOAD = "UNLOAD"
    UNLOAD_COMPLETE = "UNLOAD_COMPLETE"


@dataclass
class AgentModel:
    """One model as one agent sees it (Triton's TRITONREPOAGENT_AgentModel)."""

    name: str
    artifact_type: ArtifactType
    location: str  # a local folder, or the model folder's s3:// gs:// as:// path
    config: ModelConfig | None  # the config at `location`, None when it has none
    parameters: dict[str, str]  # the agent's `parameters` in model_repository_agents
    state: dict[str, Any] = field(default_factory=dict)  # the agent's own, kept between actions
    _acquired: list[Path] = field(default_factory=list)
    _updated: tuple[ArtifactType, str] | None = None

    def acquire_mutable_location(self) -> Path:
        """A new empty local folder the agent may fill; tcli removes it when the model unloads."""
        folder = Path(tempfile.mkdtemp(prefix=f"tcli-agent-{self.name}-"))
        self._acquired.append(folder)
        return folder

    def update_location(self, artifact_type: ArtifactType, location: str | Path) -> None:
        """Load the model from `location` from now on (where the agent put a changed copy)."""
        if artifact_type != ArtifactType.FILESYSTEM:
            raise invalid_arg(
                f"repo agent for model '{self.name}' can only update the location to a local folder"
            )
        self._updated = (artifact_type, str(location))

    def release(self) -> None:
        for folder in self._acquired:
            shutil.rmtree(folder, ignore_errors=True)
        self._acquired.clear()


class RepositoryAgent:
    """Subclass this and override `model_action`; raise TritonError to fail the action."""

    name = ""
    accepts = frozenset({ArtifactType.FILESYSTEM, ArtifactType.REMOTE_FILESYSTEM})

    def model_action(self, model: AgentModel, action: Action) -> None:
        raise NotImplementedError
