"""Triton's trace file (`--trace-config triton,file=F`): each group of traces a setting collected is
one JSON array, in `F.0`, `F.1`, ... (log-frequency, count) or, with log-frequency 0, appended to one
array in `F` itself, closed when the server stops.

Serialising and writing happen on one writer thread, off every request's path: a request's part ends
when its finished trace is queued."""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import threading
from pathlib import Path

from server.protocol.trace import Trace
from server.tracing.triton_json import trace_group

log = logging.getLogger("tcli.server.trace")


class TraceFile:
    """One trace file name and its writer thread; settings that name the same file share it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._index = itertools.count()
        self._open: object | None = None  # the unindexed file, once its array is started
        self._queue: queue.SimpleQueue[tuple[list[Trace], bool, bool] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def save(self, traces: list[Trace], timestamps: bool, indexed: bool) -> None:
        """Write `traces` as one group: a new indexed file, or onto the unindexed one."""
        if not traces:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write_forever, name="tcli-trace-file", daemon=True
                )
                self._thread.start()
        self._queue.put((traces, timestamps, indexed))

    def close(self) -> None:
        """Write what is queued, close the unindexed file's array, stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(None)  # the end
        thread.join(30)

    def _write_forever(self) -> None:
        unindexed = None
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                traces, timestamps, indexed = job
                try:
                    body = ",".join(
                        json.dumps(entry, separators=(",", ":"))
                        for t in traces
                        for entry in trace_group(t, timestamps)
                    )
                    if indexed:  # whole or not at all: a reader never sees half a file
                        path = Path(f"{self.name}.{next(self._index)}")
                        partial = path.with_name(f".{path.name}.partial")
                        partial.write_text(f"[{body}]")
                        os.replace(partial, path)
                    else:
                        if unindexed is None:
                            unindexed = open(self.name, "w")  # noqa: SIM115 - open until the server stops
                            unindexed.write("[")
                        else:
                            unindexed.write(",")
                        unindexed.write(body)
                        unindexed.flush()
                except OSError as exc:
                    log.error("failed creating trace file: %s", exc)
        finally:
            if unindexed is not None:
                unindexed.write("]")
                unindexed.close()
