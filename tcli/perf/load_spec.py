"""What passes between the parent and a load generator process: the LoadSpec the parent sends (with
HttpRequestParts, the per-step HTTP encoding of sequence data), the clock both sides stamp times with,
and RequestFailed, the one way a request fails inside a worker (counted there; the first message is
reported to the parent).

Standard library only: the parent (tcli/perf/encode.py, tcli/perf/profiler.py) and every worker
process import this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tcli.client.tls import ClientTls

now_ns = time.monotonic_ns  # CLOCK_MONOTONIC: one clock for every process on the machine


@dataclass
class HttpRequestParts:
    """One data step, encoded for HTTP: the JSON header without its closing brace and the binary
    tensors that follow it. Sequence parameters are appended to the header per request."""

    header_open: bytes  # b'{"inputs":[...],"parameters":{"binary_data_output":true'
    blob: bytes


@dataclass
class LoadSpec:
    protocol: str  # "http" | "grpc"
    host: str
    port: int
    # HTTP: "POST <path> HTTP/1.1" and the fixed header lines (Host, Content-Type, -H ...)
    http_path: str = ""
    http_headers: list[tuple[str, str]] = field(default_factory=list)
    # gRPC: metadata (-H) and whether to use ModelStreamInfer (one bidirectional stream per slot)
    grpc_metadata: list[tuple[str, str]] = field(default_factory=list)
    streaming: bool = False
    grpc_client: str = "raw"  # "raw": tcli's own HTTP/2 driver; "grpcio": grpc.aio (for comparison)
    # Non-sequence models: complete requests, sent round robin (HTTP: whole HTTP messages; gRPC:
    # serialized ModelInferRequest messages)
    requests: list[bytes] = field(default_factory=list)
    # Sequence models: streams of steps (HTTP: HttpRequestParts; gRPC: serialized messages without the
    # sequence parameters). A new sequence takes the next stream; its requests take its steps in turn.
    sequence_streams: list[list[Any]] = field(default_factory=list)
    sequence_length: int = 20
    sequence_length_variation: float = 20.0  # percent
    sequence_length_from_data: bool = False  # no --sequence-length with user data: a stream per sequence
    sequence_id_start: int = 1
    sequence_id_end: int = 0  # exclusive; 0 = unbounded
    sequence_id_offset: int = 0  # this worker's first id is start + offset; ids step by sequence_id_stride
    sequence_id_stride: int = 1
    num_of_sequences: int = 4  # request-rate mode
    seed: int = 0
    timeout_s: float = 60.0
    # TLS: perf_analyzer's --ssl-* options (gRPC over TLS; HTTPS for an https:// -u)
    tls: ClientTls | None = None
    https: bool = False


class RequestFailed(Exception):
    """A request without a good answer: the worker counts it and keeps the first message."""
