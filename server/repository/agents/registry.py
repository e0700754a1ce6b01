"""Finding a repository agent by the name a config gives it.

Searched in this order: the agents tcli ships (checksum, dragonfly); the directories given with
--repoagent-directory, where agent NAME is NAME/agent.py (tritonserver's layout, a Python file where
Triton has a shared library); and installed packages that declare an entry point NAME in the group
`tcli.repository_agents`. An agent module defines a `RepositoryAgent` subclass (base.py) named
`TritonRepoAgent`, or the entry point names the class. One instance serves every model that lists it.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from server.protocol.errors import invalid_arg
from server.repository.agents.base import RepositoryAgent

ENTRY_POINT_GROUP = "tcli.repository_agents"
AGENT_FILE = "agent.py"
AGENT_CLASS = "TritonRepoAgent"
_BUILT_IN = ("checksum", "dragonfly")
_agents: dict[tuple[str, tuple[str, ...]], RepositoryAgent] = {}
_lock = threading.Lock()


def find_agent(name: str, directories: Sequence[Path] = ()) -> RepositoryAgent:
    """The agent called `name`; INVALID_ARG naming every place searched when there is none."""
    key = (name, tuple(str(d) for d in directories))
    with _lock:
        agent = _agents.get(key)
        if agent is None:
            agent = _agents[key] = _create(name, directories)
        return agent


def _create(name: str, directories: Sequence[Path]) -> RepositoryAgent:
    if name == "checksum":
        from server.repository.agents.checksum import ChecksumAgent

        return ChecksumAgent()
    if name == "dragonfly":
        from server.repository.agents.dragonfly import DragonflyAgent

        return DragonflyAgent()
    for directory in directories:
        path = directory / name / AGENT_FILE
        if path.is_file():
            return _from_file(name, path)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            return _instance(name, entry.load(), f"entry point '{entry.value}'")
    searched = [f"built-in agents ({', '.join(_BUILT_IN)})"]
    searched += [str(directory / name / AGENT_FILE) for directory in directories]
    searched.append(f"entry points in group '{ENTRY_POINT_GROUP}'")
    raise invalid_arg(f"unable to find repo agent '{name}', searched: {', '.join(searched)}")


def _from_file(name: str, path: Path) -> RepositoryAgent:
    spec = importlib.util.spec_from_file_location(f"tcli_repoagent_{name}", path)
    if spec is None or spec.loader is None:
        raise invalid_arg(f"repo agent '{name}': cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise invalid_arg(
            f"repo agent '{name}': {path} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, AGENT_CLASS):
        raise invalid_arg(f"repo agent '{name}': {path} defines no class {AGENT_CLASS}")
    return _instance(name, getattr(module, AGENT_CLASS), str(path))


def _instance(name: str, factory: object, where: str) -> RepositoryAgent:
    agent = factory() if callable(factory) else factory
    if not callable(getattr(agent, "model_action", None)):
        raise invalid_arg(f"repo agent '{name}' from {where} has no model_action(model, action) method")
    if not getattr(agent, "name", ""):
        agent.name = name  # type: ignore[union-attr]
    return agent  # type: ignore[return-value]
