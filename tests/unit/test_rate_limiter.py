"""The rate limiter alone (server/scheduling/rate_limiter.py): how many of each resource exist (the
examples of Triton's rate_limiter.md), Triton's load errors, and with real threads: an instance waits
while another holds what it needs, and the waiting one with the lowest execution count x priority
goes next."""

from __future__ import annotations

import logging
import threading

import pytest
from tritonclient.grpc.model_config_pb2 import ModelRateLimiter

from server.protocol.errors import TritonError
from server.scheduling.rate_limiter import (
    GLOBAL,
    InstanceSlot,
    RateLimiter,
    RateLimitFlagError,
    ResourceLimit,
    parse_rate_limit,
    parse_resource,
)
from tests.waiting import wait_until


def limits(*resources: tuple[str, int] | tuple[str, int, bool], priority: int = 0) -> ModelRateLimiter:
    config = ModelRateLimiter(priority=priority)
    for name, count, *rest in resources:
        resource = config.resources.add(name=name, count=count)
        if rest and rest[0]:
            setattr(resource, "global", True)  # `global` is a Python keyword
    return config


def test_without_flags_each_resource_is_the_most_any_instance_asks_for() -> None:
    limiter = RateLimiter()  # rate_limiter.md's instances A, B and C on one device
    limiter.register("A", 0, limits(("R1", 4), ("R2", 4)))
    limiter.register("B", 0, limits(("R2", 5), ("R3", 10), ("R4", 5)))
    c = limiter.register("C", 0, limits(("R1", 1), ("R3", 7), ("R4", 2)))
    assert [limiter.capacity(name, 0) for name in ("R1", "R2", "R3", "R4")] == [4, 5, 10, 5]
    limiter.unregister(c)
    assert limiter.capacity("R4", 0) == 5


def test_verbose_log_shows_each_resource_count_as_triton_does(caplog: pytest.LogCaptureFixture) -> None:
    # Triton's qa (L0_model_update) finds a lowered maximum in the server's log this way
    limiter = RateLimiter()
    with caplog.at_level(logging.DEBUG, logger="tcli.scheduling"):
        old = limiter.register("old", 0, limits(("R1", 4)))
        limiter.register("new", 0, limits(("R1", 3)))
        limiter.unregister(old)
    assert "Resource: R1\\t Count: 4" in caplog.records[0].getMessage()
    assert "Resource: R1\\t Count: 3" in caplog.records[-1].getMessage()


def test_flag_counts_per_device_and_global() -> None:
    # rate_limiter.md: R1:10 R2:5:0 R2:8:1 R3:2, where a model lists R3 as global
    flags = [parse_resource(v) for v in ("R1:10", "R2:5:0", "R2:8:1", "R3:2")]
    limiter = RateLimiter(flags)
    limiter.register("g0", 0, limits(("R1", 1), ("R2", 1), ("R3", 1, True)))
    limiter.register("g1", 1, limits(("R1", 1), ("R2", 1), ("R3", 1, True)))
    assert (limiter.capacity("R1", 0), limiter.capacity("R2", 0)) == (10, 5)
    assert (limiter.capacity("R1", 1), limiter.capacity("R2", 1)) == (10, 8)
    assert limiter.capacity("R3", GLOBAL) == 2


def test_asking_for_more_than_exists_fails_in_tritons_words() -> None:
    limiter = RateLimiter([ResourceLimit("R1", 2)])
    with pytest.raises(TritonError) as failure:
        limiter.register("big", 0, limits(("R1", 3)))
    assert failure.value.status_string() == (
        'Invalid argument: Resource count for "R1" is limited to 2 which will prevent scheduling of one or '
        "more model instances, the minimum required count is 3"
    )
    # a resource the flags do not name does not exist
    with pytest.raises(TritonError, match='Resource count for "R9" is limited to 0'):
        limiter.register("other", 0, limits(("R9", 1)))
    limiter.register("fits", 0, limits(("R1", 2)))  # the failed ones left nothing behind


def test_a_resource_both_global_and_per_device_is_refused() -> None:
    limiter = RateLimiter()
    limiter.register("a", 0, limits(("R", 1, True)))
    with pytest.raises(TritonError, match='Resource "R" is present as both global and device-specific'):
        limiter.register("b", 0, limits(("R", 1)))


def _acquire_in_thread(slot: InstanceSlot, order: list[str]) -> threading.Thread:
    def run() -> None:
        slot.limiter.acquire(slot)
        order.append(slot.name)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_an_instance_waits_while_another_holds_the_resource() -> None:
    limiter = RateLimiter()
    a = limiter.register("a", 0, limits(("R", 1)))
    b = limiter.register("b", 0, limits(("R", 1)))
    limiter.acquire(a)
    order: list[str] = []
    thread = _acquire_in_thread(b, order)
    wait_until(lambda: limiter.waiting() == ["b"], "b to wait for R")
    assert order == [] and not b.granted  # R's one copy is a's until a releases it
    limiter.release(a)
    thread.join(10)
    assert order == ["b"]
    limiter.release(b)


def test_instances_that_fit_together_run_together() -> None:
    limiter = RateLimiter([ResourceLimit("R", 2)])
    a = limiter.register("a", 0, limits(("R", 1)))
    b = limiter.register("b", 0, limits(("R", 1)))
    limiter.acquire(a)
    limiter.acquire(b)  # returns: two copies of R exist
    limiter.release(a)
    limiter.release(b)


def test_lowest_execution_count_times_priority_goes_next() -> None:
    limiter = RateLimiter()
    holder = limiter.register("holder", 0, limits(("R", 1)))
    low = limiter.register("low", 0, limits(("R", 1), priority=1))
    high = limiter.register("high", 0, limits(("R", 1), priority=3))
    for slot in (low, high):  # one execution each: scaled priorities 1 and 3
        with slot.held():
            pass
    limiter.acquire(holder)
    order: list[str] = []
    threads = [_acquire_in_thread(high, order)]
    wait_until(lambda: limiter.waiting() == ["high"], "high to wait")
    threads.append(_acquire_in_thread(low, order))
    wait_until(lambda: limiter.waiting() == ["low", "high"], "low to wait ahead of high")
    limiter.release(holder)
    wait_until(lambda: order == ["low"], "low to take R")
    limiter.release(low)
    wait_until(lambda: order == ["low", "high"], "high to take R next")
    limiter.release(high)
    for thread in threads:
        thread.join(10)


def test_flag_values() -> None:
    assert parse_rate_limit("execution_count") is True
    assert parse_rate_limit("off") is False
    assert parse_resource("R1:4") == ResourceLimit("R1", 4, None)
    assert parse_resource("R1:4:1") == ResourceLimit("R1", 4, 1)
    with pytest.raises(
        RateLimitFlagError, match="--rate-limit=fast: invalid argument; use execution_count or off"
    ):
        parse_rate_limit("fast")
    with pytest.raises(RateLimitFlagError, match=r"format is '<resource_name>:<count>:<device>'.* Got R1$"):
        parse_resource("R1")
    with pytest.raises(RateLimitFlagError, match="invalid option value 'x'"):
        parse_resource("R1:x")
    with pytest.raises(RateLimitFlagError, match=r"Got R1:1:2:3$"):
        parse_resource("R1:1:2:3")
