"""perf_analyzer's TLS options (--ssl-grpc-*, --ssl-https-*) as typer options, shared by the client
commands; `client_tls` turns them into tcli/client/tls.py's ClientTls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from tcli.client.tls import ClientTls

_PANEL = "TLS (perf_analyzer's options)"

GrpcUseSsl = Annotated[
    str,
    typer.Option(metavar="BOOLEAN", help="gRPC over TLS.", rich_help_panel=_PANEL),
]
GrpcRoot = Annotated[
    str,
    typer.Option(help="PEM root certificates to trust (default: the system's).", rich_help_panel=_PANEL),
]
GrpcKey = Annotated[
    str, typer.Option(help="The client's PEM private key (mutual TLS).", rich_help_panel=_PANEL)
]
GrpcChain = Annotated[
    str, typer.Option(help="The client's PEM certificate chain (mutual TLS).", rich_help_panel=_PANEL)
]
HttpsVerifyPeer = Annotated[
    int, typer.Option(help="0: accept any server certificate (https:// URLs).", rich_help_panel=_PANEL)
]
HttpsVerifyHost = Annotated[
    int, typer.Option(help="0: do not match the server's name to its certificate.", rich_help_panel=_PANEL)
]
HttpsCa = Annotated[
    str, typer.Option(help="PEM CA bundle to trust (default: the system's).", rich_help_panel=_PANEL)
]
HttpsCert = Annotated[
    str, typer.Option(help="The client's PEM certificate (mutual TLS).", rich_help_panel=_PANEL)
]
HttpsKey = Annotated[
    str, typer.Option(help="The client's PEM private key (mutual TLS).", rich_help_panel=_PANEL)
]


def client_tls(
    grpc_use_ssl: str,
    grpc_root: str,
    grpc_key: str,
    grpc_chain: str,
    https_verify_peer: int,
    https_verify_host: int,
    https_ca: str,
    https_cert: str,
    https_key: str,
) -> ClientTls:
    from tcli.client.tls import ClientTls
    from tcli.errors import CliError

    lowered = grpc_use_ssl.strip().lower()
    if lowered not in ("true", "false", "1", "0"):
        raise CliError(f"--ssl-grpc-use-ssl expects true or false, got '{grpc_use_ssl}'")
    return ClientTls(
        grpc_use_ssl=lowered in ("true", "1"),
        grpc_root_certifications_file=grpc_root,
        grpc_private_key_file=grpc_key,
        grpc_certificate_chain_file=grpc_chain,
        https_verify_peer=https_verify_peer,
        https_verify_host=https_verify_host,
        https_ca_certificates_file=https_ca,
        https_client_certificate_file=https_cert,
        https_private_key_file=https_key,
    )
