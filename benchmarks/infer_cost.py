"""What one HTTP inference costs tcli without a socket: `HttpFrontend.infer_direct` (decode, checks,
the model, encode) called in a loop on the python `add_sub` example, in µs per request; `--profile`
adds cProfile's table. For changes on the request path too small for perf_analyzer to resolve here.

    python benchmarks/infer_cost.py [--requests 20000] [--profile [tottime|cumulative]]

To A/B a change, run it alternately from two source trees (PYTHONPATH=DIR python benchmarks/...).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "model_repository" / "add_sub"


def request_body() -> tuple[bytes, int]:
    """add_sub's request as perf_analyzer sends it: binary inputs, binary outputs asked for."""
    names = ("INPUT0", "INPUT1")
    header = {
        "inputs": [
            {"name": n, "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}
            for n in names
        ],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")],
    }
    head = json.dumps(header).encode()
    return head + np.arange(4, dtype=np.float32).tobytes() + np.ones(4, dtype=np.float32).tobytes(), len(head)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--profile", nargs="?", const="tottime", choices=("tottime", "cumulative"))
    args = parser.parse_args()

    from server.app import Server, ServerSettings
    from server.frontends.http.app import create_http_app
    from server.frontends.http.direct import InferHeaders

    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch)
        shutil.copytree(EXAMPLE, repo / "add_sub")
        settings = ServerSettings([repo], allow_http=False, allow_grpc=False, allow_metrics=False)
        server = Server(settings).start()
        try:
            frontend = create_http_app(server.service)
            body, head_length = request_body()
            headers = InferHeaders(len(body), str(head_length).encode())

            async def run(count: int) -> None:
                for _ in range(count):
                    status, _, payload = await frontend.infer_direct("add_sub", "", headers, body)
                    if status != 200:
                        sys.exit(f"add_sub answered {status}: {payload.decode(errors='replace')}")

            async def measure() -> None:
                await run(args.requests // 10)  # warm-up
                started = time.perf_counter()
                await run(args.requests)
                print(f"{(time.perf_counter() - started) / args.requests * 1e6:.1f} µs per infer_direct")
                if args.profile:
                    profile = cProfile.Profile()
                    profile.enable()
                    await run(args.requests)
                    profile.disable()
                    pstats.Stats(profile).sort_stats(args.profile).print_stats(30)

            asyncio.run(measure())
        finally:
            server.stop()


if __name__ == "__main__":
    main()
