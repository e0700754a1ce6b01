"""Start-up's long-lived objects are frozen out of the garbage collector, so a full collection does
not walk the frameworks and models (it stalled the event loop for 100+ ms, every p99 at high load)."""

from __future__ import annotations

import gc
from pathlib import Path

from server.repository.manager import ControlMode
from tests.integration.conftest import link_repository, start_server


def test_start_up_objects_are_frozen(tmp_path: Path) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    repository = link_repository(tmp_path / "models", ["simple"])
    running = start_server(repository, ControlMode.NONE)
    try:
        assert gc.get_freeze_count() > 1000
    finally:
        running.stop()
