"""`Metrics`: the Prometheus metrics front end (GET /metrics) on an in-process server, as
`tritonfrontend.Metrics`; the same one `tcli serve` runs on --metrics-port, with the server's metrics
settings (interval, CPU metrics, `metrics_configuration`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tcli.frontend._service import Service, check_common
from tcli.inprocess import Server as InProcessServer


class Metrics(Service):
    kind = "Metrics"

    @dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8002
        thread_count: int = 1  # no effect: tcli's front end runs on the server's event loop

        def __post_init__(self) -> None:
            check_common(self, ("thread_count",))

    def __init__(self, server: InProcessServer, options: Metrics.Options | None = None) -> None:
        super().__init__(server, options, Metrics.Options, "Metrics")

    async def _serve(self, app: Any) -> Any:
        from server.backends.python.pb_utils.metric_registry import METRICS
        from server.frontends.http.server import serve_http
        from server.frontends.metrics import create_metrics_app

        settings = app.settings
        metrics = create_metrics_app(
            app.service,
            settings.metrics_interval_ms,
            cpu_metrics=settings.allow_cpu_metrics,
            custom=METRICS.collect,  # python models' pb_utils.MetricFamily families
            config=settings.metrics_config,
        )
        return await serve_http(metrics, self.options.address, self.options.port, limits=app.http_limits())
