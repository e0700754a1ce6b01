"""Reading a change to the trace settings (the trace extension's POST) as Triton reads it: which
settings there are and their defaults, in the order its answers list them; a trace_level list; and
the numbers, parsed by std::stoi's rules. The service applies what this returns."""

from __future__ import annotations

import re
from typing import Any

from server.protocol.errors import invalid_arg, unsupported

# Triton's trace settings, in the order its answers list them; every value a string but the level
TRACE_DEFAULTS: dict[str, Any] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}
_TRACE_LEVELS = ("TIMESTAMPS", "TENSORS")  # the order Triton lists a combined level in
_UINT32 = 2**32
_INT32_MAX = 2**31 - 1
_TRACE_RANGES = {
    "trace_rate": (0, _UINT32 - 1),
    "trace_count": (-1, _INT32_MAX),
    "log_frequency": (0, _UINT32 - 1),
}
_LEADING_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def parse_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes as values to apply (None: reset the setting), every one checked first: Triton
    changes nothing when one is bad. trace_mode cannot be changed at run time and is left out, as in
    Triton; so is a trace_level list naming no level Triton knows."""
    for key in changes:
        if key not in TRACE_DEFAULTS:
            raise invalid_arg(f"trace setting '{key}' is not supported")
    if "trace_file" in changes:
        raise unsupported("trace file location can not be updated through network protocol")
    parsed: dict[str, Any] = {}
    for key, value in changes.items():
        if key == "trace_mode":
            continue
        if value is None:
            parsed[key] = None
        elif key == "trace_level":
            level = _trace_level(value)
            if level is not None:
                parsed[key] = level
        else:
            parsed[key] = _trace_number(key, value)
    return parsed


def _trace_level(value: list[str]) -> list[str] | None:
    """Triton's reading of a trace_level list: OFF alone, or any of TIMESTAMPS and TENSORS; other
    names are ignored, and a list with nothing it knows changes nothing (None)."""
    if "OFF" in value:
        if len(value) != 1:
            raise invalid_arg("Expect only one trace level 'OFF' is specified")
        return ["OFF"]
    levels = [level for level in _TRACE_LEVELS if level in value]
    return levels or None


def _trace_number(key: str, text: str) -> str:
    """Parse a trace number as Triton does (std::stoi: leading blanks, a sign, digits, anything after
    ignored); rate and log frequency are unsigned 32-bit, so a negative number wraps around."""
    if type(text) is not str:
        raise invalid_arg("attempt to access JSON non-string as string")
    low, high = _TRACE_RANGES[key]
    number = _leading_integer(text)
    if number is None:
        raise invalid_arg(f"Unable to parse '{key}', got: {text}")
    if not -_INT32_MAX - 1 <= number <= _INT32_MAX:
        raise invalid_arg(f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}")
    if key == "trace_count":
        if number < -1:
            raise invalid_arg(f"Unable to parse '{key}'. Expecting value >= -1, got:{text}")
        return str(number)
    return str(number % _UINT32)


def _leading_integer(text: str) -> int | None:
    match = _LEADING_INTEGER.match(text)
    return int(match.group(1)) if match else None
