"""Scenario 13c [hop], where an instance process's CPU per add_sub request goes (issue 27): the steps
of the instance's loop, each timed with `time.thread_time_ns()` (this thread's CPU, not the wall), as
`process_worker._execute` runs them:
- read: the blocking read of the pipe that wakes the instance (the CPU it spends, not the wait);
- decode: the EXEC frame into requests (`hop_frames.decode_exec`);
- execute: the requests built and run through pb_utils and the model's execute();
- encode: the results into a DONE frame (`hop_frames.encode_results`);
- write: the write that wakes the server.
Two ways: "woken", where each request arrives on the pipe from another process after a pause (the
client's round trip, `--gap-us`), so that the instance sleeps between requests as it does under one
client; and "hot", the same frame handled again at once, in a loop. The difference is what a wake-up
costs beyond the work itself: caches and branch predictors cold after the sleep. Row 13b's goal (80
µs per request) needs the woken figure, the only one a server with one client sees.

    .venv/bin/python benchmarks/hop_breakdown.py [--requests 3000] [--gap-us 500]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context
from benchmarks.harness import log
from benchmarks.repos import EXAMPLES
from benchmarks.table import Row
from server.backends.python import hop_frames
from server.backends.python.host import HostSpec, PythonModel
from server.config.parse import read_config
from server.protocol.config_json import to_json_dict
from server.protocol.types import InferenceRequest, Tensor

STEPS = ("read", "decode", "execute", "encode", "write")
WARM_UP = 300


@dataclass(frozen=True)
class Breakdown:
    """Median µs of CPU per request for each step, woken and hot."""

    woken: dict[str, float]
    hot: dict[str, float]

    @staticmethod
    def total(steps: dict[str, float]) -> float:
        return sum(steps.values())


def _add_sub() -> PythonModel:
    """The example add_sub, hosted as its instance process hosts it."""
    folder = EXAMPLES / "add_sub"
    config = to_json_dict(read_config(folder / "config.pbtxt")[0])
    config["name"] = "add_sub"
    args = {
        "model_config": json.dumps(config),
        "model_instance_kind": "CPU",
        "model_instance_name": "add_sub_0",
        "model_instance_device_id": "0",
        "model_repository": str(folder),
        "model_version": "1",
        "model_name": "add_sub",
    }
    spec = HostSpec("add_sub", "1", str(folder / "1" / "model.py"), str(folder / "1"), config, args)
    return PythonModel(spec)


def _frame() -> bytes:
    """An EXEC frame of one add_sub request, as the server encodes it (inputs in the frame)."""
    inputs = [Tensor(n, "FP32", (4,), np.ones(4, np.float32)) for n in ("INPUT0", "INPUT1")]
    request = InferenceRequest("add_sub", "1", "", inputs, [], {})
    return hop_frames.encode_exec(1, [request], False, hop_frames.INLINE)


def _handle(model: PythonModel, frame: bytearray) -> tuple[int, int, int, bytes]:
    """decode, execute, encode: each step's CPU in ns, and the DONE frame."""
    began = time.thread_time_ns()
    batch = hop_frames.decode_exec(frame, lambda _name: None)
    decoded = time.thread_time_ns()
    requests = [
        InferenceRequest(model.name, model.version, r.id, r.inputs, r.outputs, r.parameters)
        for r in batch.requests
    ]
    results = model.execute_channels(requests, None)
    executed = time.thread_time_ns()
    done = hop_frames.encode_results(hop_frames.DONE, batch.batch_id, 0, False, results, hop_frames.INLINE)
    encoded = time.thread_time_ns()
    return decoded - began, executed - decoded, encoded - executed, done


def _pacer(frame: bytes, ask: int, answer: int, count: int, gap_s: float) -> None:
    """The server's side, in a process of its own: after each answer, a pause, then the next frame."""
    for _ in range(count):
        time.sleep(gap_s)
        os.write(answer, frame)
        os.read(ask, 1 << 16)
    os._exit(0)


def _medians(samples: list[tuple[int, ...]]) -> dict[str, float]:
    return {step: statistics.median(s[i] for s in samples) / 1000 for i, step in enumerate(STEPS)}


def measure(requests: int, gap_us: float) -> Breakdown:
    model = _add_sub()
    frame = _frame()
    gc.freeze()  # as the instance process does after initialize()
    for _ in range(WARM_UP):
        _handle(model, bytearray(frame))
    hot: list[tuple[int, ...]] = []
    for _ in range(requests):
        decode, execute, encode, _ = _handle(model, bytearray(frame))
        hot.append((0, decode, execute, encode, 0))

    to_instance, from_pacer = os.pipe()  # the pacer writes frames, the instance reads them
    from_instance, to_pacer = os.pipe()  # the instance writes answers, the pacer reads them
    total = WARM_UP + requests
    pacer = os.fork()
    if pacer == 0:
        os.close(to_instance)
        os.close(to_pacer)
        _pacer(frame, from_instance, from_pacer, total, gap_us / 1e6)
    os.close(from_pacer)
    os.close(from_instance)
    woken: list[tuple[int, ...]] = []
    chunk = memoryview(bytearray(1 << 18))  # read into, as the instance's MessageReader does
    for index in range(total):
        began = time.thread_time_ns()
        size = os.readv(to_instance, (chunk,))
        arrived = time.thread_time_ns()
        decode, execute, encode, done = _handle(model, bytearray(chunk[:size]))
        written = time.thread_time_ns()
        os.write(to_pacer, done)
        after = time.thread_time_ns()
        if index >= WARM_UP:
            woken.append((arrived - began, decode, execute, encode, after - written))
    os.waitpid(pacer, 0)
    os.close(to_instance)
    os.close(to_pacer)
    model.unload()
    return Breakdown(_medians(woken), _medians(hot))


def rows(ctx: Context) -> list[Row]:
    count = ctx.pick(3000, 1000)
    log(f"hop breakdown: add_sub's steps in this process, {count:,} requests woken by a pipe, then hot")
    result = measure(count, 500.0)
    woken, hot = Breakdown.total(result.woken), Breakdown.total(result.hot)
    steps = ", ".join(f"{s} {result.woken[s]:.0f}/{result.hot[s]:.0f}" for s in STEPS)
    return [
        Row(
            "13c hop: instance loop per add_sub request, woken vs hot",
            f"{woken:,.0f} µs",
            f"{hot:,.0f} µs (hot loop)",
            woken / hot if hot else None,
            "info",
            None,
            f"median thread CPU per step, woken/hot µs: {steps}; one request every 500 µs",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--gap-us", type=float, default=500.0, help="pause before each woken request")
    args = parser.parse_args()
    result = measure(args.requests, args.gap_us)
    print(f"{'step':10s} {'woken µs':>9s} {'hot µs':>9s} {'ratio':>6s}")
    for step in STEPS:
        woken, hot = result.woken[step], result.hot[step]
        ratio = f"{woken / hot:6.1f}" if hot else "     —"
        print(f"{step:10s} {woken:9.1f} {hot:9.1f} {ratio}")
    woken_total, hot_total = Breakdown.total(result.woken), Breakdown.total(result.hot)
    print(f"{'total':10s} {woken_total:9.1f} {hot_total:9.1f} {woken_total / hot_total:6.1f}")


if __name__ == "__main__":
    main()
