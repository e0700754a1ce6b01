"""Triton's rate limiter (`--rate-limit=execution_count`): an instance executes a batch only while it
holds the resources its `instance_group { rate_limiter { resources [...] priority } }` asks for; they
are taken when it starts and given back when it finishes, so models sharing a resource take turns.

Resources live per device (an instance's resources on its own device) unless marked `global`, which
one copy serves across every device. How many of each exist: with no `--rate-limit-resource`, the
most any loaded instance asks for (recomputed as instances come and go); with the flag, the counts
given (`name:count` for every device, `name:count:device` for one; a global resource takes the
largest count given for its name on any device) and 0 for a resource not given. An instance that
asks for more than exists fails its load with Triton's message.

Who goes next: waiting instances are ordered by execution count x priority (priority 0 counts as 1),
lowest first, then by arrival; only the first may take resources, so a large request is not starved
by small ones (Triton's staging queue). One RateLimiter serves the whole server; with
`--rate-limit=off` (the default) there is none and config rate limiters are ignored, as in Triton.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from tritonclient.grpc.model_config_pb2 import ModelRateLimiter

_LOG = logging.getLogger("tcli.scheduling")
GLOBAL = -1  # the device key of a global resource
EVERY_DEVICE = None  # a --rate-limit-resource without a device

ResourceKey = tuple[int, str]  # (device or GLOBAL, resource name)


class RateLimitFlagError(ValueError):
    """A --rate-limit or --rate-limit-resource value tritonserver would refuse."""


@dataclass(frozen=True)
class ResourceLimit:
    """One --rate-limit-resource=<name>:<count>[:<device>]."""

    name: str
    count: int
    device: int | None = EVERY_DEVICE


def parse_rate_limit(value: str) -> bool:
    """--rate-limit: True for execution_count, False for off."""
    if value == "execution_count":
        return True
    if value == "off":
        return False
    raise RateLimitFlagError(f"--rate-limit={value}: invalid argument; use execution_count or off")


def parse_resource(value: str) -> ResourceLimit:
    """--rate-limit-resource=<name>:<count>[:<device>], in tritonserver's words when malformed."""
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise RateLimitFlagError(
            f"--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            f"'<resource_name>:<count>'. Got {value}"
        )
    numbers = []
    for part in parts[1:]:
        if not part.isdigit():
            raise RateLimitFlagError(
                f"--rate-limit-resource={value}: invalid option value '{part}': count and device are "
                "whole numbers, e.g. R1:2 or R1:2:0"
            )
        numbers.append(int(part))
    return ResourceLimit(parts[0], numbers[0], numbers[1] if len(numbers) > 1 else EVERY_DEVICE)


@dataclass(eq=False)
class InstanceSlot:
    """One registered instance: what it asks for, its priority and how often it has executed."""

    limiter: RateLimiter
    name: str
    needs: dict[ResourceKey, int]
    priority: int
    executions: int = 0
    granted: bool = field(default=False, repr=False)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The instance's resources for the duration of one execution."""
        self.limiter.acquire(self)
        try:
            yield
        finally:
            self.limiter.release(self)


class RateLimiter:
    def __init__(self, limits: Sequence[ResourceLimit] = ()) -> None:
        self._explicit = list(limits)
        self._slots: list[InstanceSlot] = []
        self._available: dict[ResourceKey, int] = {}
        self._allocated: dict[ResourceKey, int] = {}
        self._waiting: list[tuple[int, int, InstanceSlot]] = []  # heap of (scaled priority, arrival, slot)
        self._arrivals = itertools.count()
        self._changed = threading.Condition()

    # instances -----------------------------------------------------------------------------------------
    def register(self, name: str, device: int, config: ModelRateLimiter) -> InstanceSlot:
        """Add an instance; raises TritonError (INVALID_ARG) when it asks for more than exists."""
        needs: dict[ResourceKey, int] = {}
        for resource in config.resources:
            # `global` is a Python keyword: read it among the fields set
            is_global = any(f.name == "global" and value for f, value in resource.ListFields())
            key = (GLOBAL if is_global else device, resource.name)
            needs[key] = int(resource.count)
        slot = InstanceSlot(self, name, needs, max(int(config.priority), 1))
        with self._changed:
            self._slots.append(slot)
            try:
                self._available = self._capacities()
            except TritonError:
                self._slots.remove(slot)
                self._available = self._capacities()
                raise
            self._log_capacities()
            self._changed.notify_all()
        return slot

    def unregister(self, slot: InstanceSlot) -> None:
        with self._changed:
            if slot in self._slots:
                self._slots.remove(slot)
                self._available = self._capacities()
                self._log_capacities()
                self._grant()

    def _capacities(self) -> dict[ResourceKey, int]:
        """How many of each resource exist, checked against what every instance asks for."""
        most: dict[ResourceKey, int] = {}
        for slot in self._slots:
            for key, count in slot.needs.items():
                most[key] = max(most.get(key, 0), count)
        global_names = {name for device, name in most if device == GLOBAL}
        for device, name in most:
            if device != GLOBAL and name in global_names:
                raise TritonError(
                    ErrorCode.INVALID_ARG,
                    f'Resource "{name}" is present as both global and device-specific resource in the '
                    "model configuration.",
                )
        if not self._explicit:
            return most
        available = {}
        for key, required in most.items():
            count = self._explicit_count(*key)
            if count < required:
                raise TritonError(
                    ErrorCode.INVALID_ARG,
                    f'Resource count for "{key[1]}" is limited to {count} which will prevent scheduling of '
                    f"one or more model instances, the minimum required count is {required}",
                )
            available[key] = count
        return available

    def _log_capacities(self) -> None:
        """Verbose level 1: the resources that exist now, a device after another, as Triton logs its
        map (escaped, on one line, as Triton's log escapes it: its qa looks for "Resource: R1\\t Count: 3")."""
        if not _LOG.isEnabledFor(logging.DEBUG):
            return
        text = "\\nMax Resource Map===>\\n"
        devices = sorted({device for device, _ in self._available})
        for device in devices:
            text += f"\\tDevice: {'GLOBAL' if device == GLOBAL else device}\\n"
            for (where, name), count in self._available.items():
                if where == device:
                    text += f"\\t\\tResource: {name}\\t Count: {count}\\n"
        _LOG.debug("%s", text)

    def _explicit_count(self, device: int, name: str) -> int:
        counts = [
            limit.count
            for limit in self._explicit
            if limit.name == name and (device == GLOBAL or limit.device in (EVERY_DEVICE, device))
        ]
        return max(counts, default=0)

    def capacity(self, name: str, device: int = GLOBAL) -> int:
        """How many of resource `name` exist on `device` (GLOBAL for a global resource)."""
        with self._changed:
            return self._available.get((device, name), 0)

    def waiting(self) -> list[str]:
        """The instances waiting for their resources, next first."""
        with self._changed:
            return [slot.name for _, _, slot in sorted(self._waiting, key=lambda entry: entry[:2])]

    # executions ----------------------------------------------------------------------------------------
    def acquire(self, slot: InstanceSlot) -> None:
        """Wait until `slot` holds its resources (its turn, and enough of each is free)."""
        with self._changed:
            slot.granted = False
            heapq.heappush(self._waiting, (slot.executions * slot.priority, next(self._arrivals), slot))
            self._grant()
            while not slot.granted:
                self._changed.wait()

    def release(self, slot: InstanceSlot) -> None:
        with self._changed:
            for key, count in slot.needs.items():
                self._allocated[key] -= count
            slot.executions += 1
            slot.granted = False
            self._grant()

    def _grant(self) -> None:
        """Give resources to waiting instances in order while the first one's needs are free."""
        granted = False
        while self._waiting:
            slot = self._waiting[0][2]
            if slot not in self._slots:  # unregistered while it waited: it runs unlimited
                heapq.heappop(self._waiting)
                slot.needs = {}
            elif any(
                self._allocated.get(key, 0) + count > self._available.get(key, 0)
                for key, count in slot.needs.items()
            ):
                break
            else:
                heapq.heappop(self._waiting)
            for key, count in slot.needs.items():
                self._allocated[key] = self._allocated.get(key, 0) + count
            slot.granted = granted = True
        if granted:
            self._changed.notify_all()
