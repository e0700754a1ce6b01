"""Server CPU per request of the HTTP server alone: `serve_http` with a stub app that answers at once
(no model, no codec), driven over loopback by a small keep-alive client, for the fast path (POST
/v2/models/m/infer, answered by `infer_direct`) and the ASGI path, at concurrency 1 and 8. The
server's CPU time (psutil) per request is robust on a shared, noisy machine; the requests/s column
compares only within one sitting.

    python benchmarks/http_transport_cost.py [--rounds 4] [--requests 20000] [DIR ...]

Each DIR is a source tree whose server/ is measured (default: this one); with two or more, each
round runs them alternately, in alternating order (e.g. a `git worktree add /tmp/old COMMIT`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

BODY = b'{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}'
ANSWER = (
    b'{"model_name":"m","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[1,4],"data":[1,2,3,4]}]}'
)
TARGETS = ("/v2/models/m/infer", "/asgi")
LEVELS = (1, 8)


class StubApp:
    """An ASGI app with the fast path's interface, answering ANSWER at once either way."""

    max_input_size = 1 << 26
    restricted_inference = None

    def infer_target(self, path: bytes) -> tuple[str, str] | None:
        return ("m", "") if path == b"/v2/models/m/infer" else None

    async def infer_direct(self, model: str, version: str, headers: Any, body: Any) -> tuple[int, Any, bytes]:
        return 200, [(b"content-type", b"application/json")], ANSWER

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})


def serve() -> None:
    """The child: serve StubApp on a free port, print it, stop when stdin closes."""
    import uvloop

    from server.frontends.http.server import serve_http

    async def main() -> None:
        handle = await serve_http(StubApp(), "127.0.0.1", 0)
        print(handle.port, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await handle.shutdown()

    uvloop.run(main())


async def drive(port: int, concurrency: int, requests: int, target: str) -> None:
    head = f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    request = f"{head}Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(requests // concurrency):
            writer.write(request)
            answer = await reader.readuntil(b"\r\n\r\n")
            at = answer.lower().index(b"content-length: ") + 16
            await reader.readexactly(int(answer[at : answer.index(b"\r\n", at)]))
        writer.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))


def measure(tree: Path, concurrency: int, requests: int, target: str) -> tuple[float, float]:
    """(server CPU µs per request, requests/s) of one fresh server from `tree`."""
    import uvloop

    env = dict(os.environ, PYTHONPATH=str(tree))
    child = subprocess.Popen(
        [sys.executable, "-P", __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        process = psutil.Process(child.pid)
        uvloop.run(drive(port, concurrency, 200, target))  # warm up
        before, began = process.cpu_times(), time.monotonic()
        uvloop.run(drive(port, concurrency, requests, target))
        after, took = process.cpu_times(), time.monotonic() - began
        child.stdin.close()
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    cpu = (after.user + after.system) - (before.user + before.system)
    return cpu / requests * 1e6, requests / took


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", nargs="*", type=Path, default=[Path(__file__).resolve().parents[1]])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve()
    found: dict[tuple[Path, str, int], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        for target in TARGETS:
            for level in LEVELS:
                for tree in args.trees if round_ % 2 == 0 else args.trees[::-1]:
                    us, rate = measure(tree, level, args.requests, target)
                    found.setdefault((tree, target, level), []).append((us, rate))
                    print(f"round {round_} {tree} {target} c={level}: {us:.1f} µs CPU/request, {rate:,.0f}/s")
    print(f"medians over {args.rounds} rounds (load average {os.getloadavg()[0]:.1f}):")
    for target in TARGETS:
        for level in LEVELS:
            for tree in args.trees:
                runs = found[(tree, target, level)]
                us = statistics.median(run[0] for run in runs)
                rate = statistics.median(run[1] for run in runs)
                print(f"  {target:20} c={level}  {tree}: {us:5.1f} µs CPU/request  {rate:8,.0f}/s")


if __name__ == "__main__":
    main()
