"""A gRPC stream (tritonclient start_stream / async_stream_infer) to a decoupled python model whose
decoupled BLS call goes to a model that raises: the stream gets the error (Triton's words, both
models' frames) instead of hanging, whether the error arrives first or after a response, with the
models in the server's thread or in instance processes; and `tcli serve` stops promptly on SIGTERM
afterwards, the client's stream still open (no wait for the 30 s exit timeout). Tests wait on
answers and on the server's exit, never on fixed sleeps."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.serve_process import ServeProcess

WAIT = 30.0  # failure timeout; never reached when things work
PROCESS = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "true" } }\n'
IO = """
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
# raises at once, or after one response (SENT tells which)
INNER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]) > 0:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7], np.int32))])
                )
        raise pb_utils.TritonModelException("the inner model fails")
"""
OUTER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            call = pb_utils.InferenceRequest(
                model_name="inner", inputs=request.inputs(), requested_output_names=["OUT"]
            )
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def write(root: Path, process: bool) -> Path:
    for name, source in (("inner", INNER), ("outer", OUTER)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(source)
        config = f'name: "{name}"\nbackend: "python"\nmodel_transaction_policy {{ decoupled: true }}\n{IO}'
        (root / name / "config.pbtxt").write_text(config + (PROCESS if process else ""))
    return root


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_the_stream_gets_the_error_and_the_server_stops_promptly(tmp_path: Path, process: bool) -> None:
    server = ServeProcess("--model-repository", str(write(tmp_path, process)))
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        got: list[Any] = []
        for sent in (0, 1):
            value = grpcclient.InferInput("IN", [1], "INT32")
            value.set_data_from_numpy(np.array([sent], np.int32))
            client.async_stream_infer("outer", [value])
            for _ in range(sent + 1):  # the response the inner model sent first, then the error
                result, error = answers.get(timeout=WAIT)
                got.append(result.as_numpy("OUT").tolist() if error is None else error.message())
        errors = [g for g in got if isinstance(g, str)]
        assert [g for g in got if not isinstance(g, str)] == [[7]]
        assert len(errors) == 2
        for error in errors:
            assert error.startswith(
                "Failed to process the request(s) for model 'outer_0', message: TritonModelException: "
                "Failed to process the request(s) for model 'inner_0', message: TritonModelException: "
                "the inner model fails"
            ), error
            assert "inner/1/model.py" in error and "outer/1/model.py" in error  # both models' frames
        began = time.monotonic()
        assert server.stop() == 0  # SIGTERM, the stream still open
        assert time.monotonic() - began < 20, server.output()[-3000:]
    finally:
        server.stop()
        client.close()
