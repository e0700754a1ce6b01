"""Logging and trace settings, server metadata and statistics errors of the core service, with the
messages and the behaviour of the real Triton 2.51 (each case below was tried on it): which values it
takes, how it words a refusal, what a bad value leaves applied, and the order it lists the settings in."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from server.protocol.errors import ErrorCode, TritonError
from server.repository.manager import ModelManager
from server.service import InferenceService


@pytest.fixture
def service(tmp_path: Path) -> InferenceService:
    return InferenceService(ModelManager([tmp_path]))


def refusal(call: Any, *args: Any) -> tuple[ErrorCode, str]:
    with pytest.raises(TritonError) as caught:
        call(*args)
    return caught.value.code, caught.value.message


# ------------------------------------------------------------------------------------------ logging
def test_log_format_is_refused_as_triton_words_it(service: InferenceService) -> None:
    assert refusal(service.update_log_settings, {"log_format": "xml"}) == (
        ErrorCode.UNAVAILABLE,
        "invalid argument for --log_format, got: xml",
    )
    assert refusal(service.update_log_settings, {"log_format": "iso8601"})[1].endswith("got: iso8601")
    assert service.update_log_settings({"log_format": "ISO8601"}).log_format == "ISO8601"


def test_log_file_cannot_be_changed_even_to_empty(service: InferenceService) -> None:
    for value in ("/tmp/x.log", ""):
        assert refusal(service.update_log_settings, {"log_file": value, "log_info": True}) == (
            ErrorCode.UNSUPPORTED,
            "log file location can not be updated through network protocol",
        )
    assert service.update_log_settings({"log_file": None}).log_file == ""


def test_log_values_of_the_wrong_type(service: InferenceService) -> None:
    boolean = "attempt to access JSON non-boolean as boolean"
    unsigned = "attempt to access JSON non-unsigned-integer as unsigned-integer"
    for changes, expected in (
        ({"log_info": "yes"}, boolean),
        ({"log_error": 1}, boolean),
        ({"log_verbose_level": -1}, unsigned),
        ({"log_verbose_level": "1"}, unsigned),
        ({"log_verbose_level": 1.5}, unsigned),
        ({"log_verbose_level": True}, unsigned),
        ({"log_format": 5}, "attempt to access JSON non-string as string"),
    ):
        assert refusal(service.update_log_settings, changes) == (ErrorCode.INVALID_ARG, expected), changes


def test_log_settings_apply_in_order_until_the_first_bad_one(service: InferenceService) -> None:
    refusal(service.update_log_settings, {"log_format": "xml", "log_info": False})
    assert service.update_log_settings({}).log_info is False  # log_info comes before log_format
    service.update_log_settings({"log_info": True})


def test_verbose_level_is_a_32_bit_int(service: InferenceService) -> None:
    for given, kept in ((2**31 - 1, 2**31 - 1), (2**31, 0), (2**32 + 1, 1), (2**64 - 1, 0), (3, 3)):
        assert service.update_log_settings({"log_verbose_level": given}).log_verbose_level == kept
    service.update_log_settings({"log_verbose_level": 0})


# ------------------------------------------------------------------------------------------ trace
def test_trace_settings_in_tritons_order(service: InferenceService) -> None:
    assert list(asdict(service.trace_settings()).items()) == [
        ("trace_level", ["OFF"]),
        ("trace_rate", "1000"),
        ("trace_count", "-1"),
        ("log_frequency", "0"),
        ("trace_file", ""),
        ("trace_mode", "triton"),
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_rate": ""}, "Unable to parse 'trace_rate', got: "),
        ({"trace_count": "abc"}, "Unable to parse 'trace_count', got: abc"),
        ({"log_frequency": "abc"}, "Unable to parse 'log_frequency', got: abc"),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        (
            {"trace_rate": "99999999999"},
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 99999999999",
        ),
        (
            {"trace_count": "99999999999"},
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 99999999999",
        ),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"trace_level": ["OFF", "OFF"]}, "Expect only one trace level 'OFF' is specified"),
        (
            {"trace_level": ["TIMESTAMPS"]},
            "Attempting to set invalid trace setting :trace file name is not given",
        ),
        (
            {"trace_level": ["TENSORS", "TIMESTAMPS"]},
            "Attempting to set invalid trace setting :trace file name is not given",
        ),
    ],
)
def test_bad_trace_settings_change_nothing(
    service: InferenceService, changes: dict[str, Any], expected: str
) -> None:
    before = service.trace_settings()
    assert refusal(service.update_trace_settings, {"trace_count": "5", **changes}) == (
        ErrorCode.INVALID_ARG,
        expected,
    )
    assert service.trace_settings() == before


def test_trace_file_cannot_be_changed(service: InferenceService) -> None:
    for value in ("/tmp/trace.json", "", None):
        assert refusal(service.update_trace_settings, {"trace_file": value, "trace_rate": "9"}) == (
            ErrorCode.UNSUPPORTED,
            "trace file location can not be updated through network protocol",
        )


def test_trace_numbers_are_read_as_triton_reads_them(service: InferenceService) -> None:
    for given, kept in (("-5", "4294967291"), ("1.5", "1"), (" 7x", "7"), ("+8", "8"), ("0", "0")):
        assert service.update_trace_settings({"trace_rate": given}).trace_rate == kept
    assert service.update_trace_settings({"log_frequency": "-1"}).log_frequency == "4294967295"
    assert service.update_trace_settings({"trace_count": "-1"}).trace_count == "-1"


def test_trace_levels_and_mode_that_change_nothing(service: InferenceService) -> None:
    before = service.trace_settings()
    for changes in ({"trace_level": ["BOGUS"]}, {"trace_level": []}, {"trace_mode": "opentelemetry"}):
        assert service.update_trace_settings(changes) == before, changes
    assert service.update_trace_settings({"trace_level": ["OFF"]}) == before


def test_null_resets_a_global_setting_to_its_default(service: InferenceService) -> None:
    service.update_trace_settings({"trace_rate": "9", "trace_count": "3", "log_frequency": "2"})
    reset = service.update_trace_settings({"trace_rate": None, "trace_count": None, "log_frequency": None})
    assert (reset.trace_rate, reset.trace_count, reset.log_frequency) == ("1000", "-1", "0")


# ------------------------------------------------------------------------------------------ metadata
def test_system_shared_memory_is_listed_only_when_allowed(tmp_path: Path) -> None:
    manager = ModelManager([tmp_path])
    off = InferenceService(manager).server_metadata().extensions
    on = InferenceService(manager, allow_client_shm=True).server_metadata().extensions
    assert "system_shared_memory" not in off
    assert on == [
        "classification",
        "sequence",
        "model_repository",
        "model_repository(unload_dependents)",
        "schedule_policy",
        "model_configuration",
        "system_shared_memory",
        "binary_tensor_data",
        "parameters",
        "statistics",
        "trace",
        "logging",
    ]


def test_statistics_of_an_unknown_model(service: InferenceService) -> None:
    assert refusal(service.statistics, "x") == (ErrorCode.INVALID_ARG, "requested model 'x' is not available")
    assert refusal(service.statistics, "x", "1") == (
        ErrorCode.INVALID_ARG,
        "requested model 'x' is not available",
    )
    assert service.statistics().model_stats == []
    assert service.is_decoupled("x") is False
