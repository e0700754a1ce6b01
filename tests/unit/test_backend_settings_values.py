"""--backend-config=python,... as tcli reads it: Triton's refusals, and how segments grow."""

from __future__ import annotations

import pytest

from server.backends.python.backend_settings import MIB, PythonSettings, next_size, python_settings
from server.protocol.errors import ErrorCode, TritonError


def test_defaults_are_tritons() -> None:
    settings = python_settings({})
    assert (settings.shm_default_byte_size, settings.shm_growth_byte_size, settings.stub_timeout_seconds) == (
        MIB,
        None,
        30.0,
    )


def test_settings_are_read() -> None:
    settings = python_settings(
        {"shm-default-byte-size": str(4 * MIB), "shm-growth-byte-size": "4096", "stub-timeout-seconds": "7"}
    )
    assert settings == PythonSettings(4 * MIB, 4096, 7.0)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("shm-default-byte-size", "1000", "must be at least 1048576 (1 MiB), as in Triton"),
        ("shm-growth-byte-size", "0", "must be greater than zero"),
        ("stub-timeout-seconds", "-1", "must be greater than zero"),
        ("stub-timeout-seconds", "soon", "must be a whole number"),
    ],
)
def test_values_triton_refuses_are_refused(key: str, value: str, why: str) -> None:
    with pytest.raises(TritonError) as refused:
        python_settings({key: value})
    assert refused.value.code is ErrorCode.INVALID_ARG
    assert refused.value.message == f"--backend-config=python,{key}={value}: {why}"


def test_segments_double_unless_a_growth_step_is_set() -> None:
    doubling = PythonSettings()
    assert next_size(doubling, 0, 10, 10) == MIB  # the first segment is the default size
    assert next_size(doubling, MIB, 3 * MIB, 6 * MIB) == 6 * MIB
    stepped = PythonSettings(MIB, 2 * MIB)
    assert next_size(stepped, 0, 10, 10) == MIB
    assert next_size(stepped, MIB, MIB + 1, 2 * MIB + 2) == 3 * MIB  # one step
    assert next_size(stepped, MIB, 4 * MIB, 8 * MIB) == 5 * MIB  # as many steps as it takes
    assert next_size(stepped, 0, 2 * MIB, 2 * MIB) == 3 * MIB  # from the default size
