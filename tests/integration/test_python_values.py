"""Every value a python model hands pb_utils, and every value a client sends it, arrives on the other
side of the process hop as it does in the server's own process: a property-based differential test.

Two real `tcli serve` processes serve the same repository (python_values_repository.py): one runs the
python instances in processes of their own (the default), the other in the server
(`--backend-config=python,instance-process=false`). Hypothesis generates tensors of every datatype,
shape (0-d and empty included), memory layout and BYTES kind, parameters and errors; the model
answers with them (returned, through its response sender, or through a BLS round trip), or a client
sends them; real tritonclient answers from both servers must be equal, and equal to what the model
built, in Triton's terms (a bytes_ element without its trailing NULs, a str as UTF-8).

The cases of Triton's qa python_test that concern values run on both paths too: strings of fixed
width and objects (test_string), UTF-8 through bytes_ (test_unicode), non-contiguous outputs
(test_non_contiguous), and an output larger than the shared memory may grow to (test_growth_error;
/dev/shm made small in a mount namespace of its own, as docker's --shm-size makes it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from tests.integration.python_values_repository import (
    BUILD,
    DATATYPES,
    ECHO_RANKS,
    VALUES_MODEL,
    write_repository,
)
from tests.integration.serve_process import TCLI, ServeProcess
from tests.torch_needed import TORCH_MISSING
from tests.waiting import wait_until

TIMEOUT_S = 20.0  # a request not answered by then fails its example (a hang must not hang the test)
IN_SERVER = "--backend-config=python,instance-process=false"
VALUES = settings(
    max_examples=int(os.environ.get("TCLI_VALUES_EXAMPLES", "40")),
    deadline=None,
    # no shrinking: a failing example is reported as generated (a hang would cost TIMEOUT_S per step)
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_build_namespace: dict[str, Any] = {"np": np}
exec(BUILD, _build_namespace)  # the models' own build(), for the values they must answer with
build = _build_namespace["build"]


# ------------------------------------------------------------------------------------------ servers
@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServeProcess]]:
    """The two placements of python instances, serving the same repository."""
    repository = write_repository(tmp_path_factory.mktemp("values") / "models")
    started: dict[str, ServeProcess] = {}
    try:
        started["process"] = ServeProcess(str(repository))
        started["in-server"] = ServeProcess(str(repository), IN_SERVER)
        yield started
    finally:
        for server in started.values():
            server.stop()


Answer = tuple[Any, ...]


def _plain(array: np.ndarray[Any, Any]) -> tuple[Any, ...]:
    """What a client reads of an output, in a form `==` compares exactly (NaN bits included)."""
    if array.dtype == object:
        return ("BYTES", array.shape, [bytes(v) for v in array.reshape(-1)])
    if array.dtype.kind == "V":  # tritonclient reads BF16 as its raw 16 bits
        return ("bits", array.shape, array.tobytes())
    return (array.dtype.str, array.shape, array.tobytes())


def _infer(
    url: str,
    model: str,
    inputs: list[httpclient.InferInput],
    outputs: list[str],
    parameters: dict[str, Any] | None = None,
    request_id: str = "",
) -> Answer:
    client = httpclient.InferenceServerClient(url, connection_timeout=TIMEOUT_S, network_timeout=TIMEOUT_S)
    try:
        result = client.infer(
            model,
            inputs,
            outputs=[httpclient.InferRequestedOutput(name) for name in outputs],
            parameters=parameters,
            request_id=request_id,
        )
    except InferenceServerException as exc:
        return ("error", exc.status(), exc.message())
    finally:
        client.close()
    response = result.get_response()
    tensors = {
        o["name"]: (o["datatype"], tuple(o["shape"]), _plain(result.as_numpy(o["name"])))
        for o in response.get("outputs", [])
    }
    return ("ok", response.get("parameters"), tensors)


def _infer_grpc(
    url: str,
    model: str,
    inputs: list[tuple[str, str, np.ndarray[Any, Any]]],
    outputs: list[str],
    parameters: dict[str, Any] | None = None,
    request_id: str = "",
) -> Answer:
    """As _infer, over gRPC; `inputs` are (name, datatype, array)."""
    tensors = []
    for name, datatype, array in inputs:
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    with grpcclient.InferenceServerClient(url) as client:
        try:
            result = client.infer(
                model,
                tensors,
                outputs=[grpcclient.InferRequestedOutput(name) for name in outputs],
                parameters=parameters,
                request_id=request_id,
                client_timeout=TIMEOUT_S,
            )
        except InferenceServerException as exc:
            return ("error", exc.status(), exc.message())
    response = result.get_response()
    read = {o.name: (o.datatype, tuple(o.shape), _plain(result.as_numpy(o.name))) for o in response.outputs}
    given = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in response.parameters.items()}
    return ("ok", given or None, read)


def _both(servers: dict[str, ServeProcess], *args: Any, protocol: str = "http", **kwargs: Any) -> Answer:
    """The one answer both placements give; fails showing both when they differ."""
    if protocol == "grpc":
        answers = {name: _infer_grpc(server.grpc_url, *args, **kwargs) for name, server in servers.items()}
    else:
        answers = {name: _infer(server.http_url, *args, **kwargs) for name, server in servers.items()}
    assert answers["process"] == answers["in-server"], answers
    return answers["process"]


def _spec_input(spec: dict[str, Any]) -> list[httpclient.InferInput]:
    text = json.dumps(spec)
    tensor = httpclient.InferInput("SPEC", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([text.encode()], dtype=object))
    return [tensor]


# ------------------------------------------------------------------------ what the client must read
def _datatype(kind: str) -> str:
    if kind in ("bytes", "str", "S", "int_objects"):
        return "BYTES"
    if kind == "BF16":
        return "BF16"
    return {
        "bool": "BOOL",
        "float16": "FP16",
        "float32": "FP32",
        "float64": "FP64",
    }.get(kind, kind.upper())


def _expected(spec: dict[str, Any]) -> tuple[Any, ...]:
    """What a client reads of a spec's tensor, by Triton's rules."""
    value = build(spec)
    datatype = _datatype(spec["kind"])
    shape = tuple(spec["shape"])
    if datatype == "BF16":
        array = np.array(value.view(torch_int16()).numpy(), order="C").view("V2")
    elif datatype == "BYTES":
        elements = value.astype(object).reshape(-1)  # bytes_ elements lose their trailing NULs
        array = np.empty(len(elements), dtype=object)
        array[:] = [v if isinstance(v, bytes) else str(v).encode() for v in elements]
        array = array.reshape(shape)
    else:
        array = np.array(value, dtype=value.dtype.newbyteorder("="), order="C")  # 0-d stays 0-d
    return (datatype, shape, _plain(array))


# --------------------------------------------------------------------------------------- strategies
_INTS = {
    k: st.integers(int(np.iinfo(k).min), int(np.iinfo(k).max))
    for k in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
}
_ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    **_INTS,
    "float16": st.floats(width=16),
    "float32": st.floats(width=32),
    "float64": st.floats(),
    "bytes": st.binary(max_size=8).map(bytes.hex),
    "S": st.binary(max_size=6).map(bytes.hex),
    "str": st.text(st.characters(exclude_categories=()), max_size=6),  # lone surrogates too
    "int_objects": st.integers(-(10**12), 10**12),
    "BF16": st.floats(width=32, allow_nan=False),
}
_KINDS = [k for k in _ELEMENTS if k != "BF16" or not TORCH_MISSING]
# numpy types Triton has no datatype for: pb_utils.Tensor refuses them
_REFUSED: dict[str, st.SearchStrategy[Any]] = {
    "str_": st.text(max_size=4),
    "complex128": st.floats(allow_nan=False),
    "datetime64[s]": st.integers(0, 2**40),
}
_LAYOUTS = ("C", "F", "strided", "offset", "readonly", "big_endian")
_CODES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS")


@st.composite
def tensor_specs(
    draw: st.DrawFn,
    ranks: tuple[int, ...] = (0, 1, 2, 3),
    kinds: tuple[str, ...] = tuple(_KINDS),
    layouts: tuple[str, ...] = _LAYOUTS,
) -> dict[str, Any]:
    if draw(st.integers(0, 19)) == 7:
        kind = draw(st.sampled_from(sorted(_REFUSED)))
        shape = draw(st.lists(st.integers(1, 2), max_size=2))
        values = draw(st.lists(_REFUSED[kind], min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        return {"name": f"REFUSED_{kind}", "kind": kind, "shape": shape, "values": values}
    kind = draw(st.sampled_from(kinds))
    rank = draw(st.sampled_from(ranks))
    if draw(st.integers(0, 9)) == 7 and rank:  # now and then larger than the default shared memory
        shape = [1] * (rank - 1) + [(3 << 20) // 8 if kind not in ("str", "int_objects") else 1 << 18]
        values = None
    else:
        shape = draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank))
        count = int(np.prod(shape)) if shape else 1
        values = draw(st.lists(_ELEMENTS[kind], min_size=count, max_size=count))
    spec = {
        "name": f"{_datatype(kind)}_{rank}",
        "kind": kind,
        "shape": shape,
        "layout": draw(st.sampled_from(layouts)),
    }
    if values is not None:
        spec["values"] = values
    return spec


# a request's parameters may be floats too (a response's are bool, int or str)
_REQUEST_PARAMETERS = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=5),
    st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.text(max_size=5),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    max_size=3,
)
_PARAMETERS = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=5),
    st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=5)),
    max_size=3,
)


@st.composite
def answers(
    draw: st.DrawFn,
    kinds: tuple[str, ...] = tuple(_KINDS),
    layouts: tuple[str, ...] = _LAYOUTS,
    parameters: bool = True,
) -> dict[str, Any]:
    """What `values` is to answer: tensors, how, with which parameters, or an error."""
    via = draw(st.sampled_from(("return", "sender", "bls")))
    ranks = ECHO_RANKS if via == "bls" else (0, 1, 2, 3)
    tensors = draw(st.lists(tensor_specs(ranks, kinds, layouts), max_size=4, unique_by=lambda t: t["name"]))
    spec: dict[str, Any] = {
        "via": via,
        "tensors": tensors,
        "parameters": draw(_PARAMETERS) if parameters else {},
    }
    if draw(st.integers(0, 5)) == 3:
        spec["error"] = {"message": draw(st.text(max_size=20)), "code": draw(st.sampled_from(_CODES))}
    return spec


# ------------------------------------------------------------------------------------------ the tests
def _fixed(name: str, kind: str, values: list[Any], shape: list[int], layout: str = "C") -> dict[str, Any]:
    return {"name": name, "kind": kind, "shape": shape, "values": values, "layout": layout}


@VALUES
@given(spec=answers(), protocol=st.sampled_from(("http", "grpc")))
# numpy's fixed-width bytes_, returned (Triton's qa model string_fixed): the hop once sent them raw
@example(
    spec={"via": "return", "tensors": [_fixed("BYTES_1", "S", ["313233343536", "6162"], [2])]},
    protocol="http",
)
@example(
    spec={"via": "bls", "tensors": [_fixed("BYTES_2", "S", ["00", "61", "", "620000"], [2, 2], "F")]},
    protocol="grpc",
)
def test_what_a_model_answers_with_reaches_the_client_alike_on_both_paths(
    servers: dict[str, ServeProcess], spec: dict[str, Any], protocol: str
) -> None:
    """Over HTTP (binary data) and gRPC (raw contents), which front ends encode apart."""
    if protocol == "grpc":
        spec_input: list[Any] = [("SPEC", "BYTES", np.array([json.dumps(spec).encode()], dtype=object))]
    else:
        spec_input = _spec_input(spec)
    answer = _both(servers, "values", spec_input, requested(spec), protocol=protocol)
    check(answer, spec, internal="StatusCode.INTERNAL" if protocol == "grpc" else "500")


def requested(spec: dict[str, Any]) -> list[str]:
    """The outputs a client asks `values` for (those of the config)."""
    return [t["name"] for t in spec["tensors"] if t["kind"] not in _REFUSED]


def check(answer: Answer, spec: dict[str, Any], internal: str = "500") -> None:
    """`answer` is what Triton's rules make of `spec`; `internal` is how the client words the status
    INTERNAL."""
    refused = _refusal(spec)
    event(f"answered: {'refused' if refused else 'error' if 'error' in spec else spec['via']}")
    if refused is not None:  # pb_utils.Tensor() raised it, at the model's line
        assert answer[:2] == ("error", internal), answer
        assert answer[2].startswith(
            f"Failed to process the request(s) for model 'values_0', message: {refused}"
        ), answer
        assert re.search(
            r"\n\nAt:\n(  \S+\(\d+\): \S+\n)*  \S+/values/1/model\.py\(\d+\): tensor\n", answer[2]
        ), answer
        return
    if "error" in spec:
        assert answer[0] == "error" and answer[2] == spec["error"]["message"], answer
        return
    assert answer[0] == "ok", answer
    assert (answer[1] or {}) == spec.get("parameters", {})
    spec = json.loads(json.dumps(spec))  # the values the model read (NaN's sign does not survive JSON)
    assert answer[2] == {t["name"]: _expected(t) for t in spec["tensors"]}


def _refusal(spec: dict[str, Any]) -> str | None:
    """How pb_utils.Tensor() refuses the first tensor of `spec` it cannot make, as Triton's does."""
    for tensor in spec["tensors"]:
        if tensor["kind"] in _REFUSED:
            return "TritonModelException: NumPy dtype is not supported."
        if tensor["kind"] == "str":
            for value in tensor.get("values", ()):
                try:
                    value.encode()
                except UnicodeEncodeError:
                    return "UnicodeEncodeError: 'utf-8' codec can't encode character"
    return None


_CLIENT_ELEMENTS = {**_ELEMENTS, "bytes": st.binary(max_size=8)}


@st.composite
def client_inputs(
    draw: st.DrawFn, datatypes: tuple[str, ...] = DATATYPES
) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """(datatype, array) pairs as a client sets them: one per datatype at most."""
    chosen = draw(st.lists(st.sampled_from(datatypes), max_size=4, unique=True))
    inputs = []
    for datatype in chosen:
        kind = {"BYTES": "bytes", "BF16": "BF16"}.get(datatype) or _KINDS_BY_DATATYPE[datatype]
        if draw(st.integers(0, 9)) == 7:  # now and then larger than the default shared memory
            inputs.append((datatype, _large_input(kind, draw(st.integers(1, 3)))))
            continue
        shape = draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
        count = int(np.prod(shape))
        values = draw(st.lists(_CLIENT_ELEMENTS[kind], min_size=count, max_size=count))
        if datatype == "BYTES":
            array = np.empty(count, dtype=object)
            array[:] = values
        elif datatype == "BF16":
            array = np.array(values, dtype=ml_dtypes.bfloat16)
        else:
            array = np.array(values, dtype=kind)
        inputs.append((datatype, array.reshape(shape)))
    return inputs


def _large_input(kind: str, rank: int) -> np.ndarray[Any, Any]:
    """Over 1 MiB (the default shared memory) of `kind`, of `rank` dimensions: through the shared
    input arena. BYTES elements cost the client the most: fewer of them (5 bytes each on the wire)."""
    fill = np.arange(1 << 18 if kind == "bytes" else 3 << 18) % 100
    if kind == "bytes":
        array = np.empty(fill.size, dtype=object)
        array[:] = [bytes([v]) for v in fill.tolist()]
    else:
        array = fill.astype(ml_dtypes.bfloat16 if kind == "BF16" else kind)
    return array.reshape([1] * (rank - 1) + [fill.size])


_KINDS_BY_DATATYPE = {_datatype(k): k for k in _ELEMENTS if _datatype(k) not in ("BYTES", "BF16")}


def _bf16(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A bfloat16 array as tritonclient reads a BF16 output back: its raw 16 bits."""
    return array.view("<u2").view("V2")


def torch_int16() -> Any:
    import torch

    return torch.int16


@VALUES
@given(
    tensors=client_inputs(),
    parameters=_REQUEST_PARAMETERS,
    request_id=st.text(max_size=8),
    protocol=st.sampled_from(("http", "grpc")),
)
def test_what_a_client_sends_reaches_the_model_alike_on_both_paths(
    servers: dict[str, ServeProcess],
    tensors: list[tuple[str, np.ndarray[Any, Any]]],
    parameters: dict[str, Any],
    request_id: str,
    protocol: str,
) -> None:
    """Over HTTP (JSON and binary data) and gRPC (raw contents), which front ends decode apart."""
    named, expected = [], {}
    for datatype, array in tensors:
        name = f"{datatype}_{array.ndim}"
        named.append((name, datatype, array))
        read = _bf16(array) if datatype == "BF16" else array
        expected[name] = (datatype, array.shape, _plain(read))
    inputs: list[Any] = named
    if protocol == "http":
        inputs = []
        for name, datatype, array in named:
            tensor = httpclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
    parameters = {f"p{k}": v for k, v in parameters.items()}  # never a key the protocol reserves
    answer = _both(
        servers,
        "echo",
        inputs,
        [*expected, "SEEN"],
        protocol=protocol,
        parameters=parameters or None,
        request_id=request_id,
    )
    assert answer[0] == "ok", answer
    outputs = dict(answer[2])
    seen = json.loads(outputs.pop("SEEN")[2][2][0])
    assert outputs == expected
    assert seen["parameters"] == parameters
    assert seen["id"] == request_id
    for datatype, array in tensors:
        name = f"{datatype}_{array.ndim}"
        if datatype == "BF16":
            assert seen["inputs"][name] == ["BF16", list(array.shape)]
        else:  # what the model reads: a C-contiguous, writable array of the datatype's numpy type
            dtype = "|O" if datatype == "BYTES" else array.dtype.newbyteorder("=").str
            assert seen["inputs"][name] == [dtype, list(array.shape), True, True]


def _bytes_input(name: str, values: list[bytes], dtype: Any = np.object_) -> httpclient.InferInput:
    array = np.array(values, dtype=dtype)
    tensor = httpclient.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


@pytest.mark.parametrize("path", ["process", "in-server"])
def test_strings_of_fixed_width_and_objects_and_empty_ones(
    servers: dict[str, ServeProcess], path: str
) -> None:
    """As Triton's qa test_string (model string_fixed): bytes_ and object outputs, filled or empty."""
    url = servers[path].http_url
    for kind, values, shape in [("S", ["313233343536"], [1]), ("bytes", [], [0])] * 2:
        spec = {"via": "return", "tensors": [_fixed("BYTES_1", kind, values, shape)]}
        answer = _infer(url, "values", _spec_input(spec), ["BYTES_1"])
        assert answer[0] == "ok", answer
        assert answer[2]["BYTES_1"] == (
            "BYTES",
            tuple(shape),
            ("BYTES", tuple(shape), [b"123456"][: len(values)]),
        )


@pytest.mark.parametrize("path", ["process", "in-server"])
@pytest.mark.parametrize("recast", ["S", "object"])
def test_utf8_through_fixed_width_bytes_and_back(
    servers: dict[str, ServeProcess], path: str, recast: str
) -> None:
    """As Triton's qa test_unicode (model string): the model recasts its input to bytes_ or object."""
    smiley = "😀".encode()
    tensor = _bytes_input("BYTES_1", [smiley], np.bytes_)
    answer = _infer(servers[path].http_url, "echo", [tensor], ["BYTES_1"], {"recast": recast})
    assert answer[0] == "ok", answer
    assert answer[2]["BYTES_1"][2] == ("BYTES", (1,), [smiley])


@pytest.mark.parametrize("path", ["process", "in-server"])
def test_non_contiguous_outputs(servers: dict[str, ServeProcess], path: str) -> None:
    """As Triton's qa test_non_contiguous: transposed and strided outputs arrive in C order."""
    array = np.random.default_rng(7).random((2, 10, 11), dtype=np.float32)
    tensor = httpclient.InferInput("FP32_3", list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    answer = _infer(servers[path].http_url, "echo", [tensor], ["FP32_3"], {"transpose": True})
    assert answer[0] == "ok", answer
    assert answer[2]["FP32_3"] == ("FP32", array.T.shape, _plain(np.ascontiguousarray(array.T)))
    for layout in ("F", "strided"):
        spec = {"via": "return", "tensors": [_fixed("INT16_2", "int16", list(range(12)), [3, 4], layout)]}
        answer = _infer(servers[path].http_url, "values", _spec_input(spec), ["INT16_2"])
        assert answer[2]["INT16_2"] == _expected(spec["tensors"][0])


def test_many_tensors_of_every_datatype_and_rank_in_one_response(servers: dict[str, ServeProcess]) -> None:
    tensors = [
        {"name": f"{_datatype(k)}_{rank}", "kind": k, "shape": [2] * rank, "layout": "C"}
        for k in (
            "bool",
            *_INTS,
            "float16",
            "float32",
            "float64",
            "bytes",
            *(() if TORCH_MISSING else ("BF16",)),
        )
        for rank in range(4)
    ]
    spec = {"via": "sender", "tensors": tensors}
    answer = _both(servers, "values", _spec_input(spec), [t["name"] for t in tensors])
    assert answer[0] == "ok", answer
    assert answer[2] == {t["name"]: _expected(t) for t in tensors}


# ------------------------------------------------------------------------- outgrowing shared memory
SHM_MIB = 24


def _can_shrink_dev_shm() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


class _SmallShmServer:
    """`tcli serve` in a mount namespace whose /dev/shm holds SHM_MIB MiB, as in a container started
    with docker's --shm-size."""

    def __init__(self, repository: Path) -> None:
        command = [
            "unshare",
            "-m",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={SHM_MIB}m tmpfs /dev/shm && exec "$0" "$@"',
            str(TCLI),
            "serve",
            str(repository),
            "--http-address",
            "127.0.0.1",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--backend-config=python,shm-default-byte-size=2097152",
        ]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.port = 0
        assert self.process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not self.port:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = re.search(r"Started HTTP on [\d.]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
        if not self.port:
            self.stop()
            raise AssertionError("tcli serve did not start:\n" + "".join(self.lines))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)


@pytest.mark.skipif(
    not _can_shrink_dev_shm(), reason="needs a mount namespace (unshare -m) to shrink /dev/shm"
)
def test_a_tensor_larger_than_shared_memory_may_grow_to_fails_its_request_and_the_next_one_is_served(
    tmp_path: Path,
) -> None:
    """As Triton's qa test_growth_error: an input the server cannot place, then an output the
    instance cannot place, each fail their request with Triton's words; the server and the instance
    go on serving. (Without reserving the pages, the server itself died of SIGBUS.)"""
    server = _SmallShmServer(write_repository(tmp_path / "models"))
    url = f"127.0.0.1:{server.port}"
    try:

        def identity(size: int) -> Answer:
            array = np.arange(size, dtype=np.uint8)
            tensor = httpclient.InferInput("UINT8_1", [size], "UINT8")
            tensor.set_data_from_numpy(array)
            answer = _infer(url, "echo", [tensor], ["UINT8_1"])
            if answer[0] == "ok":
                assert answer[2]["UINT8_1"][2] == _plain(array)
            return answer

        def made(size: int) -> Answer:  # a small request whose output is large
            spec = {"via": "return", "tensors": [{"name": "UINT8_1", "kind": "uint8", "shape": [size]}]}
            return _infer(url, "values", _spec_input(spec), ["UINT8_1"])

        assert identity(2 << 20)[0] == "ok"
        for answer in (identity((SHM_MIB + 8) << 20), made((SHM_MIB - 4) << 20)):
            assert answer[0] == "error", answer
            assert answer[1] == "500", answer
            assert "Failed to increase the shared memory pool size for key '" in answer[2], answer
            assert "No space left on device" in answer[2], answer
        assert identity(2 << 20)[0] == "ok"
        assert made(2 << 20)[0] == "ok"
        assert server.process.poll() is None, "".join(server.lines)
    finally:
        assert server.stop() == 0, "".join(server.lines)


# ------------------------------------------------------------------------ errors at the model's line
@pytest.mark.parametrize("path", ["process", "in-server"])
def test_a_value_pb_utils_refuses_is_reported_at_the_models_line(
    servers: dict[str, ServeProcess], path: str
) -> None:
    """Triton's stub reports an exception pb_utils raises at the model's line (its pb_utils is C++);
    tcli's pb_utils is Python, whose own frames neither the client nor the log shows."""
    spec = {"via": "return", "tensors": [_fixed("BYTES_1", "str_", ["a"], [1])]}
    answer = _infer(servers[path].http_url, "values", _spec_input(spec), ["BYTES_1"])
    model = Path(servers[path].process.args[2]) / "values" / "1" / "model.py"
    line = VALUES_MODEL.splitlines().index('    return pb_utils.Tensor(spec["name"], value)') + 1
    assert answer[:2] == ("error", "500"), answer
    message = answer[2]
    assert message.startswith(
        "Failed to process the request(s) for model 'values_0', message: TritonModelException: "
        f"NumPy dtype is not supported.\n\nAt:\n  {model}({line}): tensor\n"
    ), message
    assert "pb_utils" not in message
    wait_until(lambda: "NumPy dtype is not supported." in servers[path].output(), "the error in the log")
    log = servers[path].output()
    logged = log[log.index("NumPy dtype is not supported.") :]
    assert f'File "{model}", line {line}, in tensor' in logged, logged
    assert "pb_utils/tensor.py" not in logged, logged
