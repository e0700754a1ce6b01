"""A client that cancels a request waiting in the sequence batcher (in its sequence's slot queue, or in
the backlog while another sequence holds the only slot) gets an answer, as Triton's
qa/L0_request_cancellation scheduler_test checks: the whole sequence is cancelled, so every request of
it still waiting is answered CANCELLED (and counted as a failed request, reason CANCELED, in the
model's metrics), the request already executing finishes, and the server goes on serving new
sequences. Direct and oldest strategies, over gRPC (tritonclient's `future.cancel()`).

The model executes one request at a time and holds each until the test creates a release file."""

from __future__ import annotations

import contextlib
import queue
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from server.app import Server, ServerSettings
from tests.waiting import wait_until

WAIT = 30.0  # failure timeout; never reached when things work

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 1
input [ {{ name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{ {strategy} {{ }} max_sequence_idle_microseconds: 60000000 }}
"""

MODEL = """
import os
import time

import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            if int(value.reshape(-1)[0]) > 0:  # the null requests of a direct batch (0) hold nothing
                with open(os.path.join(FOLDER, "executed"), "a") as out:
                    out.write("%d\\n" % int(value.reshape(-1)[0]))
                for _ in range(6000):  # a minute at most: a test that never releases still ends
                    if os.path.exists(os.path.join(FOLDER, "release")):
                        break
                    time.sleep(0.01)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""


@dataclass
class Served:
    server: Server
    folder: Path
    model: str

    def executed(self) -> list[int]:
        path = self.folder / "executed"
        return [int(line) for line in path.read_text().split()] if path.exists() else []

    def cancelled_failures(self) -> int:
        """nv_inference_request_failure{reason="CANCELED"} of the model, from /metrics."""
        text = httpx.get(f"http://127.0.0.1:{self.server.metrics_port}/metrics", timeout=WAIT).text
        pattern = rf'nv_inference_request_failure{{model="{self.model}",reason="CANCELED",version="1"}} (\S+)'
        found = re.search(pattern, text)
        return int(float(found.group(1))) if found else 0

    def pending(self) -> int:
        served = self.server.manager.models()[self.model]
        return sum(runner.scheduler.pending() for runner in served.runners())

    @contextlib.contextmanager
    def blocking(self) -> Iterator[None]:
        (self.folder / "release").unlink(missing_ok=True)
        try:
            yield
        finally:
            (self.folder / "release").write_text("go")
            wait_until(lambda: self.pending() == 0, "the queue to empty", timeout=WAIT)


@pytest.fixture(scope="module", params=["direct", "oldest"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("sequence_cancel")
    folder = root / "state"
    folder.mkdir()
    name = f"sequence_{request.param}"
    model = root / "models" / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.format(name=name, strategy=request.param))
    (model / "1" / "model.py").write_text(textwrap.dedent(MODEL.format(folder=str(folder))))
    settings = ServerSettings([root / "models"], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0)
    with Server(settings) as server:
        yield Served(server, folder, name)


def _inputs(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("VALUE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [tensor]


class Call:
    """An async_infer whose answer (result or error) arrives in `answers`."""

    def __init__(
        self, client: grpcclient.InferenceServerClient, model: str, value: int, **sequence: Any
    ) -> None:
        self.answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        self.future = client.async_infer(
            model, _inputs(value), lambda result, error: self.answers.put((result, error)), **sequence
        )

    def answer(self) -> tuple[Any, Any]:
        return self.answers.get(timeout=WAIT)  # a request never answered fails here, not hangs


def _assert_cancelled(call: Call) -> None:
    result, error = call.answer()
    assert result is None and error is not None
    assert error.status() == "StatusCode.CANCELLED", error


def test_cancelling_a_queued_request_cancels_its_sequence(served: Served) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.server.grpc_port}")
    failed = served.cancelled_failures()
    with served.blocking():
        running = Call(client, served.model, 1, sequence_id=11, sequence_start=True)
        wait_until(lambda: 1 in served.executed(), "the first request to run", timeout=WAIT)
        queued = [Call(client, served.model, 2 + i, sequence_id=11) for i in range(2)]
        wait_until(lambda: served.pending() == 2, "both requests queued", timeout=WAIT)
        queued[0].future.cancel()
        _assert_cancelled(queued[0])
        _assert_cancelled(queued[1])  # its client did not cancel: its sequence was
        assert served.pending() == 0
        assert served.cancelled_failures() == failed + 2  # as Triton counts them
    result, error = running.answer()  # the request that was running finishes
    assert error is None and result.as_numpy("OUT").tolist() == [[1]]
    # the sequence is gone (a request without START is refused) and new sequences are served
    with pytest.raises(grpcclient.InferenceServerException, match="must specify the START flag"):
        client.infer(served.model, _inputs(5), sequence_id=11)
    with served.blocking():
        pass  # released from here on
    done = client.infer(served.model, _inputs(6), sequence_id=12, sequence_start=True, sequence_end=True)
    assert done.as_numpy("OUT").tolist() == [[6]]


def test_cancelling_a_backlogged_request_cancels_its_sequence(served: Served) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.server.grpc_port}")
    failed = served.cancelled_failures()
    with served.blocking():
        running = Call(client, served.model, 21, sequence_id=21, sequence_start=True)
        wait_until(lambda: 21 in served.executed(), "the first sequence to hold the slot", timeout=WAIT)
        backlogged = [
            Call(client, served.model, 2, sequence_id=22, sequence_start=True),
            Call(client, served.model, 3, sequence_id=22),
        ]
        wait_until(lambda: served.pending() == 2, "the second sequence in the backlog", timeout=WAIT)
        backlogged[0].future.cancel()
        _assert_cancelled(backlogged[0])
        _assert_cancelled(backlogged[1])
        assert served.pending() == 0
        assert served.cancelled_failures() == failed + 2
    result, error = running.answer()
    assert error is None and result.as_numpy("OUT").tolist() == [[21]]
    end = client.infer(served.model, _inputs(4), sequence_id=21, sequence_end=True)
    assert end.as_numpy("OUT").tolist() == [[4]]
