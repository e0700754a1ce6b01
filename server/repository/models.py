"""The serving state of one model: its completed config, the versions with their state and runner,
labels for classification, and statistics that outlive reloads."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from server.scheduling.latency_summary import LatencySummaries, Quantiles
from server.scheduling.stats import ModelStats

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.repository.agents.chain import AgentChain
    from server.scheduling.ensemble import EnsembleSchedule
    from server.scheduling.request_checks import RequestRules
    from server.scheduling.runner import ModelRunner


class ModelState(enum.StrEnum):
    UNKNOWN = "UNKNOWN"
    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass
class VersionEntry:
    version: int
    state: ModelState
    reason: str = ""
    runner: ModelRunner | None = None
    ensemble: EnsembleSchedule | None = None  # ensembles run their steps instead of a runner


@dataclass
class ServedModel:
    """One model name and everything served under it. Replaced whole on reload, so a request holding
    the old object finishes on the old runners while new requests see the new one."""

    name: str
    path: Path | None
    config: ModelConfig | None = None
    rules: RequestRules | None = None
    labels: dict[str, list[str]] = field(default_factory=dict)
    versions: dict[int, VersionEntry] = field(default_factory=dict)
    fingerprint: tuple[object, ...] = ()
    # the fingerprint of the files it was built from when every version loaded (None otherwise): an
    # explicit load finding the files unchanged keeps the model as it is, as Triton does (also one
    # loaded with a config override, until its files change)
    built_from: tuple[object, ...] | None = None
    agents: AgentChain | None = None  # its repository agents, told when it unloads
    # why the last reload was refused while this model kept serving (its index rows say so), until
    # a reload succeeds and replaces it
    refused_reload: str = ""

    def ready_versions(self) -> list[int]:
        return sorted(v for v, e in self.versions.items() if e.state == ModelState.READY)

    def runners(self) -> list[ModelRunner]:
        return [e.runner for e in self.versions.values() if e.runner is not None]


@dataclass
class StatsBook:
    """Statistics per (model, version), kept across reloads as Triton keeps them."""

    by_version: dict[tuple[str, int], ModelStats] = field(default_factory=dict)
    # --metrics-config summary_latencies=true: the quantiles each version's latency summaries report
    summary_quantiles: Quantiles | None = None

    def get(self, name: str, version: int) -> ModelStats:
        key = (name, version)
        stats = self.by_version.get(key)
        if stats is None:
            stats = self.by_version[key] = ModelStats(name, str(version))
            if self.summary_quantiles is not None:
                stats.summaries = LatencySummaries(self.summary_quantiles)
        return stats
