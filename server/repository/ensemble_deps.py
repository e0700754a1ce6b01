"""What Triton's dependency graph refuses about an ensemble before and after its composing models
load, in Triton's words: a step naming a model in no repository, ensembles that depend on each other
in a circle (which would otherwise wait on each other's loads for ever), a step asking for a version
its model does not serve. Steps that do not fit the composing models are server/config/ensemble_steps.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from tritonclient.grpc.model_config_pb2 import ModelConfig


def missing_models(config: ModelConfig, known: Collection[str]) -> str | None:
    """Triton's refusal of steps naming models in no repository, or None."""
    missing = sorted({s.model_name for s in config.ensemble_scheduling.step if s.model_name not in known})
    if not missing:
        return None
    return f"ensemble {config.name} contains models that are not available or ambiguous: {', '.join(missing)}"


def circular_dependency(config: ModelConfig, steps_of: Callable[[str], list[str]]) -> str | None:
    """Triton's refusal of an ensemble that depends on itself through other ensembles, or None;
    `steps_of(name)` is the models a model's steps name ([] for a model that is no ensemble)."""
    start = config.name
    seen: set[str] = set()

    def walk(current: str, upstreams: list[str]) -> str | None:
        for upstream in upstreams:
            if upstream == start:
                return f"circular dependency between ensembles: {start} -> ... -> {current} -> {start}"
            if upstream in seen:
                continue
            seen.add(upstream)
            found = walk(upstream, steps_of(upstream))
            if found is not None:
                return found
        return None

    return walk(start, [s.model_name for s in config.ensemble_scheduling.step])


def version_error(config: ModelConfig, loaded: Mapping[str, Collection[int]]) -> str | None:
    """Triton's refusal of a step asking for a version its model has not loaded, or None."""
    for step in config.ensemble_scheduling.step:
        if step.model_version != -1 and step.model_version not in loaded.get(step.model_name, ()):
            return (
                f"ensemble '{config.name}' depends on '{step.model_name}' whose required version "
                f"{step.model_version} is not loaded."
            )
    return None
