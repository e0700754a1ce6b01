"""What the metrics front end reads, through the service (`InferenceService.metrics`): one snapshot,
taken at scrape time, of every loaded model version (its statistics, queue, batching and response
cache settings), of the readiness of every version the repository lists, and of the whole response
cache. The front end turns it into Triton's metric families (server/frontends/metrics.py) and never
reads the repository itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.repository.models import ModelState
from server.scheduling.stats import ModelStats

if TYPE_CHECKING:
    from server.repository.manager import ModelManager
    from server.scheduling.latency_summary import LatencySummaries
    from server.scheduling.response_cache import CacheSummary

_UNLOADED = "unloaded"  # the repository's reason for a version unloaded on purpose (not a failure)


@dataclass(frozen=True)
class VersionSnapshot:
    """What one scrape reads about one loaded model version."""

    model: str
    version: str
    stats: dict[str, Any]  # ModelStats.as_dict(), taken under the statistics lock
    failures: dict[str, int]  # reason -> count, as the statistics keep them
    pending: int  # requests queued, not yet executing
    max_batch_size: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()  # the dynamic batcher's, when the model has one
    response_cache: bool = False  # the model's config enables the response cache
    summaries: LatencySummaries | None = None  # --metrics-config summary_latencies=true

    @property
    def labels(self) -> list[str]:
        return [self.model, self.version]


@dataclass(frozen=True)
class MetricsSnapshot:
    versions: list[VersionSnapshot]  # sorted by model name, then version
    # (model, version, READY) of every version the repository lists, but those unloaded on purpose
    readiness: list[tuple[str, str, bool]]
    cache: CacheSummary | None  # the server's response cache, when it has one


def metrics_snapshot(manager: ModelManager) -> MetricsSnapshot:
    """Everything /metrics reads about `manager`'s models right now (from memory, not from storage)."""
    versions: list[VersionSnapshot] = []
    readiness: list[tuple[str, str, bool]] = []
    for name, model in sorted(list(manager.models().items())):
        config = model.config
        preferred: tuple[int, ...] = ()
        if config is not None and config.WhichOneof("scheduling_choice") == "dynamic_batching":
            preferred = tuple(config.dynamic_batching.preferred_batch_size)
        for version, entry in sorted(list(model.versions.items())):
            if entry.reason != _UNLOADED:
                readiness.append((name, str(version), entry.state == ModelState.READY))
            if entry.runner is None and entry.state != ModelState.READY:
                continue  # not loaded: Triton has no series for it either
            stats = manager.stats.by_version.get((name, version)) or ModelStats(name, str(version))
            pending = entry.runner.scheduler.pending() if entry.runner is not None else 0
            versions.append(
                VersionSnapshot(
                    model=name,
                    version=str(version),
                    stats=stats.as_dict(),
                    failures=dict(stats.failures),
                    pending=int(pending),
                    max_batch_size=config.max_batch_size if config is not None else 0,
                    preferred_batch_sizes=preferred,
                    response_cache=config is not None and config.response_cache.enable,
                    summaries=stats.summaries,
                )
            )
    cache = manager.response_cache
    return MetricsSnapshot(versions, readiness, cache.summary() if cache is not None else None)
