"""The response cache's Prometheus families, as Triton 2.51 writes them (names, HELP texts, labels, place).

Per model version, for each model whose config enables the cache (with or without a cache on the
server, as Triton), right after nv_inference_compute_output_duration_us:

    nv_cache_num_hits_per_model        counter  requests answered from the cache
    nv_cache_hit_duration_per_model    counter  their lookup time, in microseconds
    nv_cache_num_misses_per_model      counter  requests the cache did not hold
    nv_cache_miss_duration_per_model   counter  their lookup and insert time, in microseconds

For the whole cache, only when the server has one (--cache-config), after the host CPU and memory
gauges: nv_cache_util, nv_cache_num_entries, nv_cache_num_hits, nv_cache_num_misses,
nv_cache_num_lookups, nv_cache_num_evictions, nv_cache_lookup_duration, nv_cache_insertion_duration.
Triton 2.51 writes these too but leaves all of them but nv_cache_util at 0 (its cache libraries do not
report them); tcli fills them in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from server.scheduling.response_cache import CacheSummary

# (family name, HELP text, statistic, what of it: count or microseconds)
_PER_MODEL = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", "cache_hit", "count"),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        "cache_hit",
        "us",
    ),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", "cache_miss", "count"),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
        "cache_miss",
        "us",
    ),
)

_US = 1000
_WHOLE_CACHE: tuple[tuple[str, str, Callable[[CacheSummary], float]], ...] = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]", lambda c: c.used / c.size if c.size else 0.0),
    ("nv_cache_num_entries", "Number of responses stored in response cache", lambda c: c.entries),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda c: c.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda c: c.misses),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda c: c.hits + c.misses),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache", lambda c: c.evictions),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        lambda c: c.lookup_ns // _US,
    ),
    (
        "nv_cache_insertion_duration",
        "Total cache insertion duration, in microseconds",
        lambda c: c.insert_ns // _US,
    ),
)


def per_model_families(
    rows: list[tuple[dict[str, str], dict[str, Any]]], counter: Callable[[str, str], Metric]
) -> Iterator[Metric]:
    """`rows`: (labels, statistics as ModelStats.as_dict()) of the versions of cache-enabled models;
    `counter` makes a counter family whose samples carry its own name, as Triton's do."""
    if not rows:
        return
    for name, documentation, statistic, what in _PER_MODEL:
        family = counter(name, documentation)
        for labels, stats in rows:
            duration = stats["inference_stats"][statistic]
            family.add_sample(name, labels, duration["count"] if what == "count" else duration["ns"] // _US)
        yield family


def whole_cache_families(summary: CacheSummary | None) -> Iterator[Metric]:
    """The server-wide gauges; none without a cache."""
    from prometheus_client.core import GaugeMetricFamily

    if summary is None:
        return
    for name, documentation, read in _WHOLE_CACHE:
        yield GaugeMetricFamily(name, documentation, value=read(summary))
