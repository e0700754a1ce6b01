"""The types of `Options`' fields, checked as `tritonserver` checks them when a server starts: its
options pass through typed C bindings, which refuse a value of the wrong type with a TypeError (an int
for a string, a plain int for an enum, a negative number for an unsigned one). The checks here say
which field and what it takes."""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tcli.inprocess._types import LogFormat, ModelControlMode, RateLimitMode

Check = Callable[[Any], bool]


def _uint(value: Any) -> bool:
    try:
        return 0 <= operator.index(value) < 2**64  # bool and numpy integers too, as the bindings take
    except TypeError:
        return False


def _str(value: Any) -> bool:
    return isinstance(value, str)


def _bool(value: Any) -> bool:
    return isinstance(value, int) or type(value).__name__ == "bool_"  # numpy's bool too


def _number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _enum(kind: type[enum.Enum]) -> Check:
    return lambda value: isinstance(value, kind)


def _list_of(check: Check) -> Check:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def _table(value: Any) -> bool:
    """dict[str, dict[str, str]]"""
    return isinstance(value, dict) and all(
        _str(k) and isinstance(v, dict) and all(_str(a) and _str(b) for a, b in v.items())
        for k, v in value.items()
    )


def _repository(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, (str, Path))
        or _list_of(lambda v: isinstance(v, (str, Path)))(value)
    )


def _fields_of(kind: str, checks: dict[str, Check]) -> Check:
    """A list of the dataclass named `kind` whose fields pass `checks`."""

    def check(value: Any) -> bool:
        return isinstance(value, list) and all(
            type(item).__name__ == kind and all(ok(getattr(item, name)) for name, ok in checks.items())
            for item in value
        )

    return check


_CHECKS: dict[str, tuple[Check, str]] = {
    "model_repository": (_repository, "a str or a list of str"),
    "server_id": (_str, "a str"),
    "model_control_mode": (_enum(ModelControlMode), "a ModelControlMode"),
    "startup_models": (_list_of(_str), "a list of str"),
    "strict_model_config": (_bool, "a bool"),
    "rate_limiter_mode": (_enum(RateLimitMode), "a RateLimitMode"),
    "rate_limiter_resources": (
        _fields_of("RateLimiterResource", {"name": _str, "count": _uint, "device": _uint}),
        "a list of RateLimiterResource(name: str, count: uint, device: uint)",
    ),
    "pinned_memory_pool_size": (_uint, "an unsigned int"),
    "cuda_memory_pool_sizes": (
        lambda v: isinstance(v, dict) and all(_uint(k) and _uint(s) for k, s in v.items()),
        "a dict of device to unsigned int",
    ),
    "cache_config": (
        lambda v: isinstance(v, dict) and all(_str(k) and isinstance(s, dict) for k, s in v.items()),
        "a dict of cache name to a dict of its settings",
    ),
    "cache_directory": (_str, "a str"),
    "min_supported_compute_capability": (_number, "a float"),
    "exit_on_error": (_bool, "a bool"),
    "strict_readiness": (_bool, "a bool"),
    "exit_timeout": (_uint, "an unsigned int (seconds)"),
    "buffer_manager_thread_count": (_uint, "an unsigned int"),
    "model_load_thread_count": (_uint, "an unsigned int"),
    "model_load_retry_count": (_uint, "an unsigned int"),
    "model_namespacing": (_bool, "a bool"),
    "enable_peer_access": (_bool, "a bool"),
    "log_file": (lambda v: v is None or _str(v), "a str or None"),
    "log_info": (_bool, "a bool"),
    "log_warn": (_bool, "a bool"),
    "log_error": (_bool, "a bool"),
    "log_format": (_enum(LogFormat), "a LogFormat"),
    "log_verbose": (_uint, "an unsigned int (the verbose level; 0: off)"),
    "metrics": (_bool, "a bool"),
    "gpu_metrics": (_bool, "a bool"),
    "cpu_metrics": (_bool, "a bool"),
    "metrics_interval": (_uint, "an unsigned int (milliseconds)"),
    "backend_directory": (_str, "a str"),
    "repo_agent_directory": (_str, "a str"),
    "model_load_device_limits": (
        _fields_of("ModelLoadDeviceLimit", {"device": _uint, "fraction": _number}),
        "a list of ModelLoadDeviceLimit(kind, device, fraction)",
    ),
    "backend_configuration": (_table, "a dict of backend to a dict of str to str"),
    "host_policies": (_table, "a dict of policy to a dict of str to str"),
    "metrics_configuration": (_table, "a dict of group to a dict of str to str"),
    # tcli's own
    "http_port": (lambda v: v is None or _uint(v), "None or a port number (0: any free port)"),
    "grpc_port": (lambda v: v is None or _uint(v), "None or a port number (0: any free port)"),
    "metrics_port": (lambda v: v is None or _uint(v), "None or a port number (0: any free port)"),
    "host": (_str, "a str"),
    "repository_poll_secs": (_number, "a number of seconds"),
    "server_settings": (lambda v: isinstance(v, dict), "a dict of tcli serve setting to value"),
}


def check_types(options: Any) -> None:
    """Raise TypeError naming the first field whose value is not of its type."""
    for item in dataclasses.fields(options):
        value = getattr(options, item.name)
        ok, wanted = _CHECKS[item.name]
        if not ok(value):
            raise TypeError(f"Options.{item.name} must be {wanted}, got {value!r}")
