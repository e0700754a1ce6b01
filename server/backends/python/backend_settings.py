"""The python backend's --backend-config settings (`tcli serve --backend-config=python,<key>=<value>`),
checked with Triton's rules, as one value per server (each instance of each model reads the same).

Triton's python backend settings that map onto tcli's instance processes are honoured:
- shm-default-byte-size: the size each instance's shared-memory segments start with (default and
  minimum 1 MiB, as Triton's);
- shm-growth-byte-size: a segment that is too small grows by steps of this many bytes, as Triton's
  pool grows (unset: tcli doubles it);
- stub-timeout-seconds: how long the server waits for an instance process to come up (its
  interpreter started, tcli's worker imported and talking), default 30 s as Triton's; a process
  that takes longer is killed and the load fails. The model's initialize() is not counted.
tcli's own `instance-process` (placement.py) is one more. The other settings Triton's python backend
knows, and unknown ones, are logged as ignored, once per server process and key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from server.protocol.errors import ErrorCode, TritonError

MIB = 1 << 20
SHM_DEFAULT = "shm-default-byte-size"
SHM_GROWTH = "shm-growth-byte-size"
STUB_TIMEOUT = "stub-timeout-seconds"
# read elsewhere: placement.py; config/complete.py (every backend's)
_READ_ELSEWHERE = frozenset({"instance-process", "default-max-batch-size"})
# Triton's python backend reads these; tcli's design has nothing they would set
_NOT_MAPPED = {
    "shm-message-queue-size": "instance processes talk over pipes, which have no message queue to size",
    "shm_message_queue_size": "instance processes talk over pipes, which have no message queue to size",
    "shm-region-prefix-name": "shared-memory segments are named after the server's process id",
    "thread-pool-size": "a python instance's requests are handed over on the server's own threads",
    "backend-directory": "tcli serve takes --backend-directory",
}
_LOG = logging.getLogger("tcli.python_backend")
_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class PythonSettings:
    shm_default_byte_size: int = MIB
    shm_growth_byte_size: int | None = None  # None: double
    stub_timeout_seconds: float = 30.0


DEFAULT_SETTINGS = PythonSettings()


def python_settings(backend_config: Mapping[str, str]) -> PythonSettings:
    """The settings in `backend_config` (the python backend's, over the ones given for every backend);
    a value Triton would refuse is refused with INVALID_ARG, a setting tcli does not use is logged."""
    for key, value in backend_config.items():
        if key not in (SHM_DEFAULT, SHM_GROWTH, STUB_TIMEOUT) and key not in _READ_ELSEWHERE:
            _ignored(key, value)
    default = _integer(backend_config, SHM_DEFAULT)
    default = MIB if default is None else default
    if default < MIB:
        raise _refused(
            SHM_DEFAULT, backend_config[SHM_DEFAULT], f"must be at least {MIB} (1 MiB), as in Triton"
        )
    growth = _integer(backend_config, SHM_GROWTH)
    if growth is not None and growth <= 0:
        raise _refused(SHM_GROWTH, backend_config[SHM_GROWTH], "must be greater than zero")
    timeout = _integer(backend_config, STUB_TIMEOUT)
    timeout = 30 if timeout is None else timeout
    if timeout <= 0:
        raise _refused(STUB_TIMEOUT, backend_config[STUB_TIMEOUT], "must be greater than zero")
    return PythonSettings(default, growth, float(timeout))


def _integer(backend_config: Mapping[str, str], key: str) -> int | None:
    if key not in backend_config:
        return None
    try:
        return int(backend_config[key].strip())
    except ValueError:
        raise _refused(key, backend_config[key], "must be a whole number") from None


def _refused(key: str, value: str, why: str) -> TritonError:
    return TritonError(ErrorCode.INVALID_ARG, f"--backend-config=python,{key}={value}: {why}")


def _ignored(key: str, value: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    why = _NOT_MAPPED.get(key, "not a setting of the python backend")
    _LOG.warning("--backend-config=python,%s=%s is ignored: %s", key, value, why)


def next_size(settings: PythonSettings, current: int, needed: int, doubled: int) -> int:
    """The size of a segment that must grow from `current` bytes (0: none yet) to hold `needed`:
    `doubled` (tcli's own choice) unless shm-growth-byte-size is set, then Triton's steps."""
    if current == 0 and needed <= settings.shm_default_byte_size:
        return settings.shm_default_byte_size
    growth = settings.shm_growth_byte_size
    if growth is None:
        return max(doubled, settings.shm_default_byte_size)
    start = max(current, settings.shm_default_byte_size)
    steps = max(1, -(-(needed - start) // growth))
    return start + steps * growth
