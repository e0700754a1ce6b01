"""TLS for tcli's clients, with perf_analyzer's options: gRPC over TLS when `grpc_use_ssl` is set
(--ssl-grpc-use-ssl, with the root certificates to trust and, for mutual TLS, the client's key and
certificate chain), HTTPS when the URL starts with https:// (--ssl-https-* name the CA bundle, the
client certificate and key, and whether to verify the server and its name)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

# standard library only at import: tcli perf's load generator processes use this module too


def _error(message: str) -> Exception:
    from tcli.client.types import ClientError

    return ClientError(message)


def _read(path: str, flag: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _error(f"--{flag} {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class ClientTls:
    """perf_analyzer's --ssl-* options, by their names."""

    grpc_use_ssl: bool = False
    grpc_root_certifications_file: str = ""
    grpc_private_key_file: str = ""
    grpc_certificate_chain_file: str = ""
    https_verify_peer: int = 1  # 0: accept any server certificate
    https_verify_host: int = 2  # 0: do not match the server's name against its certificate
    https_ca_certificates_file: str = ""
    https_client_certificate_file: str = ""
    https_private_key_file: str = ""

    def https_given(self) -> bool:
        return bool(
            self.https_ca_certificates_file
            or self.https_client_certificate_file
            or self.https_private_key_file
        )

    def grpc_credentials(self) -> grpc.ChannelCredentials | None:
        """The channel credentials of --ssl-grpc-use-ssl, None for plain text."""
        if not self.grpc_use_ssl:
            return None
        import grpc

        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.grpc_root_certifications_file, "ssl-grpc-root-certifications-file"),
            private_key=_read(self.grpc_private_key_file, "ssl-grpc-private-key-file"),
            certificate_chain=_read(self.grpc_certificate_chain_file, "ssl-grpc-certificate-chain-file"),
        )

    def grpc_context(self) -> ssl.SSLContext | None:
        """--ssl-grpc-use-ssl as an ssl.SSLContext offering HTTP/2 (tcli perf's own gRPC transport)."""
        if not self.grpc_use_ssl:
            return None
        context = ssl.create_default_context()
        try:
            if self.grpc_root_certifications_file:
                context.load_verify_locations(cafile=self.grpc_root_certifications_file)
            if self.grpc_certificate_chain_file or self.grpc_private_key_file:
                context.load_cert_chain(self.grpc_certificate_chain_file, self.grpc_private_key_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise _error(
                "--ssl-grpc-root-certifications-file / --ssl-grpc-certificate-chain-file / "
                f"--ssl-grpc-private-key-file: {_reason(exc)}"
            ) from None
        context.set_alpn_protocols(["h2"])
        return context

    def https_context(self) -> ssl.SSLContext:
        """The client context of an https:// URL."""
        context = ssl.create_default_context()
        if self.https_ca_certificates_file:
            try:
                context.load_verify_locations(cafile=self.https_ca_certificates_file)
            except (OSError, ssl.SSLError) as exc:
                raise _error(
                    f"--ssl-https-ca-certificates-file {self.https_ca_certificates_file}: {_reason(exc)}"
                ) from None
        if self.https_verify_host == 0 or self.https_verify_peer == 0:
            context.check_hostname = False
        if self.https_verify_peer == 0:
            context.verify_mode = ssl.CERT_NONE
        if self.https_client_certificate_file or self.https_private_key_file:
            try:
                context.load_cert_chain(
                    self.https_client_certificate_file, self.https_private_key_file or None
                )
            except (OSError, ssl.SSLError) as exc:
                raise _error(
                    f"--ssl-https-client-certificate-file {self.https_client_certificate_file} / "
                    f"--ssl-https-private-key-file {self.https_private_key_file}: {_reason(exc)}"
                ) from None
        return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    return str(getattr(exc, "reason", None) or exc.strerror or exc)
