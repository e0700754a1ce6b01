"""One model's repository agents from load to unload, in Triton's order: LOAD and UNLOAD go through the
agents as the config lists them, LOAD_COMPLETE, LOAD_FAIL and UNLOAD_COMPLETE in reverse."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from server.protocol.errors import TritonError
from server.repository.agents.base import Action, AgentModel, ArtifactType, RepositoryAgent
from server.repository.agents.registry import find_agent

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

log = logging.getLogger("tcli.server")


class AgentChain:
    """The agents a loaded model went through, each with the model as it saw it."""

    def __init__(self) -> None:
        self._steps: list[tuple[RepositoryAgent, AgentModel]] = []

    def __bool__(self) -> bool:
        return bool(self._steps)

    @classmethod
    def load(
        cls,
        config: ModelConfig,
        local: Path | None,
        remote: str | None,
        localize: Callable[[], Path],
        directories: Sequence[Path] = (),
    ) -> tuple[AgentChain, Path]:
        """Run LOAD through the agents `config` lists; the chain and the folder to load the model from.

        The first agent sees the model in object storage (`remote`) when it is there and the agent takes
        remote locations, else its local folder (`local`, or what `localize()` downloads). An agent that
        fails makes the agents before it see LOAD_FAIL, and its error is raised."""
        chain = cls()
        artifact, location = (
            (ArtifactType.REMOTE_FILESYSTEM, remote) if remote else (ArtifactType.FILESYSTEM, str(local))
        )
        current_config: ModelConfig | None = config
        try:
            for agent_config in config.model_repository_agents.agents:
                agent = find_agent(agent_config.name, directories)
                if artifact == ArtifactType.REMOTE_FILESYSTEM and artifact not in agent.accepts:
                    artifact, location = ArtifactType.FILESYSTEM, str(localize())
                model = AgentModel(
                    config.name, artifact, str(location), current_config, dict(agent_config.parameters)
                )
                try:
                    agent.model_action(model, Action.LOAD)
                except BaseException:
                    model.release()
                    raise
                chain._steps.append((agent, model))
                if model._updated is not None:
                    artifact, location = model._updated
                    current_config = _read_config(Path(location))
        except TritonError:
            chain.finish(loaded=False)
            raise
        except Exception as exc:  # an agent's own bug fails the load like its errors do
            chain.finish(loaded=False)
            raise _agent_bug(exc) from None
        if artifact == ArtifactType.REMOTE_FILESYSTEM:
            location = str(localize())
        return chain, Path(str(location))

    def finish(self, loaded: bool) -> None:
        """LOAD_COMPLETE (or LOAD_FAIL, which also frees what the agents acquired), in reverse order."""
        action = Action.LOAD_COMPLETE if loaded else Action.LOAD_FAIL
        self._invoke(reversed(self._steps), action)
        if not loaded:
            self._release()

    def unload(self) -> None:
        """UNLOAD in order, then UNLOAD_COMPLETE in reverse; the agents' folders are removed."""
        self._invoke(self._steps, Action.UNLOAD)
        self._invoke(reversed(self._steps), Action.UNLOAD_COMPLETE)
        self._release()

    def _invoke(self, steps: object, action: Action) -> None:
        for agent, model in steps:  # type: ignore[attr-defined]
            try:
                agent.model_action(model, action)
            except Exception as exc:  # past LOAD an agent cannot change the outcome: say it, go on
                log.error(
                    "repo agent '%s' failed %s of model '%s': %s", agent.name, action.value, model.name, exc
                )

    def _release(self) -> None:
        for _, model in self._steps:
            with contextlib.suppress(Exception):
                model.release()
        self._steps.clear()


def _read_config(folder: Path) -> ModelConfig | None:
    from server.config.parse import read_config

    try:
        return read_config(folder / "config.pbtxt")[0]
    except Exception:  # a location without a readable config: the next agent sees none, as in Triton
        return None


def _agent_bug(exc: Exception) -> TritonError:
    from server.protocol.errors import internal

    return internal(f"repo agent failed: {type(exc).__name__}: {exc}")
