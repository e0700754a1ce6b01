"""gRPC over HTTP/2 (the "PROTOCOL-HTTP2" spec of grpc/grpc): response header blocks, status
trailers, grpc-timeout, request metadata as grpc.aio hands it to servicers, and message
decompression."""

from __future__ import annotations

import base64
import re
import zlib

import grpc

from server.protocol.http2.header_block import indexed, literal, literal_named

# `:status: 200` (static table 8) and `content-type: application/grpc` (name from static table 31)
RESPONSE_HEAD = indexed(8) + literal_named(31, b"application/grpc")
OK_TRAILERS = literal(b"grpc-status", b"0")
ACCEPT_ENCODING = b"identity,deflate,gzip"

# headers that are transport, not metadata (grpc.aio leaves them out of invocation_metadata too)
_RESERVED = frozenset(
    {b"te", b"content-type", b"grpc-timeout", b"grpc-encoding", b"grpc-accept-encoding", b"grpc-message-type"}
)
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
_NOT_PLAIN = re.compile(rb"[^\x20-\x24\x26-\x7e]")  # grpc-message keeps printable ASCII but '%'
_WBITS = {b"gzip": 31, b"deflate": 15}  # gRPC's "deflate" is the zlib format


class CallError(Exception):
    """A call ends with this gRPC status: raised by the servicer context's abort and by the transport."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def status_block(code: grpc.StatusCode, details: str, trailers_only: bool) -> bytes:
    """The header block ending a call: trailers, or the whole answer when nothing was sent before."""
    block = literal(b"grpc-status", str(code.value[0]).encode())
    if details:
        block += literal(b"grpc-message", percent_encode(details))
    return RESPONSE_HEAD + block if trailers_only else block


def percent_encode(text: str) -> bytes:
    raw = text.encode("utf-8", "replace")
    if _NOT_PLAIN.search(raw) is None:
        return raw
    return _NOT_PLAIN.sub(lambda match: b"%%%02X" % match.group()[0], raw)


def parse_timeout(value: bytes) -> float | None:
    """Seconds of a grpc-timeout value ("100m", "5S"); None when it is malformed (then ignored)."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


def metadata(headers: list[tuple[bytes, bytes]]) -> tuple[tuple[str, str | bytes], ...]:
    """Custom metadata and user-agent, as grpc.aio's invocation_metadata(): -bin values decoded."""
    pairs: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name.startswith(b":") or name in _RESERVED:
            continue
        key = name.decode("latin-1")
        if key.endswith("-bin"):
            pairs.append((key, base64.b64decode(value + b"=" * (-len(value) % 4))))
        else:
            pairs.append((key, value.decode("utf-8", "replace")))
    return tuple(pairs)


def supported_encoding(encoding: bytes) -> bool:
    return encoding in _WBITS or encoding == b"identity"


def decompress(encoding: bytes, data: bytes, limit: int) -> bytes:
    """A compressed message's bytes; CallError when it is corrupt or inflates beyond `limit`."""
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise CallError(
            grpc.StatusCode.INTERNAL, "Compressed message flag set without a grpc-encoding to decode it"
        )
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CallError(grpc.StatusCode.INTERNAL, f"Could not decompress the message: {exc}") from None
    if len(out) > limit:
        raise CallError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Received message larger than max (more than {limit} bytes once decompressed)",
        )
    return out
