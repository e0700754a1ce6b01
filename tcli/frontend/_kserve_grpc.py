"""`KServeGrpc`: the KServe v2 gRPC front end on an in-process server, as `tritonfrontend.KServeGrpc`;
the same one `tcli serve` runs on --grpc-port, TLS included (`use_ssl`, `use_mutual_auth` and the
certificate files, checked when it starts), `forward_header_pattern` as --grpc-header-forward-pattern.
Triton's keepalive, compression, thread and pool options are taken and have no effect, as `tcli serve`
takes their flags. stop() ends the calls in flight with CANCELLED, as tritonfrontend's does."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tcli.frontend._service import Service, check, check_common, is_int, no_effect
from tcli.inprocess import InvalidArgumentError
from tcli.inprocess import Server as InProcessServer


class Grpc_compression_level(enum.IntEnum):  # tritonfrontend's name
    NONE = 0
    LOW = 1
    MED = 2
    HIGH = 3
    COUNT = 4


_TUNING = {  # Triton's gRPC tuning options and their defaults: no effect in tcli
    "keepalive_time_ms": 7_200_000,
    "keepalive_timeout_ms": 20_000,
    "http2_max_pings_without_data": 2,
    "http2_min_recv_ping_interval_without_data_ms": 300_000,
    "http2_max_ping_strikes": 2,
    "max_connection_age_ms": 0,
    "max_connection_age_grace_ms": 0,
    "infer_thread_count": 2,
    "infer_allocation_pool_size": 8,
    "max_response_pool_size": 2_147_483_647,
}


class KServeGrpc(Service):
    kind = "GRPC"
    Grpc_compression_level = Grpc_compression_level

    @dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8001
        reuse_port: bool = False
        use_ssl: bool = False
        server_cert: str = ""
        server_key: str = ""
        root_cert: str = ""
        use_mutual_auth: bool = False
        keepalive_time_ms: int = 7_200_000
        keepalive_timeout_ms: int = 20_000
        keepalive_permit_without_calls: bool = False
        http2_max_pings_without_data: int = 2
        http2_min_recv_ping_interval_without_data_ms: int = 300_000
        http2_max_ping_strikes: int = 2
        max_connection_age_ms: int = 0
        max_connection_age_grace_ms: int = 0
        infer_compression_level: int | Grpc_compression_level = Grpc_compression_level.NONE
        infer_thread_count: int = 2
        infer_allocation_pool_size: int = 8
        max_response_pool_size: int = 2_147_483_647
        forward_header_pattern: str = ""
        # tcli's own: groups of protocols a client must carry a header for, as
        # --grpc-restricted-protocol takes them ("model-repository:admin-key=admin-value")
        restricted_features: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            check_common(self)
            for name in ("reuse_port", "use_ssl", "use_mutual_auth", "keepalive_permit_without_calls"):
                check(self, name, lambda v: isinstance(v, bool), "a bool")
            for name in ("server_cert", "server_key", "root_cert", "forward_header_pattern"):
                check(self, name, lambda v: isinstance(v, str), "a str")
            for name in _TUNING:
                check(self, name, lambda v: is_int(v, 0), "an int of 0 or more")
            check(
                self,
                "infer_compression_level",
                lambda v: is_int(v, 0, len(Grpc_compression_level) - 1),
                "a Grpc_compression_level",
            )
            self.infer_compression_level = int(self.infer_compression_level)  # as tritonfrontend keeps it
            check(
                self,
                "restricted_features",
                lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                "a list of str (each as --grpc-restricted-protocol takes it)",
            )

    def __init__(self, server: InProcessServer, options: KServeGrpc.Options | None = None) -> None:
        super().__init__(server, options, KServeGrpc.Options, "KServeGrpc")
        given = self.options
        for name, default in _TUNING.items():
            if getattr(given, name) != default:
                no_effect("KServeGrpc", name, getattr(given, name))
        if given.infer_compression_level:
            no_effect("KServeGrpc", "infer_compression_level", given.infer_compression_level)
        from server.frontends.header_forward import HeaderForward, PatternError
        from server.protocol.restricted import RestrictionSpecError, parse_grpc_restricted_protocol

        try:
            self._header_forward = HeaderForward(given.forward_header_pattern)
        except PatternError as error:
            raise InvalidArgumentError(f"forward_header_pattern: not a regular expression: {error}") from None

        try:
            self._restricted = parse_grpc_restricted_protocol(given.restricted_features)
        except RestrictionSpecError as error:
            raise InvalidArgumentError(f"restricted_features: {error}") from None

    async def _serve(self, app: Any) -> Any:
        from server.frontends.grpc import serve_grpc
        from server.frontends.tls import TlsError, TlsSettings, load_tls

        given, settings = self.options, app.settings
        tls = None
        if given.use_ssl or given.use_mutual_auth:
            try:
                tls = load_tls(
                    TlsSettings(
                        "grpc", given.server_cert, given.server_key, given.root_cert, given.use_mutual_auth
                    ),
                    ["h2"],
                )
            except TlsError as error:  # it names tcli serve's flag; these are the options of the same name
                raise InvalidArgumentError(str(error)) from None
        handle = await serve_grpc(
            app.service,
            given.address,
            given.port,
            reuse_port=given.reuse_port,
            allow_client_shm=settings.allow_client_shm,
            shm_registry=app.shm_registry,
            implementation=settings.grpc_implementation,
            restricted=self._restricted,
            tls=tls,
            max_message_size=settings.grpc_max_message_size,
            max_concurrent_streams=settings.grpc_max_concurrent_streams,
            read_timeout=settings.grpc_read_timeout,
            header_forward=self._header_forward,
        )
        handle.grace = 0.0  # as tritonfrontend's stop(): the calls in flight end CANCELLED at once
        return handle
