"""Which instances a model version keeps when a reload changes only its instance_group, as Triton's
model instance update decides: an instance of the new config takes over a running one whose group
is the same less its `name` and `count` (kind, gpus, rate limiter, profile, passive, host policy),
on the same device. The others are created (added) or drained and finalized (removed); the kept
ones go on serving without being initialized again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

    from server.backends.base import InstanceSpec


def _signature(group: ModelInstanceGroup, device_id: int) -> tuple[bytes, int]:
    normalized = type(group)()
    normalized.CopyFrom(group)
    normalized.ClearField("name")
    normalized.ClearField("count")
    return normalized.SerializeToString(deterministic=True), device_id


def matching_instances(
    old_config: ModelConfig,
    old_specs: Sequence[InstanceSpec],
    new_config: ModelConfig,
    new_specs: Sequence[InstanceSpec],
) -> dict[int, int]:
    """new instance index -> the old instance index it takes over (each old one at most once)."""
    free: dict[tuple[bytes, int], list[int]] = {}
    for index, spec in enumerate(old_specs):
        key = _signature(old_config.instance_group[spec.group], spec.device_id)
        free.setdefault(key, []).append(index)
    taken: dict[int, int] = {}
    for index, spec in enumerate(new_specs):
        candidates = free.get(_signature(new_config.instance_group[spec.group], spec.device_id))
        if candidates:
            taken[index] = candidates.pop(0)
    return taken


def only_instances_differ(old: ModelConfig, new: ModelConfig) -> bool:
    """The configs differ in their instance_group, and in nothing else but the version policy (what
    Triton updates in place instead of loading the model again)."""
    before, after = type(old)(), type(new)()
    before.CopyFrom(old)
    after.CopyFrom(new)
    for config in (before, after):
        config.ClearField("version_policy")
        config.ClearField("instance_group")
    return before == after and list(old.instance_group) != list(new.instance_group)
