"""tritonserver's tracing flags, read into the starting trace settings: `--trace-config
[<mode>,]<setting>=<value>` (repeatable) and the older `--trace-file`, `--trace-level`,
`--trace-rate`, `--trace-count`, `--trace-log-frequency`.

Global settings: level (repeatable: OFF, TIMESTAMPS, TENSORS), rate, count, mode (triton or
opentelemetry). `triton,`: file, log-frequency. `opentelemetry,`: url, resource=key=value
(repeatable), and the batch span processor's bsp_max_queue_size, bsp_schedule_delay,
bsp_max_export_batch_size."""

from __future__ import annotations

import importlib.util
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

DEFAULT_OTEL_URL = "http://localhost:4318/v1/traces"  # Triton's default OTLP/HTTP endpoint
_GLOBAL = ("level", "rate", "count", "mode")
_TRITON = ("file", "log-frequency")
_OTEL_BSP = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


class TraceFlagError(ValueError):
    """A tracing flag tcli cannot read; the message names the flag and what it takes."""


@dataclass
class OtelOptions:
    url: str = DEFAULT_OTEL_URL
    resource: dict[str, str] = field(default_factory=dict)
    bsp: dict[str, int] = field(default_factory=dict)  # batch span processor knobs, as given


@dataclass
class TraceFlags:
    values: dict[str, Any]  # the global trace settings, as the settings API answers them
    otel: OtelOptions


def read_trace_flags(
    trace_config: list[str],
    *,
    trace_file: str | None = None,
    trace_level: list[str] | None = None,
    trace_rate: str | None = None,
    trace_count: str | None = None,
    trace_log_frequency: str | None = None,
) -> TraceFlags:
    """The starting settings: the older flags first, then --trace-config (which wins, as in Triton)."""
    levels: list[str] = list(trace_level or [])
    values: dict[str, Any] = {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": trace_file or "",
        "trace_mode": "triton",
    }
    for key, given in (
        ("trace_rate", trace_rate),
        ("trace_count", trace_count),
        ("log_frequency", trace_log_frequency),
    ):
        if given is not None:
            values[key] = _number(f"--{key.replace('_', '-')}", given, key == "trace_count")
    otel = OtelOptions()
    config_levels: list[str] = []
    for entry in trace_config:
        mode, _, rest = entry.partition(",") if "," in entry.partition("=")[0] else ("", "", entry)
        setting, eq, value = rest.partition("=")
        flag = f"--trace-config {entry}"
        if not eq:
            raise TraceFlagError(
                f"{flag}: expected [<mode>,]<setting>=<value>, e.g. triton,file=/tmp/trace.json"
            )
        if mode == "":
            if setting not in _GLOBAL:
                raise TraceFlagError(
                    f"{flag}: unknown global setting '{setting}'; one of {', '.join(_GLOBAL)}"
                )
            if setting == "level":
                config_levels.append(value)
            elif setting == "mode":
                if value not in ("triton", "opentelemetry"):
                    raise TraceFlagError(f"{flag}: unknown trace mode '{value}'; triton or opentelemetry")
                values["trace_mode"] = value
            else:
                values[f"trace_{setting}"] = _number(flag, value, setting == "count")
        elif mode == "triton":
            if setting not in _TRITON:
                raise TraceFlagError(
                    f"{flag}: unknown triton setting '{setting}'; one of {', '.join(_TRITON)}"
                )
            if setting == "file":
                values["trace_file"] = value
            else:
                values["log_frequency"] = _number(flag, value, False)
        elif mode == "opentelemetry":
            if setting == "url":
                otel.url = otlp_url(flag, value)
            elif setting == "resource":
                key, eq2, resource_value = value.partition("=")
                if not eq2:
                    raise TraceFlagError(f"{flag}: expected opentelemetry,resource=<key>=<value>")
                otel.resource[key] = resource_value
            elif setting in _OTEL_BSP:
                otel.bsp[setting] = int(_number(flag, value, False))
            else:
                raise TraceFlagError(
                    f"{flag}: unknown opentelemetry setting '{setting}'; url, resource, {', '.join(_OTEL_BSP)}"
                )
        else:
            raise TraceFlagError(f"{flag}: unknown trace mode '{mode}'; triton or opentelemetry")
    if values["trace_mode"] == "opentelemetry" and not _otel_installed():
        raise TraceFlagError(
            "--trace-config mode=opentelemetry needs the OpenTelemetry SDK and its OTLP/HTTP exporter: "
            "pip install 'tcli[otel]'"
        )
    levels = config_levels or levels
    if levels:
        values["trace_level"] = _levels(levels)
    return TraceFlags(values, otel)


def otlp_url(flag: str, text: str) -> str:
    """The OTLP/HTTP endpoint a url setting names. Triton's docs and qa write it without a scheme
    (`localhost:4318/v1/traces`), which its exporter reads as http://; the exporter here needs the
    scheme, so it is added. A URL the exporter could not post to stops start-up here, not at the
    first export (where the only sign would be a line in the log)."""
    url = text if "://" in text else f"http://{text}"
    fix = "give <host>:<port>/<path>, e.g. localhost:4318/v1/traces (http:// is assumed)"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TraceFlagError(
            f"{flag}: the OTLP exporter posts over HTTP, not '{parts.scheme}://'; use http:// or https://, or {fix}"
        )
    if not parts.hostname:
        raise TraceFlagError(f"{flag}: the URL names no host; {fix}")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        raise TraceFlagError(f"{flag}: the port is not a number from 0 to 65535; {fix}") from None
    return url


def _otel_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:
        return False


def _levels(given: list[str]) -> list[str]:
    upper = [level.upper() for level in given]
    for level in upper:
        if level not in ("OFF", "TIMESTAMPS", "TENSORS"):
            raise TraceFlagError(f"trace level '{level}': one of OFF, TIMESTAMPS, TENSORS")
    chosen: list[str] = [level for level in ("TIMESTAMPS", "TENSORS") if level in upper]
    return chosen or ["OFF"]


def _number(flag: str, text: str, count: bool) -> str:
    try:
        number = int(text)
    except ValueError:
        raise TraceFlagError(f"{flag}: expected an integer, got '{text}'") from None
    low = -1 if count else 0
    if number < low:
        raise TraceFlagError(f"{flag}: expected an integer >= {low}, got {number}")
    return str(number)
