"""The model repository of the python value tests (test_python_values.py): models that hand pb_utils
whatever a tensor spec describes, and that say what they were handed.

A tensor spec is JSON: {"name", "kind", "shape", "values" (absent: a fill), "layout"}. `kind` is a numpy
dtype name, "BF16" (made through DLPack from torch), or one of the BYTES kinds: "bytes" (an object
array of bytes, values in hex), "str" (an object array of str), "S" (numpy's fixed-width bytes_,
values in hex) and "int_objects" (an object array of ints, which Triton sends as their str()).
`layout` is how the array lies in memory: "C", "F" (Fortran order), "strided" (every other element of
a wider array), "offset" (a view one element into its buffer), "readonly", "big_endian".

`values` builds every spec's tensors and answers with them: returned, sent through the request's
response sender, or sent to `echo` as a BLS request whose outputs it returns; with an error, or
parameters, when the spec asks. `echo` returns its inputs under their own names and, in SEEN, what
execute() saw of them; a request parameter "recast" makes it return them as numpy bytes_ ("S") or
object arrays ("object") first, "transpose" transposed.

Tensor names are "<datatype>_<rank>" (FP32_2): one output per datatype and rank, ranks 0 to 3
(echo's inputs, which the server checks against the config, ranks 1 to 3).
"""

from __future__ import annotations

from pathlib import Path

DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)
RANKS = (0, 1, 2, 3)
ECHO_RANKS = (1, 2, 3)

# shared by the models and the test, which builds the arrays it expects with it
BUILD = '''
def build(spec):
    """The array (a torch tensor for BF16) a tensor spec describes."""
    kind, shape = spec["kind"], tuple(spec["shape"])
    count = 1
    for dim in shape:
        count *= dim
    values = spec.get("values")
    if values is None:  # a large tensor's fill
        values = np.arange(count) % 100
        if kind in ("bytes", "S", "str", "int_objects"):
            values = values.tolist()
    if kind == "BF16":
        import torch

        floats = torch.tensor(np.asarray(values, dtype=np.float32))
        return floats.to(torch.bfloat16).reshape(shape)
    if kind in ("bytes", "S"):
        elements = [bytes.fromhex(v) if isinstance(v, str) else bytes([v]) for v in values]
        if kind == "S":
            flat = np.array(elements, dtype=np.bytes_) if elements else np.zeros(0, dtype="S1")
        else:
            flat = np.empty(count, dtype=object)
            flat[:] = elements
    elif kind in ("str", "int_objects"):
        flat = np.empty(count, dtype=object)
        flat[:] = [str(v) if kind == "str" else int(v) for v in values]
    else:
        flat = np.array(values, dtype=kind)
    array = flat.reshape(shape)
    layout = spec.get("layout", "C")
    if layout == "F" and array.ndim:  # numpy makes a 0-d array 1-d
        array = np.asfortranarray(array)
    elif layout == "strided" and array.ndim:
        wide = np.empty(shape[:-1] + (2 * shape[-1],), dtype=array.dtype)
        wide[..., ::2] = array
        array = wide[..., ::2]
    elif layout == "offset":
        buffer = np.empty(count + 1, dtype=array.dtype)
        buffer[1:] = array.reshape(-1)
        array = buffer[1:].reshape(shape)
    elif layout == "readonly":
        array = array.copy()
        array.flags.writeable = False
    elif layout == "big_endian" and array.dtype.kind in "iuf" and array.dtype.itemsize > 1:
        array = array.astype(array.dtype.newbyteorder(">"))
    return array
'''

VALUES_MODEL = (
    """
import json

import numpy as np
import triton_python_backend_utils as pb_utils
"""
    + BUILD
    + """

def tensor(spec):
    value = build(spec)
    if spec["kind"] == "BF16":
        return pb_utils.Tensor.from_dlpack(spec["name"], value)
    return pb_utils.Tensor(spec["name"], value)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            spec = json.loads(pb_utils.get_input_tensor_by_name(request, "SPEC").as_numpy()[0])
            tensors = [tensor(t) for t in spec["tensors"]]
            # parameters= only when there are some: Triton 2.51 has no such argument
            extra = {"parameters": spec["parameters"]} if spec.get("parameters") else {}
            error = spec.get("error")
            if error is not None:
                code = getattr(pb_utils.TritonError, error["code"])
                response = pb_utils.InferenceResponse([], error=pb_utils.TritonError(error["message"], code))
            elif spec["via"] == "bls":
                answer = pb_utils.InferenceRequest(
                    model_name="echo",
                    inputs=tensors,
                    requested_output_names=[t.name() for t in tensors],
                ).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                response = pb_utils.InferenceResponse(answer.output_tensors(), **extra)
            else:
                response = pb_utils.InferenceResponse(tensors, **extra)
            if spec["via"] == "sender":
                request.get_response_sender().send(
                    response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                )
                response = None
            responses.append(response)
        return responses
"""
)

ECHO_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def seen(tensor):
    try:
        array = tensor.as_numpy()
    except pb_utils.TritonModelException:  # BF16
        return ["BF16", tensor.shape()]
    return [array.dtype.str, list(array.shape), array.flags.c_contiguous, array.flags.writeable]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            outputs = []
            for tensor in request.inputs():
                if "recast" in parameters:
                    dtype = np.bytes_ if parameters["recast"] == "S" else np.object_
                    tensor = pb_utils.Tensor(tensor.name(), tensor.as_numpy().astype(dtype))
                elif "transpose" in parameters:
                    tensor = pb_utils.Tensor(tensor.name(), tensor.as_numpy().T)
                outputs.append(tensor)
            report = {"inputs": {t.name(): seen(t) for t in request.inputs()}, "parameters": parameters}
            report["id"] = request.request_id()
            text = json.dumps(report, sort_keys=True)  # Triton orders inputs as its hash map does
            outputs.append(pb_utils.Tensor("SEEN", np.array([text.encode()], dtype=object)))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def _config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _dims(rank: int) -> str:
    return ", ".join(["-1"] * rank) if rank else "1"


def _tensors(ranks: tuple[int, ...], optional: bool) -> str:
    extra = " optional: true" if optional else ""
    return ",\n".join(
        f'  {{ name: "{d}_{r}" data_type: {_config_type(d)} dims: [ {_dims(r)} ]{extra} }}'
        for d in DATATYPES
        for r in ranks
    )


def write_repository(root: Path) -> Path:
    """The `values` and `echo` models under `root`."""
    models = {
        "values": (
            'input [ { name: "SPEC" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            f"output [\n{_tensors(RANKS, False)}\n]\n",
            VALUES_MODEL,
        ),
        "echo": (
            f"input [\n{_tensors(ECHO_RANKS, True)}\n]\n"
            f'output [\n{_tensors(ECHO_RANKS, False)},\n  {{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }}\n]\n',
            ECHO_MODEL,
        ),
    }
    for name, (tensors, code) in models.items():
        folder = root / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{tensors}'
        )
        (folder / "1" / "model.py").write_text(code)
    return root
