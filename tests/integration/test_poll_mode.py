"""Poll mode: edit, break, fix, add and remove models while requests keep flowing. No request fails
because of a reload, and a broken edit never takes the serving version down."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from server.protocol.errors import TritonError
from server.protocol.types import InferenceRequest, Tensor
from server.repository.manager import ControlMode, ModelManager
from server.repository.models import ModelState
from server.service import InferenceService

ROOT = Path(__file__).resolve().parents[2]


def request(model: str = "add_sub") -> InferenceRequest:
    a = np.array([1, 2, 3, 4], np.float32)
    return InferenceRequest(
        model, inputs=[Tensor("INPUT0", "FP32", (4,), a), Tensor("INPUT1", "FP32", (4,), a)]
    )


def state(manager: ModelManager, name: str) -> list[tuple[str, str]]:
    return [(r.get("state", ""), r.get("reason", "")) for r in manager.index() if r["name"] == name]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "model_repository" / "add_sub", tmp_path / "add_sub")
    return tmp_path


def test_reloads_never_fail_a_request(repo: Path) -> None:
    manager = ModelManager([repo], ControlMode.POLL)
    manager.load_startup()
    service = InferenceService(manager)
    model_py = repo / "add_sub" / "1" / "model.py"
    config = repo / "add_sub" / "config.pbtxt"
    failures: list[str] = []
    sums: list[list[float]] = []

    async def client(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                response = await service.infer(request())
                sums.append(response.outputs[0].data.tolist())
            except TritonError as exc:
                failures.append(exc.message)
            await asyncio.sleep(0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(client(stop))

        async def poll() -> list[str]:
            changed = await asyncio.to_thread(manager.poll_once)
            await asyncio.sleep(0.05)  # let requests run on the new state
            return changed

        # edit: the sum becomes sum + 100
        model_py.write_text(model_py.read_text().replace("np.add(in0, in1)", "(np.add(in0, in1) + 100)"))
        assert "add_sub" in await poll()
        assert sums[-1] == [102.0, 104.0, 106.0, 108.0]
        # break: the config no longer parses; the edited version keeps serving
        good_config = config.read_text()
        config.write_text(good_config + "\nmax_batch_size: [\n")
        assert "add_sub" in await poll()
        # still READY, and the index says the edit was refused, and why (tcli model status shows it)
        ((serving, reason),) = state(manager, "add_sub")
        assert serving == "READY" and reason.startswith("serving the previous config: its reload failed: ")
        assert "parse" in reason
        served_before = len(sums)
        await asyncio.sleep(0.05)
        assert len(sums) > served_before and sums[-1] == [102.0, 104.0, 106.0, 108.0]
        # fix: picked up at the next poll
        config.write_text(good_config)
        model_py.write_text(model_py.read_text().replace("(np.add(in0, in1) + 100)", "np.add(in0, in1)"))
        assert "add_sub" in await poll()
        assert sums[-1] == [2.0, 4.0, 6.0, 8.0]
        assert state(manager, "add_sub") == [("READY", "")]  # the fix clears the refusal
        # add a model, then remove it
        shutil.copytree(repo / "add_sub", repo / "add_sub_copy")
        (repo / "add_sub_copy" / "config.pbtxt").write_text(
            good_config.replace('name: "add_sub"', 'name: "add_sub_copy"')
        )
        assert "add_sub_copy" in await poll()
        assert (await service.infer(request("add_sub_copy"))).outputs[0].data.tolist() == [2.0, 4.0, 6.0, 8.0]
        shutil.rmtree(repo / "add_sub_copy")
        assert "add_sub_copy" in await poll()
        assert state(manager, "add_sub_copy") == []
        stop.set()
        await task

    try:
        asyncio.run(scenario())
    finally:
        manager.shutdown()
    assert failures == []
    assert len(sums) > 20


def test_watcher_picks_up_a_change_without_an_explicit_poll(repo: Path) -> None:
    manager = ModelManager([repo], ControlMode.POLL)
    manager.load_startup()
    manager.start_polling(interval_s=60)  # the periodic scan is far away: only file events can act
    try:
        model_py = repo / "add_sub" / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("np.add(in0, in1)", "(np.add(in0, in1) + 1)"))
        service = InferenceService(manager)
        deadline = time.monotonic() + 20
        result: list[float] = []
        while time.monotonic() < deadline:
            result = asyncio.run(service.infer(request())).outputs[0].data.tolist()
            if result == [3.0, 5.0, 7.0, 9.0]:
                break
            time.sleep(0.1)
        assert result == [3.0, 5.0, 7.0, 9.0]
    finally:
        manager.shutdown()


def test_failed_first_load_reports_reason_and_later_fix_is_picked_up(repo: Path) -> None:
    config = repo / "add_sub" / "config.pbtxt"
    good = config.read_text()
    config.write_text(good.replace("TYPE_FP32", "TYPE_FP33", 1))
    manager = ModelManager([repo], ControlMode.POLL)
    manager.load_startup()
    try:
        ((model_state, reason),) = state(manager, "add_sub")
        assert model_state == ModelState.UNAVAILABLE and "TYPE_FP33" in reason
        config.write_text(good)
        manager.poll_once()
        assert state(manager, "add_sub") == [("READY", "")]
    finally:
        manager.shutdown()
