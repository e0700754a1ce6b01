"""Scenario 9 [inprocess]: one add_sub inference in-process against the same over HTTP, in the same
run. In-process is `tcli.inprocess` (`model.infer` in the caller's own process, no socket); HTTP is
tritonclient.http against `tcli serve` on loopback, the way a program calls a local server. Same
repository, same model config (a python instance in a process of its own, tcli's default), one request
at a time; each side runs in a fresh client process, the sides alternating (A B, B A). The row gives
µs per inference and requests/s for each, and the ratio HTTP time / in-process time (above 1: the
in-process call is faster). Info only: there is no target.

    python benchmarks/inprocess.py [--requests 2000] [--rounds 2]   # this scenario alone
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context, interleaved
from benchmarks.harness import Server, Windows, log, start_tcli
from benchmarks.repos import copy_examples
from benchmarks.table import Row, render

MODEL = "add_sub"

# each side: warm up, then `count` sequential inferences checked and timed; prints µs per inference
_COMMON = """
import json, sys, time
import numpy as np
target, count = sys.argv[1], int(sys.argv[2])
a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
def timed(once):
    for _ in range(max(count // 10, 10)):
        once()
    began = time.perf_counter()
    for _ in range(count):
        once()
    print(json.dumps((time.perf_counter() - began) / count * 1e6))
"""
IN_PROCESS = (
    _COMMON
    + """
import tcli.inprocess as tritonserver
mode = tritonserver.ModelControlMode.EXPLICIT
with tritonserver.Server(model_repository=target, model_control_mode=mode, startup_models=["add_sub"]) as server:
    model = server.model("add_sub")
    def once():
        (response,) = model.infer(inputs={"INPUT0": a, "INPUT1": b})
        assert np.from_dlpack(response.outputs["OUTPUT0"])[1] == 2.0
    timed(once)
"""
)
OVER_HTTP = (
    _COMMON
    + """
import tritonclient.http as httpclient
client = httpclient.InferenceServerClient(target)
inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(b)
def once():
    assert client.infer("add_sub", inputs).as_numpy("OUTPUT0")[1] == 2.0
timed(once)
client.close()
"""
)


def _side(script: str, target: str, count: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", script, target, str(count)], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {MODEL} client failed:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def rows(ctx: Context, count: int | None = None) -> list[Row]:
    repo = ctx.workdir / "inprocess-repo"
    copy_examples(repo, (MODEL,))
    count = count or ctx.pick(2000, 300)
    server: Server = start_tcli([repo], ctx.workdir / "tcli-inprocess.log")
    try:
        server.wait()
        inside, http = interleaved(
            [
                lambda: _side(IN_PROCESS, str(repo), count),
                lambda: _side(OVER_HTTP, server.address("http"), count),
            ],
            ctx.rounds,
        )
    finally:
        server.stop()
    us_in, us_http = statistics.median(inside), statistics.median(http)
    return [
        Row(
            f"10 one {MODEL} inference in-process vs over HTTP (c=1)",
            f"{us_in:.0f} µs ({1e6 / us_in:.0f}/s) in-process",
            f"{us_http:.0f} µs ({1e6 / us_http:.0f}/s) HTTP",
            us_http / us_in,
            "info",
            None,
            f"{count} sequential requests per run, median of {len(inside)} runs per side; ratio: HTTP time / in-process time",
            {"in-process µs": inside, "http µs": http},
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests per run")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcli-bench-") as tmp:
        ctx = Context(quick=False, workdir=Path(tmp), windows=Windows(1000), rounds=args.rounds)
        found = rows(ctx, args.requests)
    log("done")
    render(found, "in-process against HTTP")


if __name__ == "__main__":
    main()
