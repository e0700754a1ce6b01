"""Triton's scheduler test knobs, read from the environment when a scheduler is created.

Triton's own qa tests (L0_batcher, L0_sequence_batcher) set these to make batch formation
observable: with TRITONSERVER_DELAY_SCHEDULER=N a scheduler forms no batch until N requests are
queued (the dynamic batcher counts its queue; the direct sequence batcher counts every slot queue of
the model), then works as usual from then on. TRITONSERVER_BACKLOG_DELAY_SCHEDULER=N additionally
holds the sequence batcher until N requests wait in its backlog (sequences without a free slot).
Values are read as C's atoi reads them: anything that is not a number is 0, which turns the knob off.
"""

from __future__ import annotations

import os
import re

DELAY_SCHEDULER = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_SCHEDULER = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"


def _atoi(name: str) -> int:
    match = re.match(r"\s*([+-]?\d+)", os.environ.get(name, ""))
    return max(0, int(match.group(1))) if match else 0


def delay_count() -> int:
    """Requests a scheduler waits for before its first batch (0: none)."""
    return _atoi(DELAY_SCHEDULER)


def backlog_delay_count() -> int:
    """Backlogged requests the sequence batcher waits for before its first batch (0: none)."""
    return _atoi(BACKLOG_DELAY_SCHEDULER)
