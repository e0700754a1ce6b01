"""`tcli.inprocess` started as Triton's own tests and tutorials start `tritonserver`: every field of its
Options (by name, with its type and default), its errors for values it refuses, its log options acting
on tcli's log; and an in-process server whose front end cannot bind its port, which stops start-up
with one of tcli's errors naming the port and option, leaving no model loaded, no process and no
shared memory behind; repositories registered and unregistered while it runs (EXPLICIT mode), with
Triton's errors."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest

import tcli.inprocess as tritonserver
from server.app import Server as AppServer
from server.app import ServerSettings
from server.frontends.ports import PortInUseError
from tests.integration.conftest import link_repository

# tritonserver.Options' fields, as its package (triton-inference-server/core, python/tritonserver)
# declares them
TRITON_FIELDS = {
    "model_repository": [],
    "server_id": "triton",
    "model_control_mode": tritonserver.ModelControlMode.NONE,
    "startup_models": [],
    "strict_model_config": False,
    "rate_limiter_mode": tritonserver.RateLimitMode.OFF,
    "rate_limiter_resources": [],
    "pinned_memory_pool_size": 1 << 28,
    "cuda_memory_pool_sizes": {},
    "cache_config": {},
    "cache_directory": "/opt/tritonserver/caches",
    "min_supported_compute_capability": 6.0,
    "exit_on_error": True,
    "strict_readiness": True,
    "exit_timeout": 30,
    "buffer_manager_thread_count": 0,
    "model_load_thread_count": 4,
    "model_load_retry_count": 0,
    "model_namespacing": False,
    "enable_peer_access": True,
    "log_file": None,
    "log_info": False,
    "log_warn": False,
    "log_error": False,
    "log_format": tritonserver.LogFormat.DEFAULT,
    "log_verbose": 0,
    "metrics": True,
    "gpu_metrics": True,
    "cpu_metrics": True,
    "metrics_interval": 2000,
    "backend_directory": "/opt/tritonserver/backends",
    "repo_agent_directory": "/opt/tritonserver/repoagents",
    "model_load_device_limits": [],
    "backend_configuration": {},
    "host_policies": {},
    "metrics_configuration": {},
}


def test_every_field_of_tritonservers_options_with_its_default() -> None:
    options = tritonserver.Options()
    for name, default in TRITON_FIELDS.items():
        assert getattr(options, name) == default, name
    with pytest.raises(AttributeError):  # a misspelt option is an error, not a silent new attribute
        options.log_verbos = 1  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return link_repository(tmp_path_factory.mktemp("options") / "models", ["add_sub"])


def test_a_server_started_as_tritons_tests_start_one(repository: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    options = tritonserver.Options(
        server_id="TestServer",
        model_repository=str(repository),
        log_verbose=6,
        log_error=True,
        log_warn=True,
        log_info=True,
        exit_on_error=True,
        strict_model_config=False,
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        exit_timeout=5,
        log_file=str(log_file),
    )
    server = tritonserver.Server(options).start(wait_until_ready=True)
    try:
        assert server.ready()
        assert server.metadata()["name"] == "TestServer"
        server.load("add_sub")
        (response,) = server.model("add_sub").infer(
            inputs={"INPUT0": np.ones(4, np.float32), "INPUT1": np.ones(4, np.float32)}
        )
        assert np.from_dlpack(response.outputs["OUTPUT0"]).tolist() == [2, 2, 2, 2]
    finally:
        server.stop()
    lines = log_file.read_text().splitlines()
    # tcli's log, in Triton's format, in the file the options named
    assert any(line.startswith("I") and "successfully loaded 'add_sub'" in line for line in lines), lines


def test_the_log_options_choose_the_severities(repository: Path, tmp_path: Path) -> None:
    quiet = tmp_path / "errors-only.log"
    with tritonserver.Server(model_repository=str(repository), log_error=True, log_file=str(quiet)):
        pass
    assert "successfully loaded" not in quiet.read_text()  # info is off unless asked for
    verbose = tmp_path / "verbose.log"
    with tritonserver.Server(model_repository=str(repository), log_verbose=1, log_file=str(verbose)):
        pass
    assert "successfully loaded 'add_sub'" in verbose.read_text()  # verbose implies info, as in Triton


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("server_id", 1),
        ("model_repository", 1),
        ("model_control_mode", 2),  # a plain int is not a ModelControlMode, as for tritonserver
        ("exit_timeout", -1),
        ("log_verbose", "6"),
        ("strict_readiness", "yes"),
        ("backend_configuration", {"python": {"shm-default-byte-size": 1}}),
    ],
)
def test_a_value_of_the_wrong_type_is_a_type_error_naming_the_option(
    repository: Path, option: str, value: object
) -> None:
    kwargs = {"model_repository": str(repository), option: value}
    server = tritonserver.Server(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=f"^Options.{option} must be "):
        server.start()


def test_a_repository_that_does_not_exist_is_an_internal_error(tmp_path: Path) -> None:
    with pytest.raises(tritonserver.InternalError, match=f"failed to stat file {tmp_path / 'foo'}"):
        tritonserver.Server(model_repository=str(tmp_path / "foo")).start()
    with pytest.raises(tritonserver.InvalidArgumentError, match="Model repository must be specified"):
        tritonserver.Server(model_repository=None).start()  # type: ignore[arg-type]


def test_options_become_the_settings_tcli_serve_would_use(repository: Path) -> None:
    options = tritonserver.Options(
        model_repository=str(repository),
        rate_limiter_mode=tritonserver.RateLimitMode.EXEC_COUNT,
        rate_limiter_resources=[tritonserver.RateLimiterResource("R1", 4, 0)],
        cache_config={"local": {"size": 1048576}},
        metrics_configuration={"": {"summary_latencies": "true"}},
        backend_configuration={"python": {"shm-default-byte-size": "1048576"}},
        log_format=tritonserver.LogFormat.ISO8601,
        log_file="/tmp/x.log",
        metrics_interval=500,
        cpu_metrics=False,
    )
    settings = options.to_settings()
    assert settings.rate_limit and [(r.name, r.count, r.device) for r in settings.rate_limit_resources] == [
        ("R1", 4, 0)
    ]
    assert settings.response_cache_byte_size == 1048576
    assert settings.metrics_config.summary_latencies
    assert settings.backend_config == {"python": {"shm-default-byte-size": "1048576"}}
    assert settings.log_settings is not None and settings.log_settings.log_format == "ISO8601"
    assert settings.log_settings.log_file == "/tmp/x.log"
    assert settings.metrics_interval_ms == 500 and not settings.allow_cpu_metrics
    with pytest.raises(tritonserver.InvalidArgumentError, match="cache_config"):
        dataclasses.replace(options, cache_config={"redis": {"host": "x"}}).to_settings()


# a front end that cannot bind -------------------------------------------------------------------------
@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _segments() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"tcli{os.getpid()}_")}


def test_an_in_process_server_on_a_taken_port_stops_with_an_error_naming_it(
    repository: Path, taken_port: int
) -> None:
    children, segments = set(psutil.Process().children(recursive=True)), _segments()
    server = tritonserver.Server(model_repository=str(repository), http_port=0, metrics_port=taken_port)
    with pytest.raises(tritonserver.UnavailableError) as raised:
        server.start()
    message = str(raised.value)
    assert f"Socket '127.0.0.1:{taken_port}' already in use" in message
    assert "Server(metrics_port=...)" in message and "\n" not in message
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        server.ready()
    assert set(psutil.Process().children(recursive=True)) <= children  # no instance process left
    assert _segments() <= segments  # no shared memory left
    # the same server starts once the port is free to choose
    server.options.metrics_port = 0
    with server:
        assert server.model("add_sub").ready()


def test_the_composed_server_on_a_taken_port_names_the_flag_and_cleans_up(
    repository: Path, taken_port: int
) -> None:
    children, segments = set(psutil.Process().children(recursive=True)), _segments()
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=taken_port
    )
    with pytest.raises(PortInUseError) as raised:
        AppServer(settings).start()
    assert str(raised.value.strerror).startswith(
        f"cannot listen on 127.0.0.1:{taken_port} (--metrics-port {taken_port}): address already in use"
    )
    assert set(psutil.Process().children(recursive=True)) <= children
    assert _segments() <= segments


class _TakenAfterTheCheck(AppServer):
    """A port taken between the check before loading and the bind (another program was quicker)."""

    checked = False

    def check_ports(self) -> None:
        if not self.checked:
            self.checked = True
            return
        super().check_ports()


def test_a_port_taken_after_the_models_loaded_still_stops_cleanly(repository: Path, taken_port: int) -> None:
    children, segments = set(psutil.Process().children(recursive=True)), _segments()
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=taken_port
    )
    server = _TakenAfterTheCheck(settings)
    with pytest.raises(PortInUseError, match=f"--metrics-port {taken_port}"):
        server.start()
    assert server.http_port is not None  # HTTP had bound before the metrics port failed ...
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.http_port)) != 0  # ... and listens no more
    assert set(psutil.Process().children(recursive=True)) <= children  # the loaded model's process ended
    assert _segments() <= segments
    assert server.loop is None


def test_the_last_server_started_writes_the_log_until_it_stops(repository: Path, tmp_path: Path) -> None:
    import logging

    tcli_logger = logging.getLogger("tcli")
    propagate = tcli_logger.propagate
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    explicit = tritonserver.ModelControlMode.EXPLICIT
    first = tritonserver.Server(
        model_repository=str(repository), model_control_mode=explicit, log_info=True, log_file=str(first_log)
    ).start()
    second = tritonserver.Server(
        model_repository=str(repository), model_control_mode=explicit, log_info=True, log_file=str(second_log)
    ).start()
    second.load("add_sub")
    second.stop()
    assert "successfully loaded 'add_sub'" in second_log.read_text()
    first.load("add_sub")  # the first server's log writes again
    first.stop()
    assert "successfully loaded 'add_sub'" in first_log.read_text()
    assert second_log.read_text().count("successfully loaded") == 1
    assert tcli_logger.propagate == propagate  # the program's own logging as it was


def test_repositories_registered_and_unregistered_while_running(repository: Path, tmp_path: Path) -> None:
    other = link_repository(tmp_path / "other", ["simple_identity"])
    server = tritonserver.Server(
        model_repository=str(repository), model_control_mode=tritonserver.ModelControlMode.EXPLICIT
    )
    with server:
        with pytest.raises(tritonserver.InternalError, match="failed to poll from model repository"):
            server.load("simple_identity")  # in no repository yet
        server.register_model_repository(str(other))
        assert ("simple_identity", -1) in server.models()
        model = server.load("simple_identity")
        (response,) = model.infer(inputs={"INPUT0": np.array([["a"]], dtype=object)})
        assert response.outputs["OUTPUT0"].to_string_array().tolist() == [["a"]]
        with pytest.raises(tritonserver.AlreadyExistsError, match="has already been registered"):
            server.register_model_repository(str(other))
        with pytest.raises(tritonserver.InvalidArgumentError, match="repository not found"):
            server.register_model_repository(str(tmp_path / "nowhere"))
        with pytest.raises(tritonserver.UnsupportedError, match="name_mapping"):
            server.register_model_repository(str(tmp_path), {"simple_identity": "renamed"})
        server.unregister_model_repository(str(other))
        assert model.ready()  # loaded models stay loaded, as in Triton
        server.unload("simple_identity")
        with pytest.raises(tritonserver.InternalError, match="failed to poll from model repository"):
            server.load("simple_identity")
        with pytest.raises(tritonserver.InvalidArgumentError, match="repository not found"):
            server.unregister_model_repository(str(other))
    with (
        tritonserver.Server(model_repository=str(repository)) as polled,  # NONE mode
        pytest.raises(tritonserver.UnsupportedError, match="model control mode is not EXPLICIT"),
    ):
        polled.register_model_repository(str(other))
