"""The Prometheus endpoint: Triton's metric families, names, HELP texts and labels, so that dashboards
and alerts written for Triton read tcli unchanged.

Everything is read at scrape time, through the service (`InferenceService.metrics`,
server/metrics_snapshot.py), from the per model-version statistics (`server/scheduling/stats.py`) that the
statistics API also serves; nothing on the request path touches a metric. A custom prometheus_client
collector turns one snapshot of those statistics into metric families; prometheus_client's text
exposition (format 0.0.4) writes them.

Families, in Triton 2.51's order (per loaded model version, labels `model` and `version`; the failure
counter also has `reason` = REJECTED | CANCELED | BACKEND | OTHER, all four always present):

    nv_inference_request_success            counter  successful requests (a batch-8 request counts 1)
    nv_inference_request_failure            counter  failed requests, by reason
    nv_inference_count                      counter  inferences (rows; a batch-8 request counts 8)
    nv_inference_exec_count                 counter  model executions (a merged batch counts 1)
    nv_inference_request_duration_us        counter  cumulative end-to-end time of successful requests
    nv_inference_queue_duration_us          counter  cumulative queueing time
    nv_inference_compute_input_duration_us  counter  cumulative input preparation time
    nv_inference_compute_infer_duration_us  counter  cumulative model execution time
    nv_inference_compute_output_duration_us counter  cumulative output preparation time
    nv_cache_*_per_model                    counter  response cache hits and misses (cache_metrics.py)
    nv_inference_pending_request_count      gauge    requests queued, not yet executing
    nv_cpu_utilization                      gauge    host CPU busy ratio [0.0 - 1.0]
    nv_cpu_memory_total_bytes               gauge    host RAM
    nv_cpu_memory_used_bytes                gauge    host RAM in use (total - available, as Triton)
    nv_cache_util, nv_cache_num_*, ...      gauge    the whole response cache, when the server has one

With `--metrics-config counter_latencies=false` the five *_duration_us counters are left out; with
`summary_latencies=true` Triton's five *_summary_us summaries follow the host gauges
(`server/frontends/latency_metrics.py`).

tcli's additions, also per model version:

    tcli_inference_batch_size               histogram  rows per model execution (Triton's batch_stats
                                                       as a histogram; buckets: powers of two up to the
                                                       model's max_batch_size, its preferred batch sizes,
                                                       max_batch_size itself, +Inf)
    tcli_model_ready                        gauge      1 while the version is READY, else 0 (loading,
                                                       failed); every version the repository index
                                                       lists, except those unloaded on purpose

"Is dynamic batching working?" in one PromQL query, the average batch a model executes:

    sum by (model) (rate(tcli_inference_batch_size_sum[5m]))
      / sum by (model) (rate(tcli_inference_batch_size_count[5m]))

It stays at the batch size clients send (1 for perf_analyzer's default) when requests are executed one
by one, and rises towards the preferred/max batch size when the dynamic batcher merges them. For the
shape of the distribution (a Grafana heatmap, or the median):
`histogram_quantile(0.5, sum by (model, le) (rate(tcli_inference_batch_size_bucket[5m])))`.

Triton 2.51 has no model-state family (its state is only in the repository index API), so an alert on
a model that failed to load needs tcli's: `max by (model) (tcli_model_ready) == 0`. Versions unloaded
on purpose (an explicit unload, a newer version taking over) are left out, as strict readiness leaves
them out, so that unloading a model does not page anyone.

As in Triton: a model version's series (tcli_model_ready's aside) exist while it is loaded and go
away when it is unloaded; families with no series are not written; the process's CPU and memory
series are always written.
Unlike Triton, counters keep counting across a reload (the statistics outlive it), which Prometheus'
rate() treats the same as Triton's reset-free case. Triton's pinned-memory pool gauges are not
written: tcli has no pinned memory pool.

One detail of the exposition: Triton's counters do not end in `_total`, and prometheus_client writes
a counter family's HELP/TYPE lines under `<name>_total`. The two header lines of those families are
renamed after rendering so that they name the samples they describe; sample lines, label escaping and
number formatting are prometheus_client's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import psutil

from server.frontends.cache_metrics import per_model_families, whole_cache_families
from server.frontends.custom_metrics import CustomFamilies, custom_families
from server.frontends.http.asgi_io import Receive, Scope, Send, lifespan
from server.frontends.latency_metrics import summary_families
from server.scheduling.latency_summary import MetricsConfig

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from server.metrics_snapshot import VersionSnapshot
    from server.service import InferenceService

# prometheus_client is imported at the first scrape, not at start-up: its package imports its whole
# exposition stack (http.server, wsgiref, ...), ~35 ms with the GIL held while models load.

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
DEFAULT_METRICS_INTERVAL_MS = 2000  # tritonserver --metrics-interval-ms

# (family name, HELP text) as Triton 2.51 writes them; the durations also name the statistic they read
_SUCCESS = (
    "nv_inference_request_success",
    "Number of successful inference requests, all batch sizes",
)
_FAILURE = (
    "nv_inference_request_failure",
    "Number of failed inference requests, all batch sizes",
)
_COUNT = (
    "nv_inference_count",
    "Number of inferences performed (does not include cached requests)",
)
_EXEC_COUNT = (
    "nv_inference_exec_count",
    "Number of model executions performed (does not include cached requests)",
)
_DURATIONS = (
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        "success",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        "compute_output",
    ),
)
_PENDING = (
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
)
_CPU_UTILIZATION = ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]")
_CPU_MEMORY_TOTAL = ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes")
_CPU_MEMORY_USED = ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes")
_BATCH_SIZE = (
    "tcli_inference_batch_size",
    "Number of rows (batch size) per model execution; a dynamic batcher merging requests raises it",
)
_READY = (
    "tcli_model_ready",
    "Whether the model version is ready (1) or not (0: loading, failed to load); tcli's own, not Triton's",
)


# ------------------------------------------------------------------------------------------ host CPU
class CpuSampler:
    """Host CPU utilisation as Triton computes it: busy jiffies (user, nice, system, irq, softirq,
    steal) over busy + idle (idle, iowait) between two readings. Triton refreshes it every
    metrics-interval/2 from a polling thread; here it is refreshed at scrape time, at most once per
    `window_s`, over the time since the previous refresh, so concurrent scrapers do not shrink each
    other's window to nothing."""

    _BUSY = ("user", "nice", "system", "irq", "softirq", "steal")
    _IDLE = ("idle", "iowait")

    def __init__(
        self,
        window_s: float = DEFAULT_METRICS_INTERVAL_MS / 2000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last = self._read()
        self._last_at = clock()
        self._value = 0.0

    @classmethod
    def _read(cls) -> tuple[float, float]:
        times = psutil.cpu_times()
        busy = sum(getattr(times, name, 0.0) for name in cls._BUSY)
        idle = sum(getattr(times, name, 0.0) for name in cls._IDLE)
        return busy, idle

    def utilization(self) -> float:
        with self._lock:
            now = self._clock()
            if now - self._last_at >= self.window_s:
                current = self._read()
                self._value = busy_ratio(self._last, current)
                self._last, self._last_at = current, now
            return self._value


def busy_ratio(old: tuple[float, float], new: tuple[float, float]) -> float:
    """Busy share of the CPU time between two (busy, idle) readings; 0 when no time passed."""
    busy = max(new[0] - old[0], 0.0)
    idle = max(new[1] - old[1], 0.0)
    return busy / (busy + idle) if busy + idle > 0 else 0.0


def memory_bytes() -> tuple[int, int]:
    """(total, used) host RAM; used = total - available, Triton's definition."""
    memory = psutil.virtual_memory()
    return int(memory.total), int(memory.total - memory.available)


# ------------------------------------------------------------------------------------------ families
def batch_buckets(max_batch_size: int, preferred: Iterable[int] = ()) -> tuple[int, ...]:
    """Finite bucket bounds for the batch-size histogram: 1, 2, 4, ... below max_batch_size, the
    preferred batch sizes, and max_batch_size itself (just 1 for a model without batching)."""
    if max_batch_size <= 0:
        return (1,)
    bounds = {max_batch_size}
    bound = 1
    while bound < max_batch_size:
        bounds.add(bound)
        bound *= 2
    bounds.update(p for p in preferred if 0 < p <= max_batch_size)
    return tuple(sorted(bounds))


def _failures_by_reason(failures: dict[str, int]) -> dict[str, int]:
    """Triton's four reasons, each present; anything else is counted as OTHER (Triton's default)."""
    counts = dict.fromkeys(FAILURE_REASONS, 0)
    for reason, count in failures.items():
        counts[reason if reason in counts else "OTHER"] += count
    return counts


def _counter(name: str, documentation: str) -> Metric:
    """A counter family whose samples carry the family name itself, as Triton's do (no `_total`)."""
    from prometheus_client.core import Metric

    return Metric(name, documentation, "counter")


def _us(duration: dict[str, int]) -> int:
    return duration["ns"] // 1000


def model_families(versions: list[VersionSnapshot], counter_latencies: bool = True) -> Iterator[Metric]:
    """Triton's per-model families, in Triton's order; without loaded versions there are none (Triton
    leaves out families without series); the duration counters only with `counter_latencies`."""
    from prometheus_client.core import GaugeMetricFamily

    if not versions:
        return
    success = _counter(*_SUCCESS)
    failure = _counter(*_FAILURE)
    count = _counter(*_COUNT)
    exec_count = _counter(*_EXEC_COUNT)
    for row in versions:
        key = {"model": row.model, "version": row.version}
        success.add_sample(_SUCCESS[0], key, row.stats["inference_stats"]["success"]["count"])
        failures = _failures_by_reason(row.failures)
        for reason in FAILURE_REASONS:
            failure.add_sample(_FAILURE[0], {**key, "reason": reason}, failures[reason])
        count.add_sample(_COUNT[0], key, row.stats["inference_count"])
        exec_count.add_sample(_EXEC_COUNT[0], key, row.stats["execution_count"])
    yield from (success, failure, count, exec_count)

    for name, documentation, field in _DURATIONS if counter_latencies else ():
        family = _counter(name, documentation)
        for row in versions:
            key = {"model": row.model, "version": row.version}
            family.add_sample(name, key, _us(row.stats["inference_stats"][field]))
        yield family
    cached = [({"model": r.model, "version": r.version}, r.stats) for r in versions if r.response_cache]
    yield from per_model_families(cached, _counter)

    pending = GaugeMetricFamily(*_PENDING, labels=("model", "version"))
    for row in versions:
        pending.add_metric(row.labels, row.pending)
    yield pending


def batch_size_families(versions: list[VersionSnapshot]) -> Iterator[Metric]:
    """tcli_inference_batch_size: Triton's batch_stats (executions per batch size) as a histogram."""
    from prometheus_client.core import HistogramMetricFamily

    if not versions:
        return
    histogram = HistogramMetricFamily(*_BATCH_SIZE, labels=("model", "version"))
    for row in versions:
        executions = {
            entry["batch_size"]: entry["compute_infer"]["count"] for entry in row.stats["batch_stats"]
        }
        buckets: list[tuple[str, float]] = [
            (str(bound), sum(n for size, n in executions.items() if size <= bound))
            for bound in batch_buckets(row.max_batch_size, row.preferred_batch_sizes)
        ]
        buckets.append(("+Inf", sum(executions.values())))
        rows_executed = sum(size * n for size, n in executions.items())
        histogram.add_metric(row.labels, buckets, rows_executed)
    yield histogram


def ready_families(readiness: list[tuple[str, str, bool]]) -> Iterator[Metric]:
    """tcli_model_ready per version of the repository index: (model, version, ready) rows."""
    from prometheus_client.core import GaugeMetricFamily

    ready = GaugeMetricFamily(*_READY, labels=("model", "version"))
    for model, version, is_ready in readiness:
        ready.add_metric([model, version], 1 if is_ready else 0)
    if ready.samples:
        yield ready


def host_families(cpu: CpuSampler) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    total, used = memory_bytes()
    yield GaugeMetricFamily(*_CPU_UTILIZATION, value=cpu.utilization())
    yield GaugeMetricFamily(*_CPU_MEMORY_TOTAL, value=total)
    yield GaugeMetricFamily(*_CPU_MEMORY_USED, value=used)


class TritonCollector:
    """A prometheus_client collector over the service's metrics snapshot (a CollectorRegistry takes
    any object with collect()): Triton's per-model families, the host CPU and memory gauges (Triton's
    order), then tcli's own families."""

    def __init__(
        self,
        service: InferenceService,
        cpu: CpuSampler | None = None,
        cpu_metrics: bool = True,
        custom: CustomFamilies | None = None,
        config: MetricsConfig | None = None,
    ) -> None:
        self.config = config or MetricsConfig()  # --metrics-config
        self.service = service
        self.cpu = cpu or CpuSampler()
        self.cpu_metrics = cpu_metrics  # --allow-cpu-metrics
        self.custom = custom  # python models' own families (server/frontends/custom_metrics.py)

    def collect(self) -> Iterable[Metric]:
        snapshot = self.service.metrics()
        versions = snapshot.versions
        return [
            *model_families(versions, self.config.counter_latencies),
            *(host_families(self.cpu) if self.cpu_metrics else ()),
            *whole_cache_families(snapshot.cache),
            *summary_families([(row.model, row.version, row.summaries) for row in versions]),
            *batch_size_families(versions),
            *ready_families(snapshot.readiness),
            *(custom_families(self.custom()) if self.custom is not None else ()),
        ]


class _Collected:
    """Families collected once, handed to generate_latest (which calls collect())."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(families: Iterable[Metric]) -> bytes:
    """Text exposition 0.0.4 of `families`, with counters' HELP/TYPE lines naming their samples."""
    from prometheus_client import generate_latest

    families = list(families)
    text = generate_latest(_Collected(families))  # any object with collect() will do
    for family in families:
        if family.type != "counter" or any(s.name != family.name for s in family.samples):
            continue
        # prometheus_client names a counter's header `<name>_total`; Triton's samples are `<name>`
        name = family.name.encode()
        text = text.replace(b"# HELP " + name + b"_total ", b"# HELP " + name + b" ", 1)
        text = text.replace(b"# TYPE " + name + b"_total counter\n", b"# TYPE " + name + b" counter\n", 1)
    return text


_default_cpu: CpuSampler | None = None
_default_cpu_lock = threading.Lock()


def _shared_cpu() -> CpuSampler:
    global _default_cpu
    with _default_cpu_lock:
        if _default_cpu is None:
            _default_cpu = CpuSampler()
        return _default_cpu


def metrics_text(
    service: InferenceService,
    cpu: CpuSampler | None = None,
    cpu_metrics: bool = True,
    custom: CustomFamilies | None = None,
    config: MetricsConfig | None = None,
) -> bytes:
    """The /metrics body for `service`'s models right now. Without `cpu`, CPU utilisation is measured with a
    process-wide sampler (since its first use); the metrics app keeps its own, started with it."""
    return render(TritonCollector(service, cpu or _shared_cpu(), cpu_metrics, custom, config).collect())


# ------------------------------------------------------------------------------------------ ASGI app
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # prometheus_client's CONTENT_TYPE_PLAIN_0_0_4


def create_metrics_app(
    service: InferenceService,
    metrics_interval_ms: float = DEFAULT_METRICS_INTERVAL_MS,
    *,
    cpu_metrics: bool = True,
    custom: CustomFamilies | None = None,
    config: MetricsConfig | None = None,
) -> ASGIApp:
    """A raw ASGI app for the metrics port: GET (or HEAD) /metrics answers the exposition text; other
    methods on /metrics answer 405, every other path 404. `metrics_interval_ms` is tritonserver's
    --metrics-interval-ms: CPU utilisation is refreshed at most every half of it; `cpu_metrics`
    (--allow-cpu-metrics) keeps the host CPU and memory gauges; `custom` gives python models' own
    families; `config` is --metrics-config."""
    cpu = CpuSampler(window_s=max(metrics_interval_ms, 0) / 2000)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope.get("method", "GET")
        if scope.get("path") not in ("/metrics", "/metrics/"):
            await _respond(send, 404, b"Not Found\n", "text/plain; charset=utf-8")
        elif method not in ("GET", "HEAD"):
            await _respond(
                send, 405, b"Method Not Allowed\n", "text/plain; charset=utf-8", [(b"allow", b"GET, HEAD")]
            )
        else:
            body = metrics_text(service, cpu, cpu_metrics, custom, config)
            await _respond(send, 200, body, CONTENT_TYPE, head=method == "HEAD")

    return app


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra: list[tuple[bytes, bytes]] | None = None,
    head: bool = False,
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
