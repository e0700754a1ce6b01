"""The response cache on its own: what its key covers, least-recently-used eviction by bytes, stale
entries after a reload, and the flags that configure it (with Triton's words for mistakes)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.protocol.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from server.repository.validation import validate_repositories
from server.scheduling.cache_config import CacheConfigError, parse_cache_flags
from server.scheduling.response_cache import (
    ENTRY_OVERHEAD,
    TENSOR_OVERHEAD,
    ResponseCache,
    request_key,
)
from server.scheduling.stats import ModelStats

PYTHON_IO = """
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
MODEL = "class TritonPythonModel:\n    def execute(self, requests):\n        return None\n"


class Loaded:
    """Stands for a loaded model version (the cache only holds a weak reference to it)."""


def _request(
    values: Any = (1.0, 2.0, 3.0, 4.0),
    *,
    datatype: str = "FP32",
    shape: tuple[int, ...] = (1, 4),
    name: str = "INPUT0",
    parameters: dict[str, Any] | None = None,
    outputs: tuple[str, ...] = (),
    model: str = "m",
) -> InferenceRequest:
    dtype = {"FP32": np.float32, "INT32": np.int32}[datatype]
    data = np.asarray(values, dtype=dtype).reshape(shape)
    tensor = Tensor(name, datatype, shape, data)
    return InferenceRequest(
        model,
        inputs=[tensor],
        parameters=dict(parameters or {}),
        outputs=[RequestedOutput(o) for o in outputs],
    )


def _response(nbytes: int) -> InferenceResponse:
    data = np.zeros(nbytes // 4, dtype=np.float32)
    return InferenceResponse("m", "1", outputs=[Tensor("OUT", "FP32", data.shape, data)])


def _entry_size(nbytes: int) -> int:
    return ENTRY_OVERHEAD + TENSOR_OVERHEAD + nbytes


# ------------------------------------------------------------------------------------------ the key
def test_identical_requests_share_a_key_and_input_order_does_not_matter() -> None:
    a, b = _request(), _request()
    assert request_key(a, "m", 1) == request_key(b, "m", 1)
    two = InferenceRequest("m", inputs=[*_request().inputs, *_request(name="INPUT1").inputs])
    swapped = InferenceRequest("m", inputs=list(reversed(two.inputs)))
    assert request_key(two, "m", 1) == request_key(swapped, "m", 1)


@pytest.mark.parametrize(
    "other",
    [
        _request((1.0, 2.0, 3.0, 5.0)),  # bytes
        _request(shape=(2, 2)),  # shape, same bytes (Triton's key would match)
        _request(np.array([1.0, 2.0, 3.0, 4.0], np.float32).view(np.int32), datatype="INT32"),  # datatype
        _request(name="INPUT1"),  # input name
        _request(parameters={"mode": "fast"}),  # a parameter a python model may read
        _request(outputs=("OUTPUT0",)),  # the outputs asked for
    ],
    ids=["bytes", "shape", "datatype", "name", "parameter", "outputs"],
)
def test_what_can_change_the_answer_changes_the_key(other: InferenceRequest) -> None:
    assert request_key(other, "m", 1) != request_key(_request(), "m", 1)


def test_model_and_version_are_in_the_key_and_scheduling_parameters_are_not() -> None:
    base = request_key(_request(), "m", 1)
    assert request_key(_request(), "m", 2) != base
    assert request_key(_request(model="n"), "n", 1) != base
    assert request_key(_request(parameters={"priority": 2, "timeout": 500}), "m", 1) == base


def test_bytes_inputs_are_keyed_by_every_element() -> None:
    def strings(*items: bytes) -> InferenceRequest:
        data = np.array(items, dtype=object)
        return InferenceRequest("m", inputs=[Tensor("TEXT", "BYTES", data.shape, data)])

    assert request_key(strings(b"ab", b"c"), "m", 1) != request_key(strings(b"a", b"bc"), "m", 1)
    assert request_key(strings(b"ab", b"c"), "m", 1) == request_key(strings(b"ab", b"c"), "m", 1)


# ------------------------------------------------------------------------------------------ storage
def test_least_recently_used_entries_are_evicted_first_by_bytes() -> None:
    owner = Loaded()
    cache = ResponseCache(2 * _entry_size(400) + 10)  # room for two entries of 400 bytes
    cache.insert(b"a", _response(400), owner)
    cache.insert(b"b", _response(400), owner)
    assert cache.lookup(b"a", owner) is not None  # a is now the most recent
    cache.insert(b"c", _response(400), owner)  # evicts b
    assert cache.keys() == [b"a", b"c"]
    assert cache.lookup(b"b", owner) is None
    summary = cache.summary()
    assert (summary.entries, summary.evictions, summary.hits, summary.misses) == (2, 1, 1, 1)
    assert summary.used == 2 * _entry_size(400) <= summary.size


def test_a_larger_entry_evicts_as_many_as_it_needs() -> None:
    owner = Loaded()
    cache = ResponseCache(3 * _entry_size(400))
    for key in (b"a", b"b", b"c"):
        cache.insert(key, _response(400), owner)
    cache.insert(b"big", _response(800), owner)
    assert cache.keys() == [b"c", b"big"]


def test_a_response_larger_than_the_cache_is_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    owner = Loaded()
    cache = ResponseCache(1000)
    assert not cache.insert(b"k", _response(4000), owner)
    assert not cache.insert(b"k2", _response(4000), owner)
    assert cache.keys() == []
    logged = [r.getMessage() for r in caplog.records if "Failed to insert key" in r.getMessage()]
    assert len(logged) == 1 and "--cache-config local,size=" in logged[0]


def test_hits_are_copies_so_nobody_can_change_a_stored_answer() -> None:
    owner = Loaded()
    cache = ResponseCache(10_000)
    response = _response(16)
    cache.insert(b"k", response, owner)
    response.outputs[0].data[:] = 7  # the model's own buffer is reused afterwards
    first = cache.lookup(b"k", owner)
    assert first is not None
    first.outputs[0].data[:] = 9
    second = cache.lookup(b"k", owner)
    assert second is not None and not second.outputs[0].data.any()


def test_entries_of_a_version_loaded_again_are_stale() -> None:
    before, after = Loaded(), Loaded()
    cache = ResponseCache(10_000)
    cache.insert(b"k", _response(16), before)
    assert cache.lookup(b"k", after) is None
    assert cache.keys() == []


def test_serve_records_a_miss_then_a_hit_in_the_statistics() -> None:
    owner, stats = Loaded(), ModelStats("m", "1")
    cache = ResponseCache(10_000)
    runs = []

    async def run() -> InferenceResponse:
        runs.append(1)
        return _response(16)

    async def twice() -> None:
        for _ in range(2):
            await cache.serve(_request(), 1, owner, stats, run)

    asyncio.run(twice())
    assert len(runs) == 1
    inference = stats.statistics().inference_stats
    assert (inference.cache_hit.count, inference.cache_miss.count) == (1, 1)
    assert (
        inference.success.count == 1 and inference.queue.count == 1
    )  # the hit; the runner records the miss's


# ------------------------------------------------------------------------------------------ the flags
def test_flags_give_the_local_cache_size() -> None:
    assert parse_cache_flags([], None) is None
    flags = parse_cache_flags(["local,size=1048576"], None)
    assert flags is not None and flags.size == 1048576 and not flags.deprecated_flag
    repeated = parse_cache_flags(["local,size=10", "local,size=2048", "local,other=1"], None)
    assert repeated is not None and repeated.size == 2048 and repeated.ignored == ["other"]
    old = parse_cache_flags([], "4096")
    assert old is not None and old.size == 4096 and old.deprecated_flag


@pytest.mark.parametrize(
    ("cache_config", "byte_size", "message"),
    [
        (
            ["local"],
            None,
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>",
        ),
        (
            ["local,size"],
            None,
            "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size",
        ),
        (["local,size=1", "redis,host=x"], None, "found multiple cache configurations"),
        (["local,size=1"], "10", "Incompatible flags --response-cache-byte-size and --cache-config"),
        (["redis,host=localhost"], None, "tcli has only Triton's 'local' cache"),
        (["local,foo=bar"], None, "config didn't contain a valid 'size' field"),
        (["local,size=abc"], None, "the cache size must be a whole number of bytes above 0, got 'abc'"),
        ([], "0", "--response-cache-byte-size: the cache size must be a whole number of bytes above 0"),
    ],
)
def test_flag_mistakes_are_one_line_with_the_fix(
    cache_config: list[str], byte_size: str | None, message: str
) -> None:
    with pytest.raises(CacheConfigError) as error:
        parse_cache_flags(cache_config, byte_size)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------ repo validate
def test_repo_validate_refuses_what_triton_refuses_with_its_reason(tmp_path: Path) -> None:
    cache = "response_cache { enable: true }\n"
    configs = {
        "dec": 'backend: "python"\n' + PYTHON_IO + "model_transaction_policy { decoupled: true }\n" + cache,
        "seq": 'backend: "python"\nmax_batch_size: 4\n' + PYTHON_IO + "sequence_batching { }\n" + cache,
        "plain_dec": 'backend: "python"\n' + PYTHON_IO + "model_transaction_policy { decoupled: true }\n",
        "ens": 'platform: "ensemble"\n'
        + PYTHON_IO.replace("IN", "X").replace("OUT", "Y")
        + 'ensemble_scheduling { step [ { model_name: "plain_dec" model_version: -1 '
        + 'input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } ] }\n'
        + cache,
        "fine": 'backend: "python"\n' + PYTHON_IO + cache,
    }
    for name, config in configs.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(config)
        if name != "ens":
            (tmp_path / name / "1" / "model.py").write_text(MODEL)
    report = validate_repositories([tmp_path])
    errors = {m.name: [p for p in m.problems if p.severity == "error"] for m in report.models}
    assert not errors["fine"] and not errors["plain_dec"]
    for name in ("dec", "ens"):
        (problem,) = errors[name]
        assert problem.message == (
            f"Response Cache does not currently support model {name} with 'decoupled' transaction policy. "
            "Please disable the response cache."
        )
        assert problem.line == configs[name].splitlines().index(cache.strip()) + 1
    (problem,) = errors["seq"]
    assert "with sequence batching scheduler. Please disable the response cache." in problem.message
