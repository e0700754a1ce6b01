"""Triton's response cache: a request identical to one answered before gets the stored answer, and
never reaches the scheduler or the model.

The server has a cache when it was started with `--cache-config local,size=<bytes>` (or the older
`--response-cache-byte-size`; parsed in `server/scheduling/cache_config.py`); a model uses it when its
config says `response_cache { enable: true }`. The core service (`server/service.py`) asks `serve`
before it hands a request to the model's runner or ensemble schedule; ensembles cache their
top-level response, as Triton 2.51 does.

The key is a 128-bit BLAKE2b digest of what can change the answer: the model's name and version, the
loaded copy of that version (a reload starts afresh), every input's name, datatype, shape and bytes,
the request parameters but the scheduling ones (priority, timeout), and the outputs asked for. Triton
hashes less (name, version, input names and bytes, into 64 bits): two requests whose inputs differ
only in shape or datatype, or in a parameter a python model reads, share a Triton cache entry, and
get each other's answer there; here they do not.

Memory is bounded by `size` bytes (each entry's output bytes plus a fixed overhead per entry and per
tensor), the least recently used entries evicted first. An answer larger than the whole cache is not
stored (logged once per model version, as Triton logs a failed insert). Only successful answers are
stored. Stored outputs are private copies (a python instance's outputs may sit in a shared-memory ring
that is reused), and each hit hands out copies again, so nobody downstream can change a stored answer.

Concurrent identical requests that all miss each run the model, as in Triton; the last to finish
leaves its answer in the cache. Statistics follow Triton's: a hit counts as a successful request (and
a queue entry of no time) with `cache_hit` recording the lookup time, and is left out of
inference_count, execution_count and the compute durations; a miss records `cache_miss` with the
lookup and insert time.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from server.protocol.tensors import binary_buffer
from server.protocol.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from server.scheduling.stats import ModelStats

log = logging.getLogger("tcli.scheduling")

# parameters that only say when or how urgently to run the request, never what it computes
_SCHEDULING_PARAMETERS = frozenset({"priority", "timeout"})
# bookkeeping charged per entry and per tensor on top of the data bytes: the key, the response and
# tensor objects, names and shapes
ENTRY_OVERHEAD = 256
TENSOR_OVERHEAD = 128


@dataclass(frozen=True, slots=True)
class CacheSummary:
    """The cache as a whole, for the nv_cache_* gauges."""

    size: int  # capacity in bytes
    used: int  # bytes held by entries
    entries: int
    hits: int
    misses: int
    evictions: int
    lookup_ns: int  # hits and misses
    insert_ns: int


@dataclass(slots=True)
class _Entry:
    response: InferenceResponse
    nbytes: int
    owner: weakref.ref[Any]  # the loaded version (VersionEntry) that answered; a reload is a new one


def request_key(request: InferenceRequest, model_name: str, version: int) -> bytes:
    """The digest of everything in `request` that can change the model's answer."""
    digest = hashlib.blake2b(digest_size=16)
    inputs = sorted(request.inputs, key=lambda tensor: tensor.name)
    parameters = sorted(
        (key, type(value).__name__, str(value))
        for key, value in request.parameters.items()
        if key not in _SCHEDULING_PARAMETERS
    )
    outputs = sorted(output.name for output in request.outputs)
    # shapes as plain ints: a front end may give numpy integers, and HTTP and gRPC must share entries
    shapes = [(t.name, t.datatype, tuple(int(d) for d in t.shape)) for t in inputs]
    header = (model_name, version, shapes, parameters, outputs)
    digest.update(repr(header).encode())
    for tensor in inputs:
        data, size = binary_buffer(tensor)
        digest.update(size.to_bytes(8, "little"))  # each input's bytes delimited from the next one's
        digest.update(data)
    return digest.digest()


def _tensor_bytes(tensor: Tensor) -> int:
    data = tensor.data
    if tensor.datatype == "BYTES":
        return sum(len(item) + 4 for item in np.asarray(data, dtype=object).reshape(-1))
    return int(np.asarray(data).nbytes)


def _copy(response: InferenceResponse) -> InferenceResponse:
    outputs = [
        Tensor(t.name, t.datatype, tuple(t.shape), np.array(t.data, copy=True), dict(t.parameters))
        for t in response.outputs
    ]
    return InferenceResponse(
        response.model_name, response.model_version, "", outputs, dict(response.parameters)
    )


class ResponseCache:
    """Triton's `local` cache: responses by request key, at most `size` bytes, least recently used
    evicted first. An OrderedDict in recency order is the whole LRU (cachetools' LRUCache would do
    the same, at the price of a new dependency for a dozen lines). Used from the event loop; the lock
    keeps a metrics scrape from another thread consistent."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0
        self._lookup_ns = self._insert_ns = 0
        self._too_large_logged: set[tuple[str, str]] = set()

    def lookup(self, key: bytes, owner: object) -> InferenceResponse | None:
        """A copy of the stored answer for `key` from this loaded version, or None."""
        start = time.monotonic_ns()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.owner() is not owner:  # stored before a reload: stale
                self._drop(key)
                entry = None
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
            else:
                self._misses += 1
            self._lookup_ns += time.monotonic_ns() - start
        return _copy(entry.response) if entry is not None else None

    def insert(self, key: bytes, response: InferenceResponse, owner: object) -> bool:
        """Store a copy of `response`; False when it is larger than the whole cache."""
        start = time.monotonic_ns()
        nbytes = ENTRY_OVERHEAD + sum(TENSOR_OVERHEAD + _tensor_bytes(t) for t in response.outputs)
        if nbytes > self.size:
            self._log_too_large(response, nbytes)
            return False
        stored = _Entry(_copy(response), nbytes, weakref.ref(owner))
        with self._lock:
            if key in self._entries:
                self._drop(key)
            while self._used + nbytes > self.size:
                oldest = next(iter(self._entries))
                self._drop(oldest)
                self._evictions += 1
            self._entries[key] = stored
            self._used += nbytes
            self._insert_ns += time.monotonic_ns() - start
        return True

    def _drop(self, key: bytes) -> None:
        self._used -= self._entries.pop(key).nbytes

    def _log_too_large(self, response: InferenceResponse, nbytes: int) -> None:
        model = (response.model_name, response.model_version)
        if model not in self._too_large_logged:
            self._too_large_logged.add(model)
            log.warning(
                "Failed to insert key into response cache: the response of model '%s' version %s "
                "takes %d bytes, more than the whole cache (%d bytes); raise --cache-config "
                "local,size=... to cache it (further ones of this model are not logged)",
                *model,
                nbytes,
                self.size,
            )

    def keys(self) -> list[bytes]:
        """Keys from least to most recently used."""
        with self._lock:
            return list(self._entries)

    def summary(self) -> CacheSummary:
        with self._lock:
            return CacheSummary(
                self.size,
                self._used,
                len(self._entries),
                self._hits,
                self._misses,
                self._evictions,
                self._lookup_ns,
                self._insert_ns,
            )

    async def serve(
        self,
        request: InferenceRequest,
        version: int,
        owner: object,
        stats: ModelStats,
        run: Callable[[], Awaitable[InferenceResponse]],
    ) -> InferenceResponse:
        """The stored answer to `request`, or `run()`'s, stored for next time. `owner` is the loaded
        version answering (a VersionEntry), `stats` its statistics."""
        start = time.monotonic_ns()
        key = request_key(request, request.model_name, version)
        cached = self.lookup(key, owner)
        looked_up = time.monotonic_ns()
        if cached is not None:
            cached.model_version = str(version)
            stats.record_cache_hit(looked_up - start, looked_up - start)
            return cached
        response = await run()  # a failure raises: nothing stored, no miss recorded (as in Triton)
        inserted_from = time.monotonic_ns()
        self.insert(key, response, owner)
        stats.record_cache_miss(looked_up - start + time.monotonic_ns() - inserted_from)
        return response
