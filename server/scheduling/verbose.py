"""What the verbose log (--log-verbose) says about models and requests, as Triton's verbose log tells
its users what the server does: at level 1 each instance as it is created and the scheduler the config
chose, with the settings that shape its batches; at level 2 each request as it arrives and each
execution (which instance runs which requests). The per-request lines go to a logger of their own,
"tcli.requests", whose level server/logs.py sets: the request path asks it `isEnabledFor(DEBUG)`
(a cached lookup) before building a line."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from server.backends.base import instance_specs
from server.config import backends
from server.config.validate import enum_name

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.protocol.types import InferenceRequest
    from server.scheduling.work import WorkItem

_LOG = logging.getLogger("tcli.scheduling")
_REQUESTS = logging.getLogger("tcli.requests")


def loaded(name: str, version: str, config: ModelConfig, instances: Sequence[object]) -> None:
    """Level 1: each instance as created (`instances`, in instance_group order), and the scheduler
    that feeds them."""
    if not _LOG.isEnabledFor(logging.DEBUG):
        return
    for spec in instance_specs(config)[: len(instances)]:
        _LOG.debug(
            "created instance '%s' of model '%s' version %s on %s device %d",
            spec.name,
            name,
            version,
            spec.kind.removeprefix("KIND_"),
            spec.device_id,
        )
    _LOG.debug("model '%s' version %s: %s", name, version, describe_scheduler(config))


def arrived(request: InferenceRequest, version: int) -> None:
    """Level 2: a line per inference request as its model is resolved."""
    if not _REQUESTS.isEnabledFor(logging.DEBUG):
        return
    _REQUESTS.debug(
        "infer request id '%s' for model '%s' version %d: inputs %s, outputs %s",
        request.id,
        request.model_name,
        version,
        ", ".join(f"{t.name} {t.datatype} {list(t.shape)}" for t in request.inputs) or "none",
        ", ".join(o.name for o in request.outputs) or "all",
    )


def executing(name: str, version: str, names: Sequence[str], index: int, batch: Sequence[WorkItem]) -> None:
    """Level 2: which instance (of `names`) runs which requests."""
    if not _REQUESTS.isEnabledFor(logging.DEBUG):
        return
    _REQUESTS.debug(
        "model '%s' version %s, instance '%s', executing %d request(s): %s",
        name,
        version,
        names[index] if index < len(names) else index,
        len(batch),
        ", ".join(repr(item.request.id) for item in batch),
    )


def describe_scheduler(config: ModelConfig) -> str:
    """'dynamic batching: max batch size 8, preferred [4, 8], max queue delay 100 µs', and so on."""
    batch = f"max batch size {config.max_batch_size}" if config.max_batch_size else "no batching"
    if config.platform == backends.ENSEMBLE:
        steps = ", ".join(step.model_name for step in config.ensemble_scheduling.step)
        return f"ensemble scheduler over {steps}"
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        strategy = sequence.WhichOneof("strategy_choice") or "direct"
        idle = sequence.max_sequence_idle_microseconds or 1_000_000
        return f"sequence batching ({strategy}): {batch}, max sequence idle {idle} µs"
    if config.HasField("dynamic_batching"):
        dynamic = config.dynamic_batching
        parts = [batch]
        if dynamic.preferred_batch_size:
            parts.append(f"preferred {list(dynamic.preferred_batch_size)}")
        parts.append(f"max queue delay {dynamic.max_queue_delay_microseconds} µs")
        if dynamic.priority_levels:
            parts.append(f"{dynamic.priority_levels} priority levels")
        if dynamic.preserve_ordering:
            parts.append("responses in request order")
        return "dynamic batching: " + ", ".join(parts)
    decoupled = ", decoupled" if config.model_transaction_policy.decoupled else ""
    kinds = sorted({enum_name(group, "kind").removeprefix("KIND_") for group in config.instance_group})
    on = f" on {'/'.join(kinds)}" if kinds else ""
    return f"default scheduler: {batch}, each request executed as it comes{decoupled}{on}"
