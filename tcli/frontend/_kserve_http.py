"""`KServeHttp`: the KServe v2 REST front end on an in-process server, as `tritonfrontend.KServeHttp`;
the same front end `tcli serve` runs on --http-port, with the server's settings for what Options do
not name (the request size limit, client shared memory, the connection limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tcli.frontend._service import Service, check, check_common
from tcli.inprocess import InvalidArgumentError
from tcli.inprocess import Server as InProcessServer


class KServeHttp(Service):
    kind = "HTTP"

    @dataclass
    class Options:
        address: str = "0.0.0.0"
        port: int = 8000
        reuse_port: bool = False
        thread_count: int = 8  # no effect: tcli's front end runs on the server's event loop
        header_forward_pattern: str = ""  # as --http-header-forward-pattern
        # tcli's own: groups of APIs a client must carry a header for, as --http-restricted-api takes
        # them ("model-repository,model-config:admin-key=admin-value")
        restricted_features: list[str] = field(default_factory=list)

        def __post_init__(self) -> None:
            check_common(self, ("thread_count",))
            check(self, "reuse_port", lambda v: isinstance(v, bool), "a bool")
            check(self, "header_forward_pattern", lambda v: isinstance(v, str), "a str")
            check(
                self,
                "restricted_features",
                lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                "a list of str (each as --http-restricted-api takes it)",
            )

    def __init__(self, server: InProcessServer, options: KServeHttp.Options | None = None) -> None:
        super().__init__(server, options, KServeHttp.Options, "KServeHttp")
        from server.frontends.header_forward import HeaderForward, PatternError
        from server.protocol.restricted import RestrictionSpecError, parse_http_restricted_api

        try:
            self._header_forward = HeaderForward(self.options.header_forward_pattern)
        except PatternError as error:
            raise InvalidArgumentError(f"header_forward_pattern: not a regular expression: {error}") from None

        try:
            self._restricted = parse_http_restricted_api(self.options.restricted_features)
        except RestrictionSpecError as error:
            raise InvalidArgumentError(f"restricted_features: {error}") from None

    async def _serve(self, app: Any) -> Any:
        from server.frontends.http.app import create_http_app
        from server.frontends.http.server import serve_http

        settings = app.settings
        frontend = create_http_app(
            app.service,
            max_input_size=settings.http_max_input_size,
            allow_client_shm=settings.allow_client_shm,
            shm_registry=app.shm_registry,
            restricted=self._restricted,
            header_forward=self._header_forward,
        )
        return await serve_http(
            frontend,
            self.options.address,
            self.options.port,
            reuse_port=self.options.reuse_port,
            direct=frontend,
            on_close=frontend.close,
            limits=app.http_limits(),
        )
