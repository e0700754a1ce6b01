"""TLS for the front ends: the server's certificate and key, and for mutual TLS the CA that signs the
clients' certificates (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`, `--grpc-server-cert`,
`--grpc-server-key`, `--grpc-root-cert`, and the same `--http-*` flags), in the two forms the
transports take: an `ssl.SSLContext` for asyncio's `create_server` (tcli's HTTP/1.1 server and native
gRPC) and `grpc.ServerCredentials` for grpc.aio.

Every file is read and checked when the server starts, so that a missing or unusable one stops it
with one line naming the file and its flag (tritonserver hands unreadable files to gRPC as empty and
fails later with a message about the port). As in Triton, the root certificate matters only for
mutual TLS: without it no client certificate is asked for.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class TlsError(ValueError):
    """A certificate or key the server cannot use: the message is one line naming the file and flag."""


@dataclass(frozen=True)
class TlsSettings:
    """One front end's TLS flags; `front_end` ("grpc" or "http") is their prefix, named in errors."""

    front_end: str
    server_cert: str
    server_key: str
    root_cert: str = ""
    mutual: bool = False  # clients must present a certificate signed by `root_cert`


@dataclass(frozen=True)
class ServerTls:
    """What a front end serves TLS with: the context (asyncio) and the same files as gRPC credentials."""

    settings: TlsSettings
    context: ssl.SSLContext
    cert: bytes
    key: bytes
    root: bytes | None

    def grpc_credentials(self) -> grpc.ServerCredentials:
        import grpc  # only the grpcio implementation needs it

        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.root, require_client_auth=self.settings.mutual
        )


def _read(path: str, flag: str, what: str, needed_by: str) -> bytes:
    if not path:
        raise TlsError(f"{needed_by} needs {flag}: {what} (a PEM file)")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"{flag} {path}: cannot read {what}: {exc.strerror or exc}") from None


def load_tls(settings: TlsSettings, alpn: list[str]) -> ServerTls:
    """Read and check the files; `alpn` lists the protocols offered ("h2" for gRPC: its clients
    refuse a server that selects none). Raises TlsError."""
    prefix = f"--{settings.front_end}"
    cert_flag, key_flag, root_flag = f"{prefix}-server-cert", f"{prefix}-server-key", f"{prefix}-root-cert"
    use_ssl = f"{prefix}-use-ssl"
    cert = _read(settings.server_cert, cert_flag, "the server's certificate", use_ssl)
    key = _read(settings.server_key, key_flag, "the server's private key", use_ssl)
    root = None
    if settings.mutual:
        what = "the CA certificate that client certificates must be signed by"
        root = _read(settings.root_cert, root_flag, what, f"{use_ssl}-mutual")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cadata=cert.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError):
        raise TlsError(f"{cert_flag} {settings.server_cert}: no PEM certificate in it") from None
    try:
        # a passphrase-protected key is refused rather than asked for on the terminal (Triton has no
        # passphrase flag either)
        context.load_cert_chain(settings.server_cert, settings.server_key, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(
            f"{key_flag} {settings.server_key}: not an unencrypted PEM private key of the certificate in "
            f"{cert_flag} {settings.server_cert} ({getattr(exc, 'reason', None) or exc})"
        ) from None
    if root is not None:
        try:
            context.load_verify_locations(cadata=root.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError):
            raise TlsError(f"{root_flag} {settings.root_cert}: no PEM certificate in it") from None
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(alpn)
    return ServerTls(settings, context, cert, key, root)
