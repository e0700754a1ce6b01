"""deploy/nomad/tcli.nomad.hcl, parsed with python-hcl2: the docker task, its health checks, the
rolling update, the optional GPU device and the autoscaling policy; and its arguments served after the
image's ENTRYPOINT until every check path answers 200."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2 import SerializationOptions

from tests.deploy.deploy_helpers import BIN, DEPLOY, HEALTH_PATHS, Served, add_sub_repository, free_port

JOB_FILE = DEPLOY / "nomad" / "tcli.nomad.hcl"


def _one(blocks: list[dict[str, Any]], label: str | None = None) -> dict[str, Any]:
    """The single block of a list (by its label when the block type takes one)."""
    if label is None:
        assert len(blocks) == 1, blocks
        return blocks[0]
    (found,) = [b[label] for b in blocks if label in b]
    return found


@pytest.fixture(scope="module")
def parsed() -> dict[str, Any]:
    options = SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
    with JOB_FILE.open() as source:
        return hcl2.load(source, serialization_options=options)


@pytest.fixture(scope="module")
def group(parsed: dict[str, Any]) -> dict[str, Any]:
    job = _one(parsed["job"], "tcli")
    assert job["type"] == "service"
    return _one(job["group"], "server")


@pytest.fixture(scope="module")
def task(group: dict[str, Any]) -> dict[str, Any]:
    return _one(group["task"], "tcli")


def _variables(parsed: dict[str, Any]) -> dict[str, Any]:
    return {name: body.get("default") for block in parsed["variable"] for name, body in block.items()}


def test_docker_task_runs_the_image_on_tritons_ports(
    parsed: dict[str, Any], group: dict[str, Any], task: dict[str, Any]
) -> None:
    assert task["driver"] == "docker"
    config = _one(task["config"])
    assert config["image"] == "${var.image}" and _variables(parsed)["image"]
    assert "entrypoint" not in config and "command" not in config  # the image's `tcli serve`
    ports = {name: body["to"] for block in _one(group["network"])["port"] for name, body in block.items()}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert set(config["ports"]) == set(ports)


def test_service_checks_readiness_and_liveness_over_http(group: dict[str, Any]) -> None:
    service = next(s for s in group["service"] if s["port"] == "http")
    checks = {check["path"]: check for check in service["check"]}
    assert set(checks) == set(HEALTH_PATHS)
    assert all(check["type"] == "http" for check in checks.values())
    # a wedged server is restarted, but not while it is still loading its models
    assert _one(checks["/v2/health/live"]["check_restart"])["grace"]
    metrics = next(s for s in group["service"] if s["port"] == "metrics")
    assert "prometheus" in metrics["tags"]


def test_rolling_update_is_health_checked_and_reverts(group: dict[str, Any]) -> None:
    update = _one(group["update"])
    assert update["health_check"] == "checks"
    assert update["auto_revert"] is True
    assert re.fullmatch(r"\d+[smh]", update["min_healthy_time"])
    assert re.fullmatch(r"\d+[smh]", update["healthy_deadline"])


def test_gpu_device_only_when_asked_for(parsed: dict[str, Any], task: dict[str, Any]) -> None:
    resources = _one(task["resources"])
    device = _one(resources["dynamic"], "device")
    assert device["labels"] == ["nvidia/gpu"]
    assert "var.gpus > 0" in device["for_each"]  # no device block at the default of 0 GPUs
    assert _variables(parsed)["gpus"] == 0


def test_scaling_policy_follows_the_queue_time(group: dict[str, Any]) -> None:
    scaling = _one(group["scaling"])
    assert scaling["enabled"] is True and 1 <= scaling["min"] < scaling["max"]
    policy = _one(scaling["policy"])
    check = _one(policy["check"], "queue_time")
    assert check["source"] == "prometheus"
    for counter in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
        assert f"rate({counter}{{" in check["query"]
    strategy = _one(check["strategy"], "target-value")
    assert strategy["target"] > 0


def _seconds(duration: str) -> float:
    value, unit = float(duration[:-1]), duration[-1]
    return value * {"s": 1, "m": 60, "h": 3600}[unit]


def test_kill_timeout_covers_the_drain(task: dict[str, Any]) -> None:
    args = dict(a.removeprefix("--").split("=", 1) for a in _one(task["config"])["args"])
    assert _seconds(task["kill_timeout"]) > float(args["exit-timeout-secs"])


def test_job_arguments_serve_and_every_check_answers(
    parsed: dict[str, Any], group: dict[str, Any], task: dict[str, Any], tmp_path: Path
) -> None:
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    found = re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M)
    assert found, "the image has no exec-form ENTRYPOINT"
    entrypoint = json.loads(found.group(1))
    repository = add_sub_repository(tmp_path)
    args = [a.replace("${var.model_repository}", str(repository)) for a in _one(task["config"])["args"]]
    ports = {name: free_port() for name in ("http", "grpc", "metrics")}
    local = [f"--{name}-port={port}" for name, port in ports.items()] + ["--http-address=127.0.0.1"]
    env = {k: v.replace("/alloc", str(tmp_path / "alloc"), 1) for k, v in _one(task["env"]).items()}
    argv = [str(BIN / entrypoint[0]), *entrypoint[1:], *args, *local]
    with Served(argv, ports["http"], env) as server:
        service = next(s for s in group["service"] if s["port"] == "http")
        for check in service["check"]:
            server.wait_ok(check["path"])
