"""HTTP/1.1 response bytes the front end's protocol writes: status lines, the head of a response
from an ASGI `http.response.start`, and the server's own short answers (400, 431, 500, 100 Continue)."""

from __future__ import annotations

import http

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
HEAD_END = b"\r\n\r\n"


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINE = {status: _status_line(status) for status in range(100, 600)}

# a name is a token; a value never breaks the line (no CR, LF or other control but tab)
_NAME_FORBIDDEN = frozenset(
    b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13"
    b'\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f()<>@,;:\\"/[]?={} '
)
_VALUE_FORBIDDEN = frozenset(range(0x20)) - {0x09} | {0x7F}


class ResponseHead:
    """What an ASGI response's head says about how its body is framed, and its bytes."""

    __slots__ = ("bodiless", "chunked", "closes", "data", "length")

    def __init__(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...],
        keep_alive: bool,
        bodiless: bool,
        http10: bool,
    ) -> None:
        parts = [STATUS_LINE[status] if 100 <= status < 600 else _invalid_status(status)]
        length: int | None = None
        chunked = False
        closes = not keep_alive
        said_close = False
        for name, value in headers:
            name = name.lower()
            if not name or not _NAME_FORBIDDEN.isdisjoint(name) or not _VALUE_FORBIDDEN.isdisjoint(value):
                raise RuntimeError(f"invalid HTTP response header {name!r}: {value!r}")
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.strip().lower() == b"chunked"
            elif name == b"connection" and b"close" in (t.strip() for t in value.lower().split(b",")):
                closes = said_close = True
            parts += (name, b": ", value, b"\r\n")
        self.bodiless = bodiless or status < 200 or status in (204, 304)
        if self.bodiless:
            length, chunked = 0, False  # nothing follows the head, whatever Content-Length says
        elif length is None and not chunked:
            if http10:  # HTTP/1.0 knows no chunks: the body ends where the connection does
                closes = True
            else:
                chunked = True
                parts.append(b"transfer-encoding: chunked\r\n")
        if closes and not said_close:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        self.data = b"".join(parts)
        self.length = length  # None: chunked, or delimited by the connection's close
        self.chunked = chunked
        self.closes = closes


def _invalid_status(status: int) -> bytes:
    raise RuntimeError(f"invalid HTTP status {status!r}")


def chunk(body: bytes, last: bool) -> bytes:
    """A body piece in chunked transfer coding; `last` adds the terminating zero-length chunk."""
    if not body:
        return b"0\r\n\r\n" if last else b""
    data = b"%x\r\n%s\r\n" % (len(body), body)
    return data + b"0\r\n\r\n" if last else data


def plain_response(status: int, message: str) -> bytes:
    """A short text answer the server gives itself (a malformed request, an app that failed), after
    which it closes the connection."""
    body = message.encode()
    return (
        b"%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
        % (
            STATUS_LINE[status],
            len(body),
            body,
        )
    )
