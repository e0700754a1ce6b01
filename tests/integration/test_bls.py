"""BLS end to end: python models served by `tcli serve` (the real server on port 0) call other models
with `pb_utils.InferenceRequest(...).exec()`, `await async_exec()` and `exec(decoupled=True)`; real
tritonclient HTTP and gRPC clients ask them. The models (tests/integration/bls_repository.py) answer
with what their BLS request gave, errors included, so every check is what the client sees. Instances
in-thread and in processes of their own; a side-by-side run against the real Triton 2.51 serving the
same repository (skipped when it is not installed)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.integration.bls_repository import write_repository
from tests.integration.conftest import RunningServer, start_server

X0 = np.array([1, 2, 3, 4], np.float32)
X1 = np.array([10, 20, 30, 40], np.float32)
SUM, DIFFERENCE = (X0 + X1).tolist(), (X0 - X1).tolist()
MODELS = ["bls", "bls_async"]  # execute() with exec(), and async execute() with await async_exec()
EXAMPLES = ("repeat_int32", "simple_sequence")
ANSWER = {"out0": SUM, "out1": DIFFERENCE, "error": "", "count": 1, "code": ""}  # add_sub's
DEADLOCK = "would wait forever: every instance of it is waiting on a BLS request that needs this one"


def ask(client: Any, model: str, **parameters: Any) -> dict[str, Any]:
    """One request to a BLS model: what its BLS request answered (OUTPUT0/1, ERROR, COUNT, CODE)."""
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    inputs = []
    for name, data in (("INPUT0", X0), ("INPUT1", X1)):
        tensor = module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(model, inputs, parameters=parameters or None)
    return {
        "out0": result.as_numpy("OUTPUT0").tolist(),
        "out1": result.as_numpy("OUTPUT1").tolist(),
        "error": result.as_numpy("ERROR")[0].decode(),
        "count": int(result.as_numpy("COUNT")[0]),
        "code": result.as_numpy("CODE")[0].decode(),
    }


def successes(client: httpclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One instance per BLS model, on threads of the server process."""
    repository = write_repository(tmp_path_factory.mktemp("bls") / "models", examples=EXAMPLES)
    running = start_server(repository)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture()
def http(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url, network_timeout=60)


# answers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_bls_answers_with_the_called_models_outputs(
    http: httpclient.InferenceServerClient, model: str
) -> None:
    answer = ask(http, model)
    assert answer == ANSWER
    assert ask(http, model, version=1)["out0"] == SUM  # an explicit version, as well as -1 (the latest)


def test_bls_over_grpc(tmp_path: Path) -> None:
    repository = write_repository(tmp_path / "models")
    running = start_server(repository, protocol="grpc")
    try:
        client = grpcclient.InferenceServerClient(running.url)
        for model in MODELS:
            assert ask(client, model) == ANSWER
            assert ask(client, model, mode="bad_input")["error"].endswith(
                "unexpected inference input 'WRONG' for model 'add_sub'"
            )
    finally:
        running.stop()


@pytest.mark.parametrize("model", MODELS)
def test_decoupled_bls_streams_every_response(http: httpclient.InferenceServerClient, model: str) -> None:
    # repeat_int32 answers 1, 2, 3, 4 then a flags-only final, which BLS gives as a 5th, empty response
    answer = ask(http, model, chain="repeat_int32", mode="stream")
    assert (answer["out0"][:2], answer["count"], answer["error"]) == ([4, 10], 5, "")
    # decoupled=True on a model that is not decoupled: its one response
    assert ask(http, model, mode="stream_plain") == ANSWER


@pytest.mark.parametrize("model", MODELS)
def test_bls_keeps_correlation_ids_and_flags_for_sequence_models(
    http: httpclient.InferenceServerClient, model: str
) -> None:
    cid = 41 if model == "bls" else 42
    assert ask(http, model, chain="simple_sequence", mode="sequence", cid=cid, start=True)["out0"][0] == 1
    assert ask(http, model, chain="simple_sequence", mode="sequence", cid=cid)["out0"][0] == 2
    assert ask(http, model, chain="simple_sequence", mode="sequence", cid=cid, end=True)["out0"][0] == 3
    after_end = ask(http, model, chain="simple_sequence", mode="sequence", cid=cid)["error"]
    assert (
        f"inference request for sequence {cid} to model 'simple_sequence' must specify the START" in after_end
    )


# errors ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_bls_errors_read_as_in_triton(http: httpclient.InferenceServerClient, model: str) -> None:
    refused = "Model {} - Error when running inference: {}"
    cases = {
        "missing model": (
            {"chain": "no_such_model"},
            refused.format(
                "no_such_model",
                "Failed for execute the inference request. Model 'no_such_model' is not ready.",
            ),
        ),
        "missing version": (
            {"version": 3},
            refused.format(
                "add_sub", "Failed for execute the inference request. Model 'add_sub' is not ready."
            ),
        ),
        "wrong input": (
            {"mode": "bad_input"},
            refused.format("add_sub", "unexpected inference input 'WRONG' for model 'add_sub'"),
        ),
        "wrong output": (
            {"mode": "stream"},
            refused.format("add_sub", "unexpected inference output 'OUT' for model 'add_sub'"),
        ),
        "decoupled without decoupled=True": (
            {"chain": "repeat_int32"},
            refused.format(
                "repeat_int32",
                "Model repeat_int32 is using the decoupled. The current BLS request call doesn't support "
                "models using the decoupled transaction policy. Please use 'decoupled=True' argument to the "
                "'exec' or 'async_exec' calls for decoupled models.'",
            ),
        ),
        "no correlation id": (
            {"chain": "simple_sequence", "mode": "sequence", "cid": 0},
            refused.format(
                "simple_sequence",
                "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID",
            ),
        ),
    }
    for case, (parameters, expected) in cases.items():
        answer = ask(http, model, **parameters)
        assert (answer["error"], answer["code"], answer["out0"]) == (expected, "INTERNAL", [0.0] * 4), case
    # the called model's own failure comes back as that model reports it, without the prefix
    failed = ask(http, model, chain="fails")["error"]
    assert failed.startswith("Failed to process the request(s) for model 'fails")
    assert "RuntimeError: fails on purpose" in failed


# nesting, busy instances, statistics -----------------------------------------------------------------
def test_nested_bls_to_another_bls_model(http: httpclient.InferenceServerClient) -> None:
    assert ask(http, "bls", chain="bls_async,add_sub")["out0"] == SUM
    assert ask(http, "bls_async", chain="bls,add_sub")["out0"] == SUM
    # a cycle through both (one instance each): bls waits on bls_async, which would wait on bls
    assert DEADLOCK in ask(http, "bls", chain="bls_async,bls,add_sub")["error"]


@pytest.mark.parametrize("model", MODELS)
def test_bls_to_itself_with_no_free_instance_fails_instead_of_hanging(
    http: httpclient.InferenceServerClient, model: str
) -> None:
    # one instance, busy with the request that makes the call: Triton waits forever, tcli answers
    answer = ask(http, model, chain=f"{model},add_sub")
    assert DEADLOCK in answer["error"] and f"instance_group count of '{model}'" in answer["error"]
    assert answer["code"] == "UNAVAILABLE"
    assert ask(http, model) == ANSWER  # and serves on


def test_bls_waits_for_busy_instances(server: RunningServer) -> None:
    # more requests than instances, each waiting on add_sub (one instance) while add_sub is busy
    def one(index: int) -> dict[str, Any]:
        client = httpclient.InferenceServerClient(server.url, network_timeout=60)
        if index % 3 == 0:  # bls waits on bls_async, which waits on add_sub
            return ask(client, "bls", chain="bls_async,add_sub")
        return ask(client, MODELS[index % 2])

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(24)))
    assert all(a == ANSWER for a in answers)


def test_statistics_count_bls_requests(http: httpclient.InferenceServerClient) -> None:
    before = {m: successes(http, m) for m in ("add_sub", "bls", "bls_async")}
    ask(http, "bls")
    ask(http, "bls_async")
    ask(http, "bls", chain="bls_async,add_sub")
    ask(http, "bls", mode="bad_input")  # refused before reaching add_sub: not one of its requests
    after = {m: successes(http, m) for m in ("add_sub", "bls", "bls_async")}
    assert {m: after[m] - before[m] for m in after} == {"add_sub": 3, "bls": 3, "bls_async": 2}


# instances in their own processes ----------------------------------------------------------------------
def test_bls_from_instances_in_their_own_processes(tmp_path: Path) -> None:
    from server.backends.python.process_host import ProcessModel

    repository = write_repository(tmp_path / "models", instances=2, process=True, examples=("repeat_int32",))
    running = start_server(repository)
    try:
        for model in MODELS:
            runner = running.manager.resolve(model)[1].runner
            assert all(isinstance(i, ProcessModel) for i in runner._instances)  # type: ignore[union-attr]
        client = httpclient.InferenceServerClient(running.url, network_timeout=60)
        for model in MODELS:
            assert ask(client, model) == ANSWER
            stream = ask(client, model, chain="repeat_int32", mode="stream")
            assert (stream["out0"][:2], stream["count"]) == ([4, 10], 5)
            assert "is not ready" in ask(client, model, chain="no_such_model")["error"]
            # a second instance is free for one nested call to itself; a third level has none left
            assert ask(client, model, chain=f"{model},add_sub")["out0"] == SUM
            assert DEADLOCK in ask(client, model, chain=f"{model},{model},add_sub")["error"]
    finally:
        running.stop()


# side by side with the real Triton ---------------------------------------------------------------------
SIDE_BY_SIDE = [
    {},
    {"version": 1},
    {"version": 3},
    {"mode": "bad_input"},
    {"chain": "no_such_model"},
    {"chain": "repeat_int32"},
    {"chain": "repeat_int32", "mode": "stream"},
    {"mode": "stream"},
    {"mode": "stream_plain"},
    {"chain": "bls,add_sub"},
    {"chain": "bls_async,add_sub"},
    {"chain": "simple_sequence", "mode": "sequence", "cid": 7, "start": True},
    {"chain": "simple_sequence", "mode": "sequence", "cid": 7, "end": True},
    {"chain": "simple_sequence", "mode": "sequence", "cid": 7},
    {"chain": "simple_sequence", "mode": "sequence", "cid": 0},
]


def test_side_by_side_with_real_triton(tmp_path: Path) -> None:
    from tests.reference import RealTriton, require_reference_triton

    binary = require_reference_triton()
    # two instances each: one nested call to itself needs a second instance (Triton would hang without)
    repository = write_repository(tmp_path / "models", instances=2, examples=EXAMPLES)

    def run_all(client: httpclient.InferenceServerClient) -> list[dict[str, Any]]:
        return [ask(client, model, **case) for model in MODELS for case in SIDE_BY_SIDE]

    with RealTriton(binary, repository) as triton:
        client = httpclient.InferenceServerClient(triton.http_address, network_timeout=60)
        expected = run_all(client)
        triton_failure = ask(client, "bls", chain="fails")["error"]
        triton_stats = successes(client, "add_sub")
    running = start_server(repository)
    try:
        client = httpclient.InferenceServerClient(running.url, network_timeout=60)
        assert run_all(client) == expected
        tcli_failure = ask(client, "bls", chain="fails")["error"]
        assert successes(client, "add_sub") == triton_stats
    finally:
        running.stop()
    # a failing model's message: Triton names the instance (fails_0_0) and adds the traceback
    for failure in (triton_failure, tcli_failure):
        assert failure.startswith("Failed to process the request(s) for model 'fails")
        assert "message: RuntimeError: fails on purpose" in failure
