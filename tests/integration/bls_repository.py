"""A model repository of BLS models, written into a folder for a test (tcli and the real Triton serve
the same files).

`bls` (execute) and `bls_async` (async execute, `await async_exec()`) share one body. Each request's
parameters steer it:

* `chain`: comma-separated models to call in turn ("bls_async,add_sub": this model calls bls_async,
  which calls add_sub); the default is "add_sub". Every hop forwards the rest of the chain and the
  other parameters as its BLS request's parameters.
* `mode` (applied by the last hop): "plain" (default), "bad_input" (the BLS request names INPUT0
  "WRONG"), "stream" (exec(decoupled=True) on the target with IN = INPUT0 as int32, for repeat_int32:
  OUTPUT0[0] counts its OUT responses, OUTPUT0[1] sums them), "stream_plain" (exec(decoupled=True)
  with the plain inputs), "sequence" (INPUT0[0] as INPUT to the target, simple_sequence, with the
  correlation id `cid` and the flags `start`/`end`: OUTPUT0[0] is its running sum).
* `version`: the model_version of the BLS request (default -1).

Outputs: OUTPUT0/OUTPUT1 as the called model answered them (zeros when it failed); ERROR, the BLS
error text ("" when none; "raised: ..." when exec() raised instead of answering with an error; a
nested BLS model's ERROR is passed on); CODE, that error's code name; COUNT, how many responses the
BLS request gave.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"

_BODY = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def bls_request(request):
    """The BLS request this request asks for (see tests/integration/bls_repository.py)."""
    params = json.loads(request.parameters())
    hops = (params.get("chain") or "add_sub").split(",")
    target, rest = hops[0], ",".join(hops[1:])
    mode = params.get("mode", "plain")
    forward = dict(params, chain=rest) if rest else {k: v for k, v in params.items() if k != "chain"}
    x0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
    x1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
    version = int(params.get("version", -1))
    stream = mode in ("stream", "stream_plain") and not rest
    if mode == "stream" and not rest:
        inputs = [
            pb_utils.Tensor("IN", x0.astype(np.int32)),
            pb_utils.Tensor("DELAY", np.zeros(x0.shape, np.uint32)),
            pb_utils.Tensor("WAIT", np.zeros([1], np.uint32)),
        ]
        return pb_utils.InferenceRequest(
            model_name=target, requested_output_names=["OUT"], inputs=inputs, model_version=version
        ), True
    if mode == "sequence" and not rest:
        flags = (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if params.get("start") else 0) | (
            pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if params.get("end") else 0
        )
        inputs = [pb_utils.Tensor("INPUT", x0[:1].astype(np.int32).reshape(1, 1))]
        return pb_utils.InferenceRequest(
            model_name=target,
            requested_output_names=["OUTPUT"],
            inputs=inputs,
            correlation_id=int(params["cid"]),
            flags=flags,
            model_version=version,
        ), False
    first = "WRONG" if mode == "bad_input" and not rest else "INPUT0"
    inputs = [pb_utils.Tensor(first, x0), pb_utils.Tensor("INPUT1", x1)]
    return pb_utils.InferenceRequest(
        model_name=target,
        requested_output_names=["OUTPUT0", "OUTPUT1"] + (["ERROR"] if target.startswith("bls") else []),
        inputs=inputs,
        model_version=version,
        parameters=forward,
    ), stream


def answer(result, stream):
    """This model's response to what the BLS request gave (a response, or a stream of them)."""
    out0, out1, error, code, values, count = np.zeros(4, np.float32), np.zeros(4, np.float32), "", "", [], 0
    for response in result if stream else [result]:
        count += 1
        if response.has_error():
            error, code = response.error().message(), response.error().code().name
            break
        tensors = {t.name(): t.as_numpy() for t in response.output_tensors()}
        if "OUT" in tensors:
            values.append(int(tensors["OUT"].reshape(-1)[0]))
        elif "OUTPUT" in tensors:
            out0[0] = tensors["OUTPUT"].reshape(-1)[0]
        elif "OUTPUT0" in tensors:
            out0, out1 = tensors["OUTPUT0"].astype(np.float32), tensors["OUTPUT1"].astype(np.float32)
            if "ERROR" in tensors:  # a BLS model's answer: its own BLS error, passed on
                error = tensors["ERROR"].reshape(-1)[0].decode()
    if values:
        out0[0], out0[1] = len(values), sum(values)
    return respond(out0, out1, error, count, code)


def respond(out0, out1, error, count=0, code=""):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("OUTPUT0", out0),
            pb_utils.Tensor("OUTPUT1", out1),
            pb_utils.Tensor("ERROR", np.array([error.encode()], dtype=np.object_)),
            pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
            pb_utils.Tensor("CODE", np.array([code.encode()], dtype=np.object_)),
        ]
    )
'''

SYNC_MODEL = (
    _BODY
    + """

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls, stream = bls_request(request)
            try:
                result = bls.exec(decoupled=stream)
            except pb_utils.TritonModelException as e:
                responses.append(respond(np.zeros(4, np.float32), np.zeros(4, np.float32), "raised: " + e.message()))
                continue
            responses.append(answer(result, stream))
        return responses
"""
)

ASYNC_MODEL = (
    _BODY
    + """

class TritonPythonModel:
    async def execute(self, requests):
        import asyncio

        built = [bls_request(request) for request in requests]
        results = await asyncio.gather(
            *(bls.async_exec(decoupled=stream) for bls, stream in built), return_exceptions=True
        )
        responses = []
        for (_, stream), result in zip(built, results):
            if isinstance(result, Exception):
                text = result.message() if hasattr(result, "message") else str(result)
                responses.append(respond(np.zeros(4, np.float32), np.zeros(4, np.float32), "raised: " + text))
            else:
                responses.append(answer(result, stream))
        return responses
"""
)

FAILING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("fails on purpose")
"""

_IO = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""
_BLS_OUTPUTS = """
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "ERROR" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CODE" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
_PLAIN_OUTPUTS = """
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""
_PROCESS = 'parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "true" } }\n'


def _config(name: str, outputs: str, instances: int, process: bool) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{_IO}{outputs}'
        f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n" + (_PROCESS if process else "")
    )


def _model(root: Path, name: str, source: str, config: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(source)
    (root / name / "config.pbtxt").write_text(config)


def write_repository(
    root: Path, *, instances: int = 1, process: bool = False, examples: tuple[str, ...] = ()
) -> Path:
    """bls, bls_async (each `instances` instances, in their own processes with `process`), fails, and
    links to add_sub plus the example models named in `examples`."""
    root.mkdir(parents=True, exist_ok=True)
    _model(root, "bls", SYNC_MODEL, _config("bls", _BLS_OUTPUTS, instances, process))
    _model(root, "bls_async", ASYNC_MODEL, _config("bls_async", _BLS_OUTPUTS, instances, process))
    _model(root, "fails", FAILING_MODEL, _config("fails", _PLAIN_OUTPUTS, 1, False))
    for example in ("add_sub", *examples):
        (root / example).symlink_to(EXAMPLES / example, target_is_directory=True)
    return root
