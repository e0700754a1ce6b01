"""The few ModelInferRequest and ModelStreamInferResponse fields the load generator touches, as
protobuf by hand: the three sequence parameters appended to a pre-serialized request, and the error
message of a stream response. Standard library only, so that a worker process starts cheaply.
"""

from __future__ import annotations


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _parameter(key: bytes, value: bytes) -> bytes:
    """One `map<string, InferParameter> parameters = 4` entry."""
    entry = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value
    return b"\x22" + _varint(len(entry)) + entry


def grpc_sequence_parameters(sequence_id: int, start: bool, end: bool) -> bytes:
    """sequence_id (int64_param = 2), sequence_start and sequence_end (bool_param = 1), serialized as
    ModelInferRequest fields: appended to a serialized request, protobuf merges them in."""
    return (
        _parameter(b"sequence_id", b"\x10" + _varint(sequence_id))
        + _parameter(b"sequence_start", b"\x08" + (b"\x01" if start else b"\x00"))
        + _parameter(b"sequence_end", b"\x08" + (b"\x01" if end else b"\x00"))
    )


def grpc_error(response: bytes) -> str | None:
    """ModelStreamInferResponse.error_message (field 1) when set: the first field on the wire."""
    if not response or response[0] != 0x0A:
        return None
    length, shift, index = 0, 0, 1
    while True:
        byte = response[index]
        length |= (byte & 0x7F) << shift
        index += 1
        if not byte & 0x80:
            break
        shift += 7
    return response[index : index + length].decode("utf-8", "replace")
