"""Composition root: settings in, repository loaded, front ends started, graceful shutdown out.

`Server` runs in-process (tests, notebooks): `with Server(settings) as server: server.http_url`.
`run(settings)` is what `tcli serve` calls: it serves until SIGINT/SIGTERM, then stops accepting,
drains in-flight requests up to the exit timeout, and unloads every model. On SIGTERM it first answers
not ready while it goes on serving, until requests stop coming (`Server.unready`). A signal before the
front ends listen, or a second one, ends the process at once (`server/signals.py`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server import graceful_stop, signals
from server.backends.base import DEFAULT_BACKEND_DIRECTORY
from server.backends.python import fork_signals, process_life
from server.frontends.header_forward import HeaderForward
from server.frontends.ports import Listener, PortInUseError, bind_problem
from server.frontends.tls import ServerTls, TlsSettings, load_tls
from server.logs import LogSettings
from server.protocol.restricted import Restriction
from server.protocol.shm import SharedMemoryRegistry
from server.repository.manager import ControlMode, LoadOptions, ModelManager
from server.scheduling.latency_summary import MetricsConfig
from server.scheduling.rate_limiter import RateLimiter, ResourceLimit
from server.service import InferenceService
from server.tracing.flags import TraceFlags
from server.tracing.setup import make_tracer

log = logging.getLogger("tcli.server")

# SIGTERM is how supervisors stop a replica (Kubernetes, systemd, a rolling restart), mostly with a load
# balancer in front that polls /v2/health/ready. Closing the listener at once, as Triton does, fails
# what the balancer sends before its next check finds the replica gone (behind HAProxy without retries,
# checks every 250 ms, 3 clients: ~250 requests per restart; tests/integration/test_load_balancer.py).
# So the server first answers not ready and serves on until no request has arrived for this long.
QUIET_SECS = 1.0


@dataclass
class ServerSettings:
    """tritonserver's options, with its flag names."""

    model_repositories: list[Path | str]  # folders, or s3:// gs:// as:// paths
    model_control_mode: ControlMode = ControlMode.NONE
    repository_poll_secs: float = 15.0
    load_models: list[str] = field(default_factory=list)
    strict_readiness: bool = True
    exit_timeout_secs: float = 30.0
    host: str = "0.0.0.0"
    http_port: int = 8000
    grpc_port: int = 8001
    grpc_implementation: str = "native"  # or "grpcio" (server/frontends/grpc.py serve_grpc)
    metrics_port: int = 8002
    allow_http: bool = True
    allow_grpc: bool = True
    allow_metrics: bool = True
    allow_client_shm: bool = False
    http_max_input_size: int = 64 * 2**20
    # connection limits (tcli's own flags: tritonserver has none; server/frontends/http/limits.py)
    http_header_timeout: float = 30.0  # --http-header-timeout: seconds for a whole request head
    http_body_timeout: float = 60.0  # --http-body-timeout: seconds without a body byte mid-body
    http_keepalive_timeout: float = 75.0  # --http-keepalive-timeout: idle seconds between requests
    http_max_connections: int = 10000  # --http-max-connections: beyond it, 503 and close
    grpc_max_message_size: int = 2**31 - 1  # --grpc-max-message-size: larger is RESOURCE_EXHAUSTED
    grpc_max_concurrent_streams: int = 1024  # --grpc-max-concurrent-streams, per connection
    grpc_read_timeout: float = 30.0  # --grpc-read-timeout: a stalled preface or frame closes
    log_verbose: int = 0
    repoagent_directories: list[Path] = field(default_factory=list)  # --repoagent-directory
    backend_directory: Path = DEFAULT_BACKEND_DIRECTORY  # --backend-directory: Python-based backends
    server_id: str = "triton"  # --id: the name server metadata answers
    exit_on_error: bool = False  # --exit-on-error (tritonserver's default is true; `tcli serve` passes it)
    auto_complete_config: bool = True  # False: --disable-auto-complete-config / --strict-model-config=true
    model_config_name: str = ""  # --model-config-name: configs/<name>.pbtxt where a model has it
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    grpc_address: str | None = None  # None: `host`
    metrics_address: str | None = None  # None: `host`
    metrics_interval_ms: float = 2000.0
    allow_cpu_metrics: bool = True
    metrics_config: MetricsConfig = field(default_factory=MetricsConfig)  # --metrics-config
    log_settings: LogSettings | None = None
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)  # --backend-config
    rate_limit: bool = False  # --rate-limit=execution_count (True) or off
    rate_limit_resources: list[ResourceLimit] = field(default_factory=list)  # --rate-limit-resource
    # --http-restricted-api, --grpc-restricted-protocol: group -> the header and value its calls must
    # carry (server/protocol/restricted.py parses the flags)
    http_restricted_api: dict[str, Restriction] = field(default_factory=dict)
    grpc_restricted_protocol: dict[str, Restriction] = field(default_factory=dict)
    # --http-header-forward-pattern, --grpc-header-forward-pattern: matching headers reach the model
    # as request parameters ("" forwards none)
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    # TLS (server/frontends/tls.py): gRPC with tritonserver's flags; HTTP with flags named after them
    # (Triton serves no HTTPS). Mutual TLS implies TLS, as tritonserver's --grpc-use-ssl-mutual does.
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    http_use_ssl: bool = False
    http_use_ssl_mutual: bool = False
    http_server_cert: str = ""
    http_server_key: str = ""
    http_root_cert: str = ""
    # --cache-config local,size=<bytes> / --response-cache-byte-size: the response cache; 0: none
    response_cache_byte_size: int = 0
    trace: TraceFlags | None = None  # --trace-config and the older --trace-* flags (server/tracing/flags.py)
    # the OpenAI-compatible front end (server/frontends/openai/), off unless a port is given; Triton
    # runs it as a program of its own (python/openai: --openai-port, --tokenizer, --chat-template,
    # --default-max-tokens, --openai-restricted-api), tcli beside the other front ends
    openai_port: int | None = None
    openai_address: str | None = None  # None: `host`
    openai_tokenizer: str = ""  # a tokenizer folder for models whose config names none
    openai_chat_template: str = ""  # a Jinja file replacing every model's chat template
    openai_default_max_tokens: int = 16
    openai_restricted_api: dict[str, Restriction] = field(default_factory=dict)
    openai_use_ssl: bool = False
    openai_use_ssl_mutual: bool = False
    openai_server_cert: str = ""
    openai_server_key: str = ""
    openai_root_cert: str = ""

    def grpc_tls(self) -> TlsSettings | None:
        """The gRPC front end's TLS settings; None: plain text."""
        if not (self.grpc_use_ssl or self.grpc_use_ssl_mutual):
            return None
        return TlsSettings(
            "grpc", self.grpc_server_cert, self.grpc_server_key, self.grpc_root_cert, self.grpc_use_ssl_mutual
        )

    def http_tls(self) -> TlsSettings | None:
        """The HTTP front end's TLS settings; None: plain text."""
        if not (self.http_use_ssl or self.http_use_ssl_mutual):
            return None
        return TlsSettings(
            "http", self.http_server_cert, self.http_server_key, self.http_root_cert, self.http_use_ssl_mutual
        )

    def openai_tls(self) -> TlsSettings | None:
        """The OpenAI front end's TLS settings; None: plain text."""
        if not (self.openai_use_ssl or self.openai_use_ssl_mutual):
            return None
        return TlsSettings(
            "openai",
            self.openai_server_cert,
            self.openai_server_key,
            self.openai_root_cert,
            self.openai_use_ssl_mutual,
        )


class StartupError(RuntimeError):
    """Start-up failed and --exit-on-error asks to stop: the message is tritonserver's; `server` is
    the stopped server (its tables show what failed)."""

    def __init__(self, message: str, server: Server) -> None:
        super().__init__(message)
        self.server = server


class Server:
    """The server with its front ends on a private event loop thread."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        # certificates first: a file that cannot be used stops the server before any model loads
        grpc_tls, http_tls = settings.grpc_tls(), settings.http_tls()
        self.grpc_tls: ServerTls | None = (
            load_tls(grpc_tls, ["h2"]) if grpc_tls and settings.allow_grpc else None
        )
        self.http_tls: ServerTls | None = (
            load_tls(http_tls, ["http/1.1"]) if http_tls and settings.allow_http else None
        )
        openai_tls = settings.openai_tls()
        self.openai_tls: ServerTls | None = (
            load_tls(openai_tls, ["http/1.1"]) if openai_tls and settings.openai_port is not None else None
        )
        self.manager = ModelManager(
            settings.model_repositories,
            settings.model_control_mode,
            settings.repoagent_directories,
            options=LoadOptions(
                auto_complete=settings.auto_complete_config,
                config_name=settings.model_config_name,
                threads=settings.model_load_thread_count,
                retries=settings.model_load_retry_count,
                backend_config=settings.backend_config,
                backend_directory=settings.backend_directory,
                rate_limiter=RateLimiter(settings.rate_limit_resources) if settings.rate_limit else None,
            ),
        )
        if settings.response_cache_byte_size > 0:
            from server.scheduling.response_cache import ResponseCache

            self.manager.response_cache = ResponseCache(settings.response_cache_byte_size)
        if settings.metrics_config.summary_latencies:  # every version's statistics keep summaries
            self.manager.stats.summary_quantiles = settings.metrics_config.summary_quantiles
        self.service = InferenceService(
            self.manager,
            strict_readiness=settings.strict_readiness,
            allow_client_shm=settings.allow_client_shm,
            server_id=settings.server_id,
            log_settings=settings.log_settings,
            trace_values=settings.trace.values if settings.trace else None,
            tracer=make_tracer(settings.trace),
        )
        # one registry of client shared memory regions, shared by the HTTP and gRPC front ends
        self.shm_registry = SharedMemoryRegistry()
        self.http_port: int | None = None
        self.metrics_port: int | None = None
        self.grpc_port: int | None = None
        self.openai_port: int | None = None
        self._handles: list[Any] = []
        self._http: Any = None  # the HTTP front end's handle (not the metrics one)
        self._bls: Any = None  # python models' BLS requests run on the front ends' loop while it serves
        self._model_control: Any = None  # and so do their pb_utils.load_model / unload_model calls
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # in-process use --------------------------------------------------------------------------------
    def start(self) -> Server:
        self.check_ports()  # a port in use stops start-up before any model loads
        try:
            self.load_models()
        except BaseException:  # Ctrl-C while loading: what loaded is unloaded; loads under way go on
            self.end_loading()
            self.manager.shutdown(self.settings.exit_timeout_secs)
            self.service.tracer.close()
            raise
        ready = threading.Event()
        failure: list[BaseException] = []

        def run_loop() -> None:
            loop = _new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start_frontends())
            except BaseException as exc:  # reported to the caller of start()
                failure.append(exc)
                loop.run_until_complete(self.stop_frontends())  # those that did start stop listening
                loop.close()
                self._loop = None
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run_loop, name="tcli-server-loop", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:  # nothing serves: the models are unloaded, their processes and shared memory ended
            self._thread.join(5)
            self.manager.shutdown(self.settings.exit_timeout_secs)
            self.service.tracer.close()
            raise self._named(failure[0])
        return self

    def check_ports(self) -> None:
        """Raise PortInUseError for the first front end whose port cannot be listened on now (a port
        shared on purpose, --reuse-http-port / --reuse-grpc-port, is not asked)."""
        settings = self.settings
        for runs, setting, address, port in (
            (
                settings.allow_http and not settings.reuse_http_port,
                "--http-port",
                settings.host,
                settings.http_port,
            ),
            (
                settings.allow_grpc and not settings.reuse_grpc_port,
                "--grpc-port",
                settings.grpc_address or settings.host,
                settings.grpc_port,
            ),
            (
                settings.allow_metrics,
                "--metrics-port",
                settings.metrics_address or settings.host,
                settings.metrics_port,
            ),
            (
                settings.openai_port is not None,
                "--openai-port",
                settings.openai_address or settings.host,
                settings.openai_port or 0,
            ),
        ):
            problem = bind_problem(Listener(setting, address, port)) if runs else None
            if problem is not None:
                raise PortInUseError(setting, address, port, problem.reason.lower())

    def _named(self, error: BaseException) -> BaseException:
        """A front end that could not bind (taken since check_ports), as the error naming it."""
        if isinstance(error, OSError) and not isinstance(error, PortInUseError):
            try:
                self.check_ports()
            except PortInUseError as named:
                return named
        return error

    def stop(self) -> None:
        if self._loop is not None:
            future = asyncio.run_coroutine_threadsafe(self.stop_frontends(), self._loop)
            future.result(timeout=self.settings.exit_timeout_secs + 5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            self._loop = None
        self.end_loading()
        self.manager.shutdown(self.settings.exit_timeout_secs)
        self.service.tracer.close()  # traces still held are written

    def end_loading(self) -> None:
        """Loads under way (start-up's, a poll's reload, a load request) end now, their instance
        processes still starting killed, instead of holding the stop up for as long as a model's
        initialize() takes; they fail without a report."""
        self.manager.cancel_loading()
        process_life.cancel_starting()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the front ends run on, while the server runs in-process."""
        return self._loop

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http_port}"

    # pieces ----------------------------------------------------------------------------------------
    def load_models(self) -> None:
        self.manager.refresh()  # list every bucket once; one that cannot be read is logged and retried
        self.manager.load_startup(self.settings.load_models)
        # Everything start-up built (frameworks, models) lives as long as the server: move it out of the
        # collector's reach, or each full collection walks it all and stalls the event loop for
        # 100-250 ms with torch and onnxruntime loaded (measured), which is every p99 at high load.
        gc.freeze()
        if self.settings.model_control_mode == ControlMode.POLL:
            self.manager.start_polling(self.settings.repository_poll_secs)

    async def start_frontends(self) -> None:
        from server import bls, model_control

        self._bls = bls.install(self.service, asyncio.get_running_loop())
        self._model_control = model_control.install(self.service, asyncio.get_running_loop())
        settings = self.settings
        if settings.allow_http:
            from server.frontends.http.app import create_http_app
            from server.frontends.http.server import serve_http

            app = create_http_app(
                self.service,
                max_input_size=settings.http_max_input_size,
                allow_client_shm=settings.allow_client_shm,
                shm_registry=self.shm_registry,
                restricted=settings.http_restricted_api,
                header_forward=HeaderForward(settings.http_header_forward_pattern, case_insensitive=True),
            )
            handle = await serve_http(
                app,
                settings.host,
                settings.http_port,
                reuse_port=settings.reuse_http_port,
                direct=app,
                on_close=app.close,
                ssl_context=None if self.http_tls is None else self.http_tls.context,
                limits=self.http_limits(),
            )
            self.http_port = handle.port
            self._handles.append(handle)
            self._http = handle
        if settings.allow_metrics:
            from server.backends.python.pb_utils.metric_registry import METRICS
            from server.frontends.http.server import serve_http
            from server.frontends.metrics import create_metrics_app

            metrics = create_metrics_app(
                self.service,
                settings.metrics_interval_ms,
                cpu_metrics=settings.allow_cpu_metrics,
                custom=METRICS.collect,  # python models' pb_utils.MetricFamily families
                config=settings.metrics_config,
            )
            handle = await serve_http(
                metrics,
                settings.metrics_address or settings.host,
                settings.metrics_port,
                limits=self.http_limits(),
            )
            self.metrics_port = handle.port
            self._handles.append(handle)
        if settings.allow_grpc:
            from server.frontends.grpc import serve_grpc

            grpc_handle = await serve_grpc(
                self.service,
                settings.grpc_address or settings.host,
                settings.grpc_port,
                reuse_port=settings.reuse_grpc_port,
                allow_client_shm=settings.allow_client_shm,
                shm_registry=self.shm_registry,
                implementation=settings.grpc_implementation,
                restricted=settings.grpc_restricted_protocol,
                header_forward=HeaderForward(settings.grpc_header_forward_pattern, case_insensitive=True),
                tls=self.grpc_tls,
                max_message_size=settings.grpc_max_message_size,
                max_concurrent_streams=settings.grpc_max_concurrent_streams,
                read_timeout=settings.grpc_read_timeout,
            )
            self.grpc_port = grpc_handle.port
            self._handles.append(grpc_handle)
        if settings.openai_port is not None:
            await self._start_openai()

    async def _start_openai(self) -> None:
        from server.backends.python.pb_utils.metric_registry import METRICS
        from server.frontends.http.server import serve_http
        from server.frontends.metrics import metrics_text
        from server.frontends.openai.app import create_openai_app

        settings = self.settings
        service = self.service

        def metrics() -> bytes:
            return metrics_text(service, cpu_metrics=settings.allow_cpu_metrics, custom=METRICS.collect)

        app = create_openai_app(
            service,
            tokenizer=settings.openai_tokenizer,
            chat_template=settings.openai_chat_template,
            default_max_tokens=settings.openai_default_max_tokens,
            max_input_size=settings.http_max_input_size,
            restricted=settings.openai_restricted_api,
            metrics=metrics if settings.allow_metrics else None,
            explicit=settings.model_control_mode == ControlMode.EXPLICIT,
        )
        handle = await serve_http(
            app,
            settings.openai_address or settings.host,
            settings.openai_port or 0,
            ssl_context=None if self.openai_tls is None else self.openai_tls.context,
            limits=self.http_limits(),
        )
        self.openai_port = handle.port
        self._handles.append(handle)

    def http_limits(self) -> Any:
        from server.frontends.http.limits import ConnectionLimits

        settings = self.settings
        return ConnectionLimits(
            header_timeout=settings.http_header_timeout,
            body_timeout=settings.http_body_timeout,
            keep_alive_timeout=settings.http_keepalive_timeout,
            max_connections=settings.http_max_connections,
        )

    async def stop_frontends(self) -> None:
        for handle in self._handles:
            await handle.shutdown()
        self._handles.clear()
        if self._bls is not None:
            from server import bls, model_control

            bls.uninstall(self._bls)
            self._bls = None
            model_control.uninstall(self._model_control)
        self.shm_registry.close()  # the front ends are gone: unmap every region still registered

    async def unready(self, timeout: float, interrupted: Callable[[], bool] = lambda: False) -> None:
        """Answer not ready but go on serving until no inference request has arrived for QUIET_SECS,
        `timeout` passes or `interrupted()` (a second signal): a load balancer polling readiness has
        routed new requests elsewhere by then, so stopping after this fails none of them."""
        self.service.unready = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen, quiet_since = self.service.requests_started, loop.time()
        while loop.time() < deadline and loop.time() - quiet_since < QUIET_SECS and not interrupted():
            await asyncio.sleep(0.05)
            if self.service.requests_started != seen:
                seen, quiet_since = self.service.requests_started, loop.time()

    async def close_http(self, timeout: float) -> float:
        """tritonserver's first step of a graceful stop (server/graceful_stop.py); returns what is left
        of `timeout`."""
        return timeout if self._http is None else await graceful_stop.close_http(self._http, timeout)

    async def drain(self, timeout: float) -> None:
        """Every model stops taking requests; what is queued and executing ends (graceful_stop.py)."""
        self.service.accepting = False
        await graceful_stop.drain(self.manager, timeout)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run(settings: ServerSettings, on_started: Callable[[Server], None] | None = None) -> int:
    """Serve until SIGINT/SIGTERM (the `tcli serve` main loop). Returns the process exit code; raises
    StartupError when a model or repository failed at start-up and `exit_on_error` is set, TlsError
    (server/frontends/tls.py) before loading anything when a certificate or key cannot be used."""
    # until the front ends listen, a signal ends the process at once, as it ends tritonserver
    signals.end_on_signal()
    fork_signals.install()  # a model's forked child must not inherit those handlers
    server = Server(settings)
    signals.end_on_signal(server.manager.cancel_loading)
    server.load_models()
    if settings.exit_on_error:
        failures = server.manager.startup_failures()
        if failures:  # each was logged as it happened
            server.manager.shutdown(settings.exit_timeout_secs)
            raise StartupError("creating server: Internal - failed to load all models", server)
    loop = _new_event_loop()
    asyncio.set_event_loop(loop)
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(number: int) -> None:
        received.append(number)
        if len(received) > 1:  # a second Ctrl-C: now; a second SIGTERM changes nothing (Triton's way)
            if number == signal.SIGINT:
                signals.end_now(number)
            log.info("%s: the server is already stopping", signal.Signals(number).name)
            return
        stop.set()

    async def main() -> None:
        for sig in signals.STOP_SIGNALS:  # before the front ends listen: a client may already call
            loop.add_signal_handler(sig, on_signal, sig)
        await server.start_frontends()
        if on_started is not None:
            on_started(server)
        await stop.wait()
        timeout = settings.exit_timeout_secs
        began = loop.time()
        if received[0] == signal.SIGTERM:  # Ctrl-C (SIGINT) is a person who wants it stopped now
            log.info("SIGTERM: not ready; serving until no request has arrived for %ss", QUIET_SECS)
            await server.unready(timeout / 2)  # half the exit timeout at most (a second Ctrl-C: now)
        remaining = await server.close_http(timeout - (loop.time() - began))
        log.info("signal received: draining in-flight requests (up to %.1fs)", remaining)
        await server.drain(remaining)
        await server.stop_frontends()

    try:
        loop.run_until_complete(main())
    finally:
        for sig in signals.STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        # while the models unload (the loop no longer runs): Ctrl-C ends it now, SIGTERM is ignored
        signals.end_on_signal()
        signals.ignore_sigterm()
        server.end_loading()
        unloaded = server.manager.shutdown(settings.exit_timeout_secs)
        server.service.tracer.close()  # traces still held are written
        loop.close()
        # the log's last line, as tritonserver's says that no model is left live
        log.info("server stopped: %d model version%s unloaded", unloaded, "" if unloaded == 1 else "s")
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m server.app REPO` for quick manual runs
    sys.exit(run(ServerSettings([Path(p) for p in sys.argv[1:]] or [Path("model_repository")])))
