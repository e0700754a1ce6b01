"""perf_analyzer's TLS options (--ssl-grpc-*, --ssl-https-*) as typer options, shared by the client
commands; `client_tls` turns them into tcli/client/tls.py's ClientTls. `tcli infer` and `tcli perf`
declare them as parameters; `with_tls` adds them to each command of `tcli model`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

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


# the same options added to every command of a group (`tcli model ...`) by a decorator ------------------
_OPTIONS: list[tuple[str, Any, object]] = [
    ("ssl_grpc_use_ssl", GrpcUseSsl, "false"),
    ("ssl_grpc_root_certifications_file", GrpcRoot, ""),
    ("ssl_grpc_private_key_file", GrpcKey, ""),
    ("ssl_grpc_certificate_chain_file", GrpcChain, ""),
    ("ssl_https_verify_peer", HttpsVerifyPeer, 1),
    ("ssl_https_verify_host", HttpsVerifyHost, 2),
    ("ssl_https_ca_certificates_file", HttpsCa, ""),
    ("ssl_https_client_certificate_file", HttpsCert, ""),
    ("ssl_https_private_key_file", HttpsKey, ""),
]
_current: ContextVar[ClientTls | None] = ContextVar("tcli_client_tls", default=None)


def current_tls() -> ClientTls | None:
    """The --ssl-* options of the command running (one decorated with `with_tls`)."""
    return _current.get()


def with_tls(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with perf_analyzer's --ssl-* options appended to its own (typer reads the signature);
    while it runs, `current_tls()` is what they say."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = _current.set(client_tls(*(kwargs.pop(name) for name, _, _ in _OPTIONS)))
        try:
            return command(*args, **kwargs)
        finally:
            _current.reset(token)

    signature = inspect.signature(command, eval_str=True)
    added = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a) for n, a, d in _OPTIONS
    ]
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *added]
    )
    wrapper.__annotations__ = {
        **get_type_hints(command, include_extras=True),
        **{name: annotation for name, annotation, _ in _OPTIONS},
    }
    return wrapper
