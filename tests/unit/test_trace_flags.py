"""tritonserver's tracing flags read into the starting trace settings (server/tracing/flags.py)."""

from __future__ import annotations

import pytest

from server.tracing.flags import DEFAULT_OTEL_URL, TraceFlagError, read_trace_flags


def test_trace_config_settings_by_mode() -> None:
    flags = read_trace_flags(
        [
            "triton,file=/tmp/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "level=TENSORS",
            "count=100",
        ]
    )
    assert flags.values == {
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_rate": "100",
        "trace_count": "100",
        "log_frequency": "50",
        "trace_file": "/tmp/t.json",
        "trace_mode": "triton",
    }
    assert flags.otel.url == DEFAULT_OTEL_URL


def test_older_flags_and_trace_config_winning() -> None:
    flags = read_trace_flags(
        ["rate=7"], trace_file="/tmp/a", trace_level=["TIMESTAMPS"], trace_rate="3", trace_log_frequency="2"
    )
    assert flags.values["trace_file"] == "/tmp/a"
    assert flags.values["trace_level"] == ["TIMESTAMPS"]
    assert flags.values["trace_rate"] == "7"
    assert flags.values["log_frequency"] == "2"


def test_opentelemetry_options() -> None:
    flags = read_trace_flags(
        [
            "mode=opentelemetry",
            "opentelemetry,url=http://127.0.0.1:9/v1/traces",
            "opentelemetry,resource=service.name=tcli",
            "opentelemetry,resource=team=ml",
            "opentelemetry,bsp_schedule_delay=100",
        ]
    )
    assert flags.values["trace_mode"] == "opentelemetry"
    assert flags.otel.url == "http://127.0.0.1:9/v1/traces"
    assert flags.otel.resource == {"service.name": "tcli", "team": "ml"}
    assert flags.otel.bsp == {"bsp_schedule_delay": 100}


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ("frequency=3", "unknown global setting 'frequency'"),
        ("triton,url=x", "unknown triton setting 'url'"),
        ("jaeger,url=x", "unknown trace mode 'jaeger'"),
        ("rate=often", "expected an integer, got 'often'"),
        ("count=-2", "expected an integer >= -1"),
        ("level=ALL", "trace level 'ALL'"),
        ("mode=zipkin", "unknown trace mode 'zipkin'"),
        ("level", "expected [<mode>,]<setting>=<value>"),
    ],
)
def test_mistakes_name_the_flag_and_the_fix(entry: str, named: str) -> None:
    with pytest.raises(TraceFlagError) as raised:
        read_trace_flags([entry])
    assert f"--trace-config {entry}" in str(raised.value) or "trace level" in str(raised.value)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("localhost:4318/v1/traces", "http://localhost:4318/v1/traces"),  # as Triton's docs and qa write it
        ("127.0.0.1:9/v1/traces", "http://127.0.0.1:9/v1/traces"),
        ("https://collector.example:443/v1/traces", "https://collector.example:443/v1/traces"),
    ],
)
def test_an_otlp_url_without_a_scheme_is_http(given: str, used: str) -> None:
    flags = read_trace_flags(["mode=opentelemetry", f"opentelemetry,url={given}"])
    assert flags.otel.url == used


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("grpc://localhost:4317", "not 'grpc://'"),
        ("localhost:43x8/v1/traces", "the port is not a number"),
        ("http:///v1/traces", "the URL names no host"),
        ("", "the URL names no host"),
    ],
)
def test_an_otlp_url_that_cannot_be_used_names_the_setting_and_the_fix(url: str, named: str) -> None:
    entry = f"opentelemetry,url={url}"
    with pytest.raises(TraceFlagError) as raised:
        read_trace_flags([entry])
    message = str(raised.value)
    assert message.startswith(f"--trace-config {entry}: ")
    assert named in message
    assert "e.g. localhost:4318/v1/traces" in message
    assert "\n" not in message
