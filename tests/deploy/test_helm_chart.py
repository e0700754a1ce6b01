"""deploy/helm/tcli: rendered offline by Helm's own library (helm_python), linted strictly, every
manifest validated against Kubernetes 1.30's schemas, its parts checked, and the server started with
the chart's own command line until every probe path answers 200."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.deploy.deploy_helpers import (
    BIN,
    CHART,
    KUBERNETES,
    Served,
    add_sub_repository,
    free_port,
    only,
    render_chart,
    server_container,
)

ALL_OPTIONS = yaml.safe_load((CHART / "ci" / "all-options-values.yaml").read_text())
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@pytest.fixture(scope="module")
def defaults() -> list[dict[str, Any]]:
    return render_chart()


@pytest.fixture(scope="module")
def everything() -> list[dict[str, Any]]:
    return render_chart(ALL_OPTIONS)


def _args(container: dict[str, Any]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])


def test_chart_is_apiversion_v2() -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.metadata["apiVersion"] == "v2"
        assert chart.schema is not None  # values.schema.json is enforced at install


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_helm_lint_strict_finds_nothing(values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings fail in strict mode
    assert not problems and not report["errors"], report


def test_schema_refuses_a_wrong_value() -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match="numGpus"):
        chart.render({"image": {"numGpus": "one"}})


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_every_manifest_validates_against_kubernetes_1_30(values: dict[str, Any] | None) -> None:
    documents = render_chart(values)
    for document in documents:
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: not in Kubernetes' schemas; test_service_monitor checks its shape
        kubernetes_validate.validate(document, KUBERNETES, strict=True)
    assert {d["kind"] for d in documents} >= {"Deployment", "Service", "PodDisruptionBudget"}


def test_the_validator_would_catch_a_mistake(defaults: list[dict[str, Any]]) -> None:
    broken = copy.deepcopy(only(defaults, "Deployment"))
    server_container(broken)["readinesProbe"] = {}  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_container_runs_tritonserver_with_tritons_flags(defaults: list[dict[str, Any]]) -> None:
    container = server_container(only(defaults, "Deployment"))
    assert container["command"] == ["tritonserver"]
    assert _args(container) == {
        "model-store": "s3://my-bucket/model_repository",
        "model-control-mode": "poll",
        "repository-poll-secs": "15",
        "strict-model-config": "false",
        "log-verbose": "0",
        "exit-timeout-secs": "30",
    }


def test_ports_and_probes(defaults: list[dict[str, Any]]) -> None:
    container = server_container(only(defaults, "Deployment"))
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
    }
    paths = {probe: container[probe]["httpGet"] for probe in PROBES}
    assert paths == {
        "startupProbe": {"path": "/v2/health/live", "port": "http"},
        "livenessProbe": {"path": "/v2/health/live", "port": "http"},
        "readinessProbe": {"path": "/v2/health/ready", "port": "http"},
    }
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # slow model loads
    services = [d for d in defaults if d["kind"] == "Service"]
    served = {(p["name"], p["port"], p["targetPort"]) for s in services for p in s["spec"]["ports"]}
    assert served == {("http", 8000, "http"), ("grpc", 8001, "grpc"), ("metrics", 8002, "metrics")}
    labels = only(defaults, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for service in services:
        assert service["spec"]["selector"].items() <= labels.items()


def test_runs_as_non_root_on_a_read_only_root(defaults: list[dict[str, Any]]) -> None:
    pod = only(defaults, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"]
    container = server_container(only(defaults, "Deployment"))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # what the server writes (temporary files, the buckets' local copies) lands on an emptyDir
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    env = {e["name"]: e["value"] for e in container["env"]}
    for variable in ("TMPDIR", "TRITON_AWS_MOUNT_DIRECTORY", "TRITON_GCS_MOUNT_DIRECTORY"):
        mount = next(path for path in mounts if env[variable].startswith(path))
        assert mounts[mount] in empty_dirs, variable
    assert "resources" in container and container["resources"]["requests"]


def test_gpu_limits_only_when_gpus_are_asked_for(defaults: list[dict[str, Any]]) -> None:
    assert "nvidia.com/gpu" not in server_container(only(defaults, "Deployment"))["resources"]["limits"]
    gpus = server_container(only(render_chart({"image": {"numGpus": 2}}), "Deployment"))
    assert gpus["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert gpus["resources"]["limits"]["memory"] == "4Gi"  # merged with the other limits


@pytest.mark.parametrize("values", [None, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_grace_period_covers_the_drain(values: dict[str, Any] | None) -> None:
    pod = only(render_chart(values), "Deployment")["spec"]["template"]["spec"]
    container = server_container({"spec": {"template": {"spec": pod}}})
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = float(_args(container)["exit-timeout-secs"])
    assert pod["terminationGracePeriodSeconds"] > sleep + drain


def test_pod_disruption_budget_covers_the_pods(defaults: list[dict[str, Any]]) -> None:
    budget = only(defaults, "PodDisruptionBudget")
    assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 1
    labels = only(defaults, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_service_monitor(everything: list[dict[str, Any]]) -> None:
    """Checked by shape: ServiceMonitor is a CRD, outside Kubernetes' own schemas."""
    monitor = only(everything, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "15s"}
    matched = [
        s
        for s in everything
        if s["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in matched] == ["demo-tcli-metrics"]
    assert any(p["name"] == "metrics" for p in matched[0]["spec"]["ports"])
    assert matched[0]["spec"]["type"] == "ClusterIP"  # metrics stay inside the cluster


def test_hpa_scales_on_the_metric_the_adapter_rule_produces(everything: list[dict[str, Any]]) -> None:
    hpa = only(everything, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "demo-tcli",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    adapter = _adapter_config(everything)
    (rule,) = adapter["rules"]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"] == "avg_time_queue_us"
    assert re.fullmatch(rule["name"]["matches"], "nv_inference_queue_duration_us")
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}  # a per-pod metric
    for counter in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
        assert f"{counter}{{<<.LabelMatchers>>}}" in rule["metricsQuery"]
    # the HPA owns the replica count
    assert "replicas" not in only(everything, "Deployment")["spec"]


def _adapter_config(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [d for d in documents if d["metadata"]["name"].endswith("-adapter-rule")]
    parsed: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return parsed


def test_cloud_credentials_secret(everything: list[dict[str, Any]]) -> None:
    secret = only(everything, "Secret")
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"} <= secret["data"].keys()
    container = server_container(only(everything, "Deployment"))
    assert container["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    existing = render_chart({"secret": {"existingSecret": "my-aws"}})
    assert not [d for d in existing if d["kind"] == "Secret"]
    assert server_container(only(existing, "Deployment"))["envFrom"] == [{"secretRef": {"name": "my-aws"}}]


def test_dragonfly_config_is_mounted_where_the_agent_looks(everything: list[dict[str, Any]]) -> None:
    config_map = next(d for d in everything if d["metadata"]["name"].endswith("-dragonfly"))
    config = json.loads(config_map["data"]["dragonfly_config.json"])
    assert config["proxy"].startswith("http://") and config["header"] and config["filter"]
    pod = only(everything, "Deployment")["spec"]["template"]["spec"]
    container = server_container(only(everything, "Deployment"))
    path = next(e["value"] for e in container["env"] if e["name"] == "TRITON_DRAGONFLY_CONFIG_PATH")
    volume = next(
        v["name"]
        for v in pod["volumes"]
        if v.get("configMap", {}).get("name") == config_map["metadata"]["name"]
    )
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume)
    assert path == f"{mount['mountPath']}/dragonfly_config.json"


def test_git_sync_keeps_the_polled_repository(everything: list[dict[str, Any]]) -> None:
    pod = only(everything, "Deployment")["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "git-sync")
    first = next(c for c in pod["initContainers"] if c["name"] == "git-sync-init")
    for container in (sidecar, first):
        assert container["image"].startswith("registry.k8s.io/git-sync/git-sync:")
        assert {"--root=/git", "--link=current", "--repo=https://github.com/example/models.git"} <= set(
            container["args"]
        )
    assert "--one-time" in first["args"] and any(a.startswith("--period=") for a in sidecar["args"])
    server = server_container(only(everything, "Deployment"))
    assert _args(server)["model-store"] == "/git/current/model_repository"
    assert _args(server)["model-control-mode"] == "poll"
    shared = {m["name"] for m in sidecar["volumeMounts"]} & {m["name"] for m in server["volumeMounts"]}
    assert shared == {"models"}


def test_charts_command_line_serves_and_every_probe_answers(tmp_path: Path) -> None:
    """The rendered command and args, with the repository replaced by add_sub in a temporary folder
    and free ports: each probe path the chart uses, and the metrics the adapter rule reads."""
    deployment = only(render_chart(), "Deployment")
    container = server_container(deployment)
    repository = add_sub_repository(tmp_path)
    args = [f"--model-store={repository}" if a.startswith("--model-store=") else a for a in container["args"]]
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    local = [f"--{name}-port={port}" for name, port in ports.items()] + ["--http-address=127.0.0.1"]
    # the chart's environment, its /tmp (the scratch volume) moved into the test's folder
    env = {e["name"]: e["value"].replace("/tmp", str(tmp_path / "scratch"), 1) for e in container["env"]}
    (tmp_path / "scratch").mkdir()
    with Served([str(BIN / container["command"][0]), *args, *local], ports["http"], env) as server:
        for probe in PROBES:
            http_get = container[probe]["httpGet"]
            assert http_get["port"] == "http"
            server.wait_ok(http_get["path"])
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5) as page:
            metrics = page.read().decode()
        for counter in ("nv_inference_queue_duration_us", "nv_inference_request_success"):
            assert re.search(rf"^{counter}\{{", metrics, re.M), counter
