"""tritonserver's graceful stop, step by step, with its log lines (its qa and its users read them):

1. the HTTP front end takes no new connection and serves those open until they close or the exit
   timeout passes ("Timeout 30: Found 1 HTTP service connections", once a second); the gRPC front end
   and the models serve on meanwhile;
2. every model's scheduler stops taking requests, as Triton's do ("Server is stopping, scheduler for
   model has stopped accepting new inference requests"; a sequence under way goes on, an ensemble's
   steps are refused in turn), and the front ends serve until what is queued and executing has ended
   ("Waiting for in-flight requests to complete.", then "Timeout N: Found K model versions that have
   in-flight inferences" once a second, with a line per model version that has queued requests);
3. the models unload (server/repository/manager.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.repository.manager import ModelManager

log = logging.getLogger("tcli.server")
POLL_S = 0.05  # how often the conditions are looked at (the log lines stay once a second)


async def close_http(handle: Any, timeout: float) -> float:
    """Step 1 on `handle` (server/frontends/http/server.py's); returns what is left of `timeout`."""
    handle.stop_accepting()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    counted: int | None = None
    while handle.open_connections and loop.time() < deadline:
        left = math.ceil(deadline - loop.time())
        if left != counted:
            log.info("Timeout %d: Found %d HTTP service connections", left, handle.open_connections)
            counted = left
        await asyncio.sleep(POLL_S)
    return max(0.0, deadline - loop.time())


async def drain(manager: ModelManager, timeout: float) -> None:
    """Step 2, up to `timeout`."""
    log.info("Waiting for in-flight requests to complete.")
    runners = [runner for model in manager.models().values() for runner in model.runners()]
    for runner in runners:
        runner.close()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    counted: int | None = None
    while True:
        left = max(0, math.ceil(deadline - loop.time()))
        if left != counted:
            queued = [(r.name, r.version, n) for r in runners if (n := r.scheduler.pending())]
            log.info("Timeout %d: Found %d model versions that have in-flight inferences", left, len(queued))
            for name, version, count in queued:
                log.info("Model '%s' (version %s) has %d in-flight inferences", name, version, count)
            counted = left
        if not any(runner.in_flight() for runner in runners) or loop.time() >= deadline:
            return
        await asyncio.sleep(POLL_S)
