"""deploy/'s observability artefacts: the Prometheus rules (deploy/prometheus) pass promtool's checker
and their own unit tests, in which each alert is seen firing and staying quiet; the Grafana dashboard
(deploy/grafana) is well formed and its queries are PromQL; and every metric the dashboard or the
rules read is one a real tcli server writes after some traffic, so no panel or alert stays empty
because of a misspelt or missing metric.

promtool comes from the Debian package `prometheus` (`apt-get install -y prometheus`).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "tcli-rules.yaml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "tcli-rules.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tcli-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target, not by the server


# ----------------------------------------------------------------------------------------- helpers
def promtool(*args: str) -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed: apt-get install -y prometheus")
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def as_promql(query: str) -> str:
    """A dashboard query with Grafana's variables replaced by values Prometheus would receive."""
    return query.replace("$__rate_interval", "1m").replace("$model", ".*")


# what PromQL writes between names that is not a metric: strings, label matchers, ranges, label lists
_NOT_NAMES = re.compile(
    r'"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)'
)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are neither a function or
    aggregation (followed by an opening parenthesis), a keyword, nor part of a number (1e6)."""
    text = _NOT_NAMES.sub(" ", expr)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][\w:]*", text):
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end() :].lstrip()[:1]
        if before.isalnum() or before in "_.$" or after == "(" or match[0].lower() in _KEYWORDS:
            continue
        names.add(match[0])
    return names


def exposed_names(text: str) -> set[str]:
    """Series names a scrape of `text` gives Prometheus. prometheus_client's parser checks the text
    but names every counter sample `<family>_total` (OpenMetrics' convention), while Triton's counters
    have no `_total`: the sample lines themselves decide which of the two names is written."""
    from prometheus_client.parser import text_string_to_metric_families

    written = {re.split(r"[{ ]", line)[0] for line in text.splitlines() if line and not line.startswith("#")}
    names = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.type == "counter" and name not in written:
                name = name.removesuffix("_total")
            names.add(name)
    assert names == written
    return names


def test_metric_names_are_read_out_of_promql() -> None:
    expr = (
        'sum by (model) (rate(nv_inference_count{model=~"$model"}[$__rate_interval])) / 1e6'
        " * clamp_min(max without (version) (tcli_model_ready), 1e-9)"
        " and on (job) max_over_time(job:tcli_servers:count[1d]) unless up == 0"
    )
    assert metric_names(expr) == {"nv_inference_count", "tcli_model_ready", "job:tcli_servers:count", "up"}


# ----------------------------------------------------------------------------------------- rules
def test_rules_pass_promtool_check() -> None:
    assert "SUCCESS" in promtool("check", "rules", str(RULES))


def test_rules_pass_their_unit_tests() -> None:
    """Every alert is tested firing and not firing (deploy/prometheus/tcli-rules.test.yaml)."""
    assert "SUCCESS" in promtool("test", "rules", str(RULES_TEST))
    tested = yaml.safe_load(RULES_TEST.read_text())["tests"]
    checks = [check for test in tested for check in test.get("alert_rule_test", [])]
    for alert in (rule["alert"] for rule in rules() if "alert" in rule):
        expectations = [bool(c["exp_alerts"]) for c in checks if c["alertname"] == alert]
        assert True in expectations and False in expectations, f"{alert}: test it firing and quiet"


def test_the_autoscaler_metric_is_recorded() -> None:
    """The Helm chart's HorizontalPodAutoscaler reads this name (through prometheus-adapter)."""
    hpa = next(r for r in rules() if r.get("record") == "pod:tcli_queue_duration_us_per_request:rate1m")
    assert "without (model, version)" in hpa["expr"]  # keeps the pod's own labels


# ----------------------------------------------------------------------------------------- dashboard
def test_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 36
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["model"]["datasource"] == DATASOURCE
    assert variables["model"]["definition"].startswith("label_values(")
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])
    for panel in board["panels"]:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_dashboard_queries_are_promql(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule: it has no checker for a bare expression)."""
    records = [
        {"record": f"dashboard:query{i}", "expr": as_promql(q)} for i, q in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    assert "SUCCESS" in promtool("check", "rules", str(path))


# ----------------------------------------------------------------------------------------- vs tcli
@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of a real tcli server (the add_sub example) after successful and failed requests."""
    try:
        importlib.import_module("server.backends.python.host")
    except Exception:
        pytest.skip("the python backend host is not available")
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from server.app import Server, ServerSettings

    repository = tmp_path_factory.mktemp("observability") / "models"
    shutil.copytree(ROOT / "model_repository" / "add_sub", repository / "add_sub")
    settings = ServerSettings(
        [repository], host="127.0.0.1", http_port=0, metrics_port=0, allow_grpc=False, exit_timeout_secs=10
    )
    with Server(settings) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        for _ in range(3):
            client.infer("add_sub", inputs)
        with pytest.raises(InferenceServerException):
            client.infer("add_sub", inputs[:1])  # a missing input: a failed request
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30) as answer:
            yield answer.read().decode()


def test_the_server_scrape_has_the_traffic(scrape: str) -> None:
    assert 'nv_inference_request_success{model="add_sub",version="1"} 3.0' in scrape
    assert 'tcli_model_ready{model="add_sub",version="1"} 1.0' in scrape


def test_every_metric_read_by_the_dashboard_and_the_rules_is_exposed(scrape: str) -> None:
    exposed = exposed_names(scrape)
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    read_by = {"dashboard": set().union(*(metric_names(q) for q in dashboard_queries()))}
    read_by["rules"] = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    assert not read_by["dashboard"] & recorded  # the dashboard works without the rules loaded
    for source, names in read_by.items():
        assert names, source
        missing = sorted(names - exposed - recorded - PROMETHEUS_OWN)
        assert not missing, f"the {source} read metrics a tcli server does not write: {missing}"
