"""HTTP request and response bodies: the size limit (--http-max-input-size) and the content codings
Triton accepts on requests (gzip, deflate) and applies to inference responses (Accept-Encoding)."""

from __future__ import annotations

import zlib

from server.protocol.errors import TritonError, invalid_arg


def too_large(size: int, limit: int, json_only: bool) -> TritonError:
    # current Triton's words (lower case, "input size"), which its qa (L0_http) looks for
    what = "request JSON size" if json_only else "request size"
    return invalid_arg(
        f"{what} of {size} bytes exceeds the maximum allowed input size of {limit} bytes. Use "
        "--http-max-input-size to increase the limit."
    )


def response_encoding(accept_encoding: str) -> str:
    """Triton's choice from an Accept-Encoding list: the highest q among gzip, deflate and identity
    (the first wins a tie); 'identity' when nothing usable is offered."""
    chosen, weight = "identity", 0.0
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip()
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                continue
        if coding in ("gzip", "deflate", "identity") and quality > weight:
            chosen, weight = coding, quality
    return chosen


def decompress(body: bytes | bytearray, encoding: str, limit: int) -> bytes:
    """gzip or deflate (a zlib stream, as Triton and tritonclient use; raw deflate is accepted too),
    never inflating beyond `limit` bytes."""
    attempts = (31,) if encoding == "gzip" else (15, -15)
    last_error: Exception | None = None
    for wbits in attempts:
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error as exc:
            last_error = exc
            continue
        if len(data) > limit or inflater.unconsumed_tail:
            raise too_large(len(data), limit, json_only=False)
        return data
    raise invalid_arg(f"unable to decompress the request body ({encoding}): {last_error}")


def compress(body: bytes, encoding: str) -> bytes:
    return zlib.compress(body, wbits=31 if encoding == "gzip" else 15)
