"""Per-model time spent in each phase of a request, from Triton's trace file (tcli's or Triton's own:
the format is the same). The phases are the spans between Triton's timestamps:

| phase | from | to |
|---|---|---|
| network in | HTTP_RECV_START / GRPC_WAITREAD_START | HTTP_RECV_END / GRPC_WAITREAD_END |
| queue | QUEUE_START | COMPUTE_START |
| compute input | COMPUTE_START | COMPUTE_INPUT_END |
| infer | COMPUTE_INPUT_END | COMPUTE_OUTPUT_START |
| compute output | COMPUTE_OUTPUT_START | COMPUTE_END |
| network out | each HTTP_SEND_START / GRPC_SEND_START | its ..._SEND_END (summed over a stream's sends) |

A trace without a phase's stamps (an ensemble's step has no network; an ensemble no compute) does
not count towards that phase. gRPC's wait/read includes the wait for the client's request, as
Triton's trace_summary.py warns."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tcli.errors import CliError

PHASES = ("network_in", "queue", "compute_input", "infer", "compute_output", "network_out")
PHASE_TITLES = {
    "network_in": "network in",
    "queue": "queue",
    "compute_input": "compute input",
    "infer": "infer",
    "compute_output": "compute output",
    "network_out": "network out",
}
_SPANS = {
    "queue": ("QUEUE_START", "COMPUTE_START"),
    "compute_input": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "infer": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "compute_output": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
}
_IN = (("HTTP_RECV_START", "HTTP_RECV_END"), ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"))
_OUT = (("HTTP_SEND_START", "HTTP_SEND_END"), ("GRPC_SEND_START", "GRPC_SEND_END"))


@dataclass
class ModelPhases:
    model: str
    version: int
    traces: int = 0
    ns: dict[str, list[int]] = field(default_factory=lambda: {p: [] for p in PHASES})


def trace_files(path: Path) -> list[Path]:
    """`path` itself when it exists, and every `path.N` beside it, in index order."""
    indexed = [p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()]
    files = ([path] if path.is_file() else []) + sorted(indexed, key=lambda p: int(p.suffix[1:]))
    if not files:
        raise CliError(
            f"no trace file {path} (nor {path}.0, {path}.1, ...): pass the file given to triton,file="
        )
    return files


def read_entries(path: Path) -> list[dict[str, Any]]:
    """One file's entries. A log-frequency-0 file still being written lacks its closing bracket: read
    what is there."""
    text = path.read_text().strip()
    if not text:
        return []
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        try:
            loaded = json.loads(text + "]")
        except json.JSONDecodeError as exc:
            raise CliError(
                f"{path} is not a Triton trace file (a JSON array of trace entries): {exc}"
            ) from None
    if not isinstance(loaded, list):
        raise CliError(f"{path} is not a Triton trace file: expected a JSON array of trace entries")
    return [e for e in loaded if isinstance(e, dict)]


def summarize(paths: list[Path]) -> list[ModelPhases]:
    """Each model's traces and phase durations, models in name order."""
    identity: dict[tuple[Path, int], tuple[str, int]] = {}
    stamps: dict[tuple[Path, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:  # ids restart when a server restarts: a trace is its file and id
        for entry in read_entries(path):
            key = (path, int(entry.get("id", 0)))
            if "model_name" in entry:
                identity[key] = (str(entry["model_name"]), int(entry.get("model_version", -1)))
            for stamp in entry.get("timestamps", ()):
                stamps[key][stamp["name"]].append(int(stamp["ns"]))
    models: dict[tuple[str, int], ModelPhases] = {}
    for key, (model, version) in identity.items():
        found = models.setdefault((model, version), ModelPhases(model, version))
        found.traces += 1
        taken = stamps.get(key, {})
        for phase, value in _phases(taken).items():
            found.ns[phase].append(value)
    return [models[k] for k in sorted(models)]


def _phases(taken: dict[str, list[int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for start, end in _IN:
        if taken.get(start) and taken.get(end):
            out["network_in"] = taken[end][0] - taken[start][0]
    for phase, (start, end) in _SPANS.items():
        if taken.get(start) and taken.get(end):
            out[phase] = taken[end][0] - taken[start][0]
    for start, end in _OUT:
        pairs = list(zip(taken.get(start, []), taken.get(end, []), strict=False))
        if pairs:
            out["network_out"] = sum(e - s for s, e in pairs)
    return out


def percentile_us(values: list[int], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) / 1000


def as_json(files: list[Path], models: list[ModelPhases]) -> dict[str, Any]:
    return {
        "files": [str(p) for p in files],
        "models": [
            {
                "model": m.model,
                "version": m.version,
                "traces": m.traces,
                "phases_us": {
                    phase: {
                        "count": len(m.ns[phase]),
                        "p50": round(percentile_us(m.ns[phase], 50), 3),
                        "p99": round(percentile_us(m.ns[phase], 99), 3),
                    }
                    for phase in PHASES
                    if m.ns[phase]
                },
            }
            for m in models
        ],
    }
