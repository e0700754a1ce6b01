"""Serving keeps no memory per request: after a warm-up, thousands more add_sub requests (HTTP and
gRPC, from a client process) leave nothing behind in the server.

Two checks, one sharp and one broad:
- in-process, tracemalloc compares the server's live Python allocations before and after; a leak of
  even one small object per request shows as thousands of new blocks allocated at one line;
- `tcli serve` in its own process: its resident memory (native allocations included: gRPC core,
  onnxruntime, shared memory) stays within 10% of what it was after the warm-up.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

from tests.integration.conftest import link_repository, start_server
from tests.integration.serve_process import ServeProcess, drive

WARM_UP = 1000
MEASURED = 3000


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requests_leave_no_python_objects_behind(protocol: str, tmp_path: Path) -> None:
    server = start_server(link_repository(tmp_path / "models", ["add_sub"]), protocol=protocol)
    try:
        drive(protocol, server.url, WARM_UP)
        tracemalloc.start()
        try:
            drive(protocol, server.url, 200)  # allocations that follow tracing's start settle first
            gc.collect()
            before = tracemalloc.take_snapshot()
            drive(protocol, server.url, MEASURED)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    finally:
        server.stop()
    # a line that kept a block for every other request is a leak; caches and pools keep a few
    grown = [s for s in after.compare_to(before, "lineno") if s.count_diff >= MEASURED // 2]
    assert not grown, "allocations that grow with requests:\n" + "\n".join(map(str, grown))


def test_server_resident_memory_stays_flat(tmp_path: Path) -> None:
    served = ServeProcess(str(link_repository(tmp_path / "models", ["add_sub"])))
    try:
        drive("http", served.http_url, WARM_UP)
        drive("grpc", served.grpc_url, WARM_UP)
        warm = served.resident_mb()
        drive("http", served.http_url, MEASURED)
        drive("grpc", served.grpc_url, MEASURED)
        end = served.resident_mb()
    finally:
        assert served.stop() == 0
    assert end <= warm * 1.10, f"resident memory grew from {warm:.1f} MB to {end:.1f} MB"
