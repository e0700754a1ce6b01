"""Request tracing (`--trace-config`, the trace settings API) against a real server: tritonclient over
HTTP and gRPC, the trace file read back as Triton writes it (one JSON array per F.<n> with
log-frequency 1), the settings changed at run time through both protocols.

The expected name sequences are those real Triton 2.51 wrote for the same requests (python add_sub,
a two-step ensemble of it, a decoupled model over a gRPC stream)."""

from __future__ import annotations

import json
import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server.app import Server, ServerSettings
from server.tracing.flags import read_trace_flags
from tests.integration.conftest import REPO
from tests.waiting import wait_until

HTTP_NAMES = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
GRPC_NAMES = [
    "REQUEST_START",
    "QUEUE_START",
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "INFER_RESPONSE_COMPLETE",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
# the order the request went through them: each no later than the next
PATH_ORDER = [
    "HTTP_RECV_START",
    "GRPC_WAITREAD_START",
    "HTTP_RECV_END",
    "GRPC_WAITREAD_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "GRPC_SEND_START",
    "HTTP_SEND_END",
    "GRPC_SEND_END",
]

ENSEMBLE = """
name: "ens"
platform: "ensemble"
input [ { name: "A" data_type: TYPE_FP32 dims: [4] }, { name: "B" data_type: TYPE_FP32 dims: [4] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [4] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "S1" } output_map { key: "OUTPUT1" value: "D1" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "S1" } input_map { key: "INPUT1" value: "D1" }
    output_map { key: "OUTPUT0" value: "SUM" } }
] }
"""


class Traced:
    def __init__(self, server: Server, file: Path) -> None:
        self.server = server
        self.file = file
        self.http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def groups(self) -> list[list[dict[str, Any]]]:
        """Every indexed trace file written so far, in index order, each parsed."""
        files = sorted(self.file.parent.glob(self.file.name + ".*"), key=lambda p: int(p.suffix[1:]))
        return [json.loads(path.read_text()) for path in files]

    def wait_groups(self, count: int) -> list[list[dict[str, Any]]]:
        """Wait for the writer thread to have written `count` files; then the list of them."""
        wait_until(lambda: len(self.groups()) >= count, f"{count} trace files")
        return self.groups()


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    root = tmp_path_factory.mktemp("trace")
    repository = root / "models"
    repository.mkdir()
    for model in ("add_sub", "repeat_int32"):
        (repository / model).symlink_to(REPO / model, target_is_directory=True)
    (repository / "ens" / "1").mkdir(parents=True)
    (repository / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    file = root / "out" / "trace.json"
    file.parent.mkdir()
    flags = read_trace_flags(
        [
            f"triton,file={file}",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "rate=1",
            "triton,log-frequency=1",
        ]
    )
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, grpc_port=0, allow_metrics=False, trace=flags
    )
    settings.grpc_implementation = (
        os.environ.get("TCLI_TEST_GRPC_IMPLEMENTATION") or settings.grpc_implementation
    )
    server = Server(settings).start()
    try:
        yield Traced(server, file)
    finally:
        server.stop()


def _add_sub_http(client: httpclient.InferenceServerClient, request_id: str = "") -> None:
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    client.infer("add_sub", inputs, request_id=request_id)


def _ens_http(client: httpclient.InferenceServerClient, request_id: str = "") -> None:
    inputs = [httpclient.InferInput("A", [4], "FP32"), httpclient.InferInput("B", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
    client.infer("ens", inputs, request_id=request_id)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _open_array(path: Path) -> list[dict[str, Any]]:
    """The entries of the unindexed file, whose array is closed when the server stops; [] while a
    write is under way."""
    try:
        return list(json.loads(_text(path) + "]"))
    except json.JSONDecodeError:
        return []


def _names(group: list[dict[str, Any]], trace_id: int) -> list[str]:
    return [e["timestamps"][0]["name"] for e in group if e["id"] == trace_id and "timestamps" in e]


def _stamps(group: list[dict[str, Any]], trace_id: int) -> dict[str, int]:
    return {
        e["timestamps"][0]["name"]: e["timestamps"][0]["ns"]
        for e in group
        if e["id"] == trace_id and "timestamps" in e
    }


def _identity(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in group if "model_name" in e]


def _check_path_order(stamps: dict[str, int]) -> None:
    taken = [name for name in PATH_ORDER if name in stamps]
    values = [stamps[name] for name in taken]
    assert values == sorted(values), dict(zip(taken, values, strict=True))


def test_http_request_traced_with_tritons_names_in_order(traced: Traced) -> None:
    before = len(traced.groups())
    _add_sub_http(traced.http, "r1")
    group = traced.wait_groups(before + 1)[before]
    (ident,) = _identity(group)
    assert ident == {"id": ident["id"], "model_name": "add_sub", "model_version": 1, "request_id": "r1"}
    assert _names(group, ident["id"]) == HTTP_NAMES
    _check_path_order(_stamps(group, ident["id"]))
    # the identity comes right after the receive stamps, as in Triton's file
    assert group[2] is not None and "model_name" in group[2]
    tensors = [(e["activity"], e["tensor"]) for e in group if "activity" in e]
    assert tensors == [
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": "0,1,2,3", "shape": "4", "dtype": "FP32"}),
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT1", "data": "0,1,2,3", "shape": "4", "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT0", "data": "0,2,4,6", "shape": "4", "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT1", "data": "0,0,0,0", "shape": "4", "dtype": "FP32"}),
    ]


def test_grpc_request_traced_with_tritons_names_in_order(traced: Traced) -> None:
    before = len(traced.groups())
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    traced.grpc.infer("add_sub", inputs, request_id="g1")
    group = traced.wait_groups(before + 1)[before]
    (ident,) = _identity(group)
    assert (ident["model_name"], ident["request_id"]) == ("add_sub", "g1")
    assert _names(group, ident["id"]) == GRPC_NAMES
    _check_path_order(_stamps(group, ident["id"]))


def test_decoupled_stream_traced_with_a_send_per_response(traced: Traced) -> None:
    before = len(traced.groups())
    answers: queue.Queue[Any] = queue.Queue()
    traced.grpc.start_stream(lambda result, error: answers.put((result, error)))
    try:
        inputs = [
            grpcclient.InferInput("IN", [3], "INT32"),
            grpcclient.InferInput("DELAY", [3], "UINT32"),
            grpcclient.InferInput("WAIT", [1], "UINT32"),
        ]
        inputs[0].set_data_from_numpy(np.array([1, 2, 3], np.int32))
        inputs[1].set_data_from_numpy(np.zeros(3, np.uint32))
        inputs[2].set_data_from_numpy(np.zeros(1, np.uint32))
        traced.grpc.async_stream_infer("repeat_int32", inputs, request_id="s1")
        for _ in range(3):
            _, error = answers.get(timeout=30)
            assert error is None
    finally:
        traced.grpc.stop_stream()
    group = traced.wait_groups(before + 1)[before]
    (ident,) = _identity(group)
    names = _names(group, ident["id"])
    assert names == [
        *GRPC_NAMES[:5],
        *["GRPC_SEND_START", "GRPC_SEND_END"] * 3,
        *GRPC_NAMES[7:],
    ]
    stamps = _stamps(group, ident["id"])
    # the final response may leave before execute() returns: the request ends after its execution
    assert stamps["COMPUTE_START"] <= stamps["COMPUTE_END"] <= stamps["REQUEST_END"]
    outputs = [e["tensor"]["data"] for e in group if e.get("activity") == "TENSOR_BACKEND_OUTPUT"]
    assert outputs == ["1", "0", "2", "1", "3", "2"]  # OUT and IDX of each response


def test_ensemble_steps_are_child_traces_with_parent_id(traced: Traced) -> None:
    before = len(traced.groups())
    _ens_http(traced.http, "e1")
    group = traced.wait_groups(before + 1)[before]
    idents = _identity(group)
    parent = next(i for i in idents if i["model_name"] == "ens")
    children = [i for i in idents if i["model_name"] == "add_sub"]
    assert len(children) == 2
    assert all(c["parent_id"] == parent["id"] and c["request_id"] == "e1" for c in children)
    assert "parent_id" not in parent
    assert _names(group, parent["id"]) == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "REQUEST_START",
        "QUEUE_START",
        "INFER_RESPONSE_COMPLETE",
        "REQUEST_END",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]
    for child in children:  # a step is a request of its own, without the front end's stamps
        assert _names(group, child["id"]) == HTTP_NAMES[2:4] + HTTP_NAMES[7:]
    first, second = sorted(children, key=lambda c: c["id"])
    assert _stamps(group, first["id"])["REQUEST_END"] <= _stamps(group, second["id"])["REQUEST_START"]


def test_level_off_through_the_api_stops_tracing(traced: Traced) -> None:
    before = len(traced.groups())
    traced.http.update_trace_settings(settings={"trace_level": ["OFF"]})
    try:
        for _ in range(3):
            _add_sub_http(traced.http)
        assert len(traced.groups()) == before
    finally:
        traced.grpc.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    _add_sub_http(traced.http)
    traced.wait_groups(before + 1)


def test_per_model_settings(traced: Traced) -> None:
    traced.http.update_trace_settings(settings={"trace_level": ["OFF"]})
    traced.http.update_trace_settings(model_name="add_sub", settings={"trace_level": ["TIMESTAMPS"]})
    try:
        assert traced.http.get_trace_settings(model_name="add_sub")["trace_level"] == ["TIMESTAMPS"]
        before = len(traced.groups())
        _ens_http(traced.http)  # the ensemble's setting (the global one) is off
        _add_sub_http(traced.http, "only-me")
        groups = traced.wait_groups(before + 1)
        assert len(groups) == before + 1
        (ident,) = _identity(groups[before])
        assert ident["request_id"] == "only-me"
        assert not [e for e in groups[before] if "activity" in e]  # TIMESTAMPS only: no tensors
    finally:
        traced.http.update_trace_settings(model_name="add_sub", settings={"trace_level": None})
        traced.http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert traced.http.get_trace_settings(model_name="add_sub")["trace_level"] == ["TIMESTAMPS", "TENSORS"]


def test_rate_and_count_are_honoured(traced: Traced) -> None:
    traced.grpc.update_trace_settings(settings={"trace_rate": "2", "trace_count": "2", "log_frequency": "0"})
    try:
        before = len(traced.groups())
        ids = [f"n{i}" for i in range(8)]
        for request_id in ids:
            _add_sub_http(traced.http, request_id)
        # count 2 reached: both traces written together, without a log frequency to the file itself
        # (as Triton 2.51); the rest are not traced
        wait_until(lambda: '"n3"' in _text(traced.file) and _open_array(traced.file), "the count's traces")
        group = _open_array(traced.file)
        assert [i["request_id"] for i in _identity(group)] == ["n1", "n3"]  # every 2nd request
        assert traced.http.get_trace_settings()["trace_count"] == "0"  # Triton shows what is left
    finally:
        traced.http.update_trace_settings(
            settings={"trace_rate": "1", "trace_count": "-1", "log_frequency": "1"}
        )
    assert len(traced.groups()) == before
