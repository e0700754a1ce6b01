"""One trace setting in force (the global one, or a model's): which requests it samples and where their
traces go. As in Triton, a change of settings replaces the object rather than editing it, so a trace
sampled under the old setting finishes under it; the old one writes what it still holds when retired.

Sampling follows Triton: every `rate`-th request the setting sees is traced, while `count` (-1: no
limit) allows; traces are written every `log_frequency` collected ones to an indexed file (0: all
into the unindexed file when the setting retires), and all at once when `count` runs out (to the
unindexed file without a log frequency, as Triton 2.51 does)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.protocol.trace import Trace
    from server.tracing.trace_file import TraceFile


@dataclass(frozen=True)
class SettingValues:
    """A setting as the trace settings API shows it, parsed."""

    level: tuple[str, ...]  # ("OFF",) or some of ("TIMESTAMPS", "TENSORS")
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: str

    @classmethod
    def of(cls, values: dict[str, Any]) -> SettingValues:
        """From the strings the API answers (server/service.py's trace values)."""
        return cls(
            tuple(values["trace_level"]),
            int(values["trace_rate"]),
            int(values["trace_count"]),
            int(values["log_frequency"]),
            values["trace_file"],
            values["trace_mode"],
        )


class TraceSetting:
    """A `TraceSink` (server/protocol/trace.py) for the traces it samples: ids from the server's one
    sequence; finished traces to its file, or to `export` (OpenTelemetry mode)."""

    def __init__(
        self,
        values: SettingValues,
        ids: Iterator[int],
        file: TraceFile | None,
        export: Callable[[Trace], None] | None = None,
    ) -> None:
        self.values = values
        self.file = file
        self._ids = ids
        self._export = export
        self.tensors = "TENSORS" in values.level
        self.timestamps = "TIMESTAMPS" in values.level
        triton_mode = values.mode == "triton"
        self.valid = values.level != ("OFF",) and values.rate > 0 and (not triton_mode or bool(values.file))
        # OpenTelemetry mode traces requests that carry a client's context even at rate 0
        self.propagates = values.mode == "opentelemetry" and export is not None and values.level != ("OFF",)
        self.active = self.valid or self.propagates  # whether any request may be traced
        self._count = values.count
        self._lock = threading.Lock()
        self._seen = 0  # requests this setting was asked about
        self._created = 0  # traces it started while `count` was limited
        self._collected = 0
        self._held: list[Trace] = []  # collected, not yet written

    def sample(self) -> bool:
        """Whether the request this setting is asked about now is to be traced."""
        with self._lock:
            if not self.valid or self._count == 0:
                return False
            self._seen += 1
            if self._seen % self.values.rate:
                return False
            if self._count > 0:
                self._count -= 1
                self._created += 1
            return True

    @property
    def count_left(self) -> int:
        return self._count

    def next_id(self) -> int:
        return next(self._ids)

    def collect(self, trace: Trace) -> None:
        """A finished trace: exported, or held and written when a group is complete."""
        if self._export is not None:
            self._export(trace)
            return
        with self._lock:
            self._held.append(trace)
            self._collected += 1
            frequency = self.values.log_frequency
            count_done = self._count == 0 and self._collected >= self._created
            if not (count_done or (frequency and len(self._held) >= frequency)):
                return
            group, self._held = self._held, []
        if self.file is not None:  # Triton 2.51 writes a finished count to F itself without a frequency
            self.file.save(group, self.timestamps, indexed=frequency != 0)

    def retire(self) -> None:
        """Replaced or stopping: write what is held (indexed when log_frequency is set, as Triton)."""
        with self._lock:
            group, self._held = self._held, []
        if self.file is not None:
            self.file.save(group, self.timestamps, indexed=self.values.log_frequency != 0)
