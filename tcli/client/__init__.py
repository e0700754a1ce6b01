"""One client library for tcli's commands: the same calls and types over HTTP and gRPC."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tcli.client.grpc import GrpcClient
    from tcli.client.http import HttpClient
    from tcli.client.tls import ClientTls

DEFAULT_URLS = {"http": "localhost:8000", "grpc": "localhost:8001"}


def connect(
    url: str | None, protocol: str = "http", timeout: float = 60.0, tls: ClientTls | None = None
) -> HttpClient | GrpcClient:
    """A client for a Triton-compatible server (tcli's or Triton itself); `tls` (perf_analyzer's
    --ssl-* options) for gRPC over TLS, and for an https:// URL."""
    if protocol == "grpc":
        from tcli.client.grpc import GrpcClient

        return GrpcClient(url or DEFAULT_URLS["grpc"], timeout, tls)
    from tcli.client.http import HttpClient

    return HttpClient(url or DEFAULT_URLS["http"], timeout, tls)
