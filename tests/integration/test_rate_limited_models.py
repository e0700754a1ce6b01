"""The rate limiter on a real server: two python models whose instances each ask for one copy of
resource R. Each execution marks itself active in a shared folder and waits (bounded) to see the
other model active, then records its start, end and whether it met the other.

With --rate-limit=execution_count and no --rate-limit-resource, R exists once (the most any instance
asks for): the models never execute at the same time, and both finish their requests. With
--rate-limit=off, or with two copies of R (--rate-limit-resource=R:2), they meet. A model asking for
more R than the flag gives fails its load in Triton's words; a bad flag value stops `tcli serve` with
one line."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from server.scheduling.rate_limiter import ResourceLimit
from tests.integration.conftest import RunningServer
from tests.repo_builder import add_model

MEETING_MODEL = """
import itertools
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config["parameters"].items()}
        self.folder, self.peer = parameters["folder"], parameters["peer"]
        self.wait_s = float(parameters["wait_s"])
        self.name = config["name"]

    def execute(self, requests):
        mine = os.path.join(self.folder, "active-" + self.name)
        theirs = os.path.join(self.folder, "active-" + self.peer)
        start = time.monotonic()
        open(mine, "w").close()
        met = False
        while not met and time.monotonic() < start + self.wait_s:  # bounded: wait_s
            met = os.path.exists(theirs)
            time.sleep(0.002)  # polling interval
        os.remove(mine)
        end = time.monotonic()
        with open(os.path.join(self.folder, "executions.jsonl"), "a") as out:
            out.write(json.dumps({"model": self.name, "start": start, "end": end, "met": met}) + "\\n")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ones(1, np.int32))]) for _ in requests]
"""


def meeting_config(peer: str, folder: Path, wait_s: float, need: int = 1) -> str:
    return f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU rate_limiter {{ resources [ {{ name: "R" count: {need} }} ] }} }} ]
parameters [
  {{ key: "folder" value: {{ string_value: "{folder}" }} }},
  {{ key: "peer" value: {{ string_value: "{peer}" }} }},
  {{ key: "wait_s" value: {{ string_value: "{wait_s}" }} }}
]
"""


@contextmanager
def serving(
    tmp_path: Path, rate_limit: bool, resources: list[ResourceLimit], wait_s: float
) -> Iterator[tuple[RunningServer, Path]]:
    """Models `a` and `b` (each the other's peer) on a server with these rate limiter settings."""
    repository, folder = tmp_path / "models", tmp_path / "shared"
    folder.mkdir()
    for name, peer in (("a", "b"), ("b", "a")):
        add_model(repository, name, meeting_config(peer, folder, wait_s), {"1/model.py": MEETING_MODEL})
    settings = ServerSettings(
        [repository],
        ControlMode.EXPLICIT,
        load_models=["a", "b"],
        host="127.0.0.1",
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
        exit_timeout_secs=10,
        rate_limit=rate_limit,
        rate_limit_resources=resources,
    )
    server = RunningServer(Server(settings).start(), repository)
    try:
        yield server, folder
    finally:
        server.stop()


def run_both(server: RunningServer, folder: Path, per_model: int) -> list[dict[str, object]]:
    """`per_model` requests to each of a and b, all sent at once; the executions they recorded."""

    def infer(model: str) -> None:
        client = httpclient.InferenceServerClient(server.url)
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.zeros(1, np.int32))
        client.infer(model, [tensor])

    with ThreadPoolExecutor(2 * per_model) as pool:
        for future in [pool.submit(infer, m) for m in ["a", "b"] * per_model]:
            future.result(timeout=120)
    return [json.loads(line) for line in (folder / "executions.jsonl").read_text().splitlines()]


def test_models_sharing_one_resource_take_turns(tmp_path: Path) -> None:
    with serving(tmp_path, True, [], wait_s=0.3) as (server, folder):
        executions = run_both(server, folder, per_model=2)
    assert sorted(str(e["model"]) for e in executions) == ["a", "a", "b", "b"]  # both made progress
    assert not any(e["met"] for e in executions)
    spans = sorted((float(str(e["start"])), float(str(e["end"]))) for e in executions)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, spans  # one execution at a time


def test_off_lets_them_execute_together(tmp_path: Path) -> None:
    with serving(tmp_path, False, [], wait_s=20) as (server, folder):
        executions = run_both(server, folder, per_model=1)
    assert any(e["met"] for e in executions)


def test_two_copies_of_the_resource_let_them_execute_together(tmp_path: Path) -> None:
    with serving(tmp_path, True, [ResourceLimit("R", 2)], wait_s=20) as (server, folder):
        executions = run_both(server, folder, per_model=1)
        # a model that asks for more R than the flag gives fails its load, in Triton's words
        add_model(
            server.repository, "greedy", meeting_config("a", folder, 0, need=3), {"1/model.py": MEETING_MODEL}
        )
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException):
            client.load_model("greedy")
        (entry,) = [m for m in client.get_model_repository_index() if m["name"] == "greedy"]
    assert any(e["met"] for e in executions)
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"] == (
        'Invalid argument: Resource count for "R" is limited to 2 which will prevent scheduling of one or '
        "more model instances, the minimum required count is 3"
    )


@pytest.mark.parametrize(
    ("flag", "error"),
    [
        ("--rate-limit=fast", "error: --rate-limit=fast: invalid argument; use execution_count or off"),
        (
            "--rate-limit-resource=R1",
            "error: --rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            "'<resource_name>:<count>'. Got R1",
        ),
    ],
)
def test_a_bad_flag_value_stops_serve_with_one_line(tmp_path: Path, flag: str, error: str) -> None:
    tcli = Path(sys.executable).parent / "tcli"
    done = subprocess.run(
        [str(tcli), "serve", str(tmp_path), flag, "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [error]
