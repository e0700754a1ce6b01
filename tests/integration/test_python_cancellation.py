"""A client that cancels a request while a python model runs it (a gRPC call cancelled, an HTTP
connection closed) makes `request.is_cancelled()` true inside `execute`, in the server process and
in an instance process, as Triton's python backend reports it (its qa: lifecycle test_execute_cancel).

The model loops until its request says cancelled (a minute at most), then writes "cancelled" to a
file the test reads: a model that never sees it writes "timed out" instead.
"""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from server.app import Server, ServerSettings
from tests.waiting import wait_until

WAIT = 30.0

MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}


class TritonPythonModel:
    def execute(self, requests):
        request = requests[0]
        value = int(pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()[0])
        marker = os.path.join(FOLDER, "seen-%d" % value)
        open(os.path.join(FOLDER, "started-%d" % value), "w").close()
        seen = "timed out"
        for _ in range(6000):
            if request.is_cancelled():
                seen = "cancelled"
                break
            time.sleep(0.01)
        with open(marker, "w") as out:
            out.write(seen)
        error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
        return [pb_utils.InferenceResponse(error=error)]
"""


def _config(name: str, own_process: bool) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "TCLI_INSTANCE_PROCESS" value {{ string_value: "{str(own_process).lower()}" }} }}
"""


MODELS = {"watch_in_server": False, "watch_in_process": True}
VALUES = {"watch_in_server": 1, "watch_in_process": 2}  # each test's own marker files


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    root = tmp_path_factory.mktemp("cancellation")
    folder = root / "state"
    folder.mkdir()
    for name, own_process in MODELS.items():
        (root / "models" / name / "1").mkdir(parents=True)
        (root / "models" / name / "config.pbtxt").write_text(_config(name, own_process))
        (root / "models" / name / "1" / "model.py").write_text(
            textwrap.dedent(MODEL.format(folder=str(folder)))
        )
    settings = ServerSettings(
        [root / "models"],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        exit_timeout_secs=10,
    )
    server = Server(settings).start()
    try:
        yield server, folder
    finally:
        server.stop()


def _wait_for(path: Path, written: bool = False) -> str:
    """The file's text once it exists (and, `written`, once it has any)."""
    wait_until(lambda: path.exists() and (not written or bool(path.read_text())), path.name, timeout=WAIT)
    return path.read_text()


@pytest.mark.parametrize("model", list(MODELS))
def test_a_cancelled_grpc_call_reaches_is_cancelled(served: tuple[Server, Path], model: str) -> None:
    server, folder = served
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    value = VALUES[model]
    tensor = grpcclient.InferInput("VALUE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    future = client.async_infer(model, [tensor], callback=lambda result, error: None)
    _wait_for(folder / f"started-{value}")
    future.cancel()
    assert _wait_for(folder / f"seen-{value}", written=True) == "cancelled"
    client.close()


@pytest.mark.parametrize("model", list(MODELS))
def test_a_closed_http_connection_reaches_is_cancelled(served: tuple[Server, Path], model: str) -> None:
    server, folder = served
    value = 10 + VALUES[model]
    body = b'{"inputs":[{"name":"VALUE","datatype":"INT32","shape":[1],"data":[%d]}]}' % value
    head = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: tcli\r\nContent-Length: {len(body)}\r\n\r\n"
    connection = socket.create_connection(("127.0.0.1", server.http_port or 0), timeout=WAIT)
    connection.sendall(head.encode() + body)
    _wait_for(folder / f"started-{value}")
    connection.close()
    assert _wait_for(folder / f"seen-{value}", written=True) == "cancelled"
