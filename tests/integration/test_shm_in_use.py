"""A system shared memory region that a request still uses cannot be unregistered, as Triton refuses
(with its words: "Cannot unregister shared memory region 'x', it is currently in use."; unregistering
all of them names those that stay and unregisters the others); once the request is answered it
can. A registration that does not fit its shared memory object fails with Triton's words. Real
tritonclient over HTTP and gRPC against a server on port 0; the model holds each request until the
test creates a release file."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from tests.waiting import wait_until

WAIT = 30.0  # failure timeout; never reached when things work
SIZE = 64  # 16 INT32

CONFIG = """
name: "held"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
MODEL = """
import os
import time

import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}


class TritonPythonModel:
    def execute(self, requests):
        open(os.path.join(FOLDER, "started"), "w").close()
        for _ in range(3000):  # 30 s at most: a test that never releases still ends
            if os.path.exists(os.path.join(FOLDER, "release")):
                break
            time.sleep(0.01)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("shm_in_use")
    folder = root / "state"
    folder.mkdir()
    (root / "models" / "held" / "1").mkdir(parents=True)
    (root / "models" / "held" / "config.pbtxt").write_text(CONFIG)
    (root / "models" / "held" / "1" / "model.py").write_text(
        textwrap.dedent(MODEL.format(folder=str(folder)))
    )
    settings = ServerSettings(
        [root / "models"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        allow_client_shm=True,
    )
    with Server(settings) as running:
        yield running, folder


def _refused(unregister: Any, message: str) -> None:
    with pytest.raises(InferenceServerException) as raised:
        unregister()
    assert message in str(raised.value)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_region_in_use_is_not_unregistered(server: tuple[Server, Path], protocol: str) -> None:
    running, folder = server
    (folder / "release").unlink(missing_ok=True)
    (folder / "started").unlink(missing_ok=True)
    module: Any = httpclient if protocol == "http" else grpcclient
    port = running.http_port if protocol == "http" else running.grpc_port
    client = module.InferenceServerClient(f"127.0.0.1:{port}")
    admin = httpclient.InferenceServerClient(f"127.0.0.1:{running.http_port}")  # a second client
    keys = {name: f"/tcli_in_use_{name}_{uuid.uuid4().hex[:8]}" for name in ("in", "out", "spare")}
    handles = {name: shm.create_shared_memory_region(name, key, SIZE) for name, key in keys.items()}
    try:
        shm.set_shared_memory_region(handles["in"], [np.arange(16, dtype=np.int32)])
        for name, key in keys.items():
            client.register_system_shared_memory(name, key, SIZE)
        tensor = module.InferInput("INPUT0", [16], "INT32")
        tensor.set_shared_memory("in", SIZE)
        output = module.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("out", SIZE)
        if protocol == "http":
            pending = client.async_infer("held", [tensor], outputs=[output])
        else:
            answers: list[Any] = []
            client.async_infer(
                "held", [tensor], lambda result, error: answers.append((result, error)), outputs=[output]
            )
        wait_until(lambda: (folder / "started").exists(), "the request to run", timeout=WAIT)
        _refused(
            lambda: admin.unregister_system_shared_memory("in"),
            "Cannot unregister shared memory region 'in', it is currently in use.",
        )
        _refused(
            admin.unregister_system_shared_memory,
            "Failed to unregister the following system shared memory regions: in ,out ,",
        )
        regions = admin.get_system_shared_memory_status()
        assert sorted(region["name"] for region in regions) == ["in", "out"]  # the spare one went
        (folder / "release").write_text("go")
        if protocol == "http":
            pending.get_result(timeout=WAIT)
        else:
            wait_until(lambda: bool(answers), "the answer", timeout=WAIT)
            assert answers[0][1] is None, answers[0][1]
        assert shm.get_contents_as_numpy(handles["out"], np.int32, [16]).tolist() == list(range(16))
        admin.unregister_system_shared_memory()  # answered: nothing holds them now
        assert admin.get_system_shared_memory_status() == []
    finally:
        (folder / "release").write_text("go")
        admin.unregister_system_shared_memory()
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)


def test_a_region_that_does_not_fit_is_refused_in_tritons_words(server: tuple[Server, Path]) -> None:
    running, _ = server
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{running.grpc_port}")
    key = f"/tcli_bounds_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region("bounds", key, SIZE)
    try:
        for offset, byte_size in ((0, SIZE + 1), (1, SIZE)):
            with pytest.raises(
                InferenceServerException,
                match="failed to register shared memory region 'bounds': invalid args",
            ):
                client.register_system_shared_memory("bounds", key, byte_size, offset=offset)
    finally:
        shm.destroy_shared_memory_region(handle)
