"""deploy/kustomize/base mirrors the chart's defaults and validates against Kubernetes 1.30;
deploy/argocd/application.yaml is an Application ArgoCD accepts, syncing the chart."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import yaml

from tests.deploy.deploy_helpers import DEPLOY, KUBERNETES, ROOT, only, render_chart, server_container

BASE = DEPLOY / "kustomize" / "base"
APPLICATION = DEPLOY / "argocd" / "application.yaml"


def _kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    return loaded


def _base_documents() -> list[dict[str, Any]]:
    return [
        document
        for resource in _kustomization()["resources"]
        for document in yaml.safe_load_all((BASE / resource).read_text())
        if document
    ]


def test_kustomization_names_files_that_exist() -> None:
    kustomization = _kustomization()
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    for resource in kustomization["resources"]:
        assert (BASE / resource).is_file(), resource
    assert {d["kind"] for d in _base_documents()} == {"Deployment", "Service"}
    # the image override matches the image the Deployment names
    image = server_container(only(_base_documents(), "Deployment"))["image"]
    assert any(image.startswith(entry["name"] + ":") for entry in kustomization["images"])


def test_every_base_manifest_validates_against_kubernetes_1_30() -> None:
    for document in _base_documents():
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def test_base_mirrors_the_charts_defaults() -> None:
    """The pod and the Services are the chart's, release `tcli`; only the credentials differ (here
    an optional Secret by a fixed name, in the chart one the values name)."""
    chart = render_chart(release="tcli")
    base = _base_documents()
    base_pod = copy.deepcopy(only(base, "Deployment")["spec"]["template"])
    assert server_container({"spec": {"template": base_pod}}).pop("envFrom") == [
        {"secretRef": {"name": "tcli-cloud-credentials", "optional": True}}
    ]
    chart_deployment = only(chart, "Deployment")
    assert base_pod == chart_deployment["spec"]["template"]
    assert only(base, "Deployment")["spec"]["replicas"] == chart_deployment["spec"]["replicas"]
    services = {d["metadata"]["name"]: d["spec"] for d in base if d["kind"] == "Service"}
    assert services == {d["metadata"]["name"]: d["spec"] for d in chart if d["kind"] == "Service"}


def test_argocd_application_syncs_the_chart_automatically() -> None:
    application = yaml.safe_load(APPLICATION.read_text())
    assert application["apiVersion"] == "argoproj.io/v1alpha1"
    assert application["kind"] == "Application"
    assert application["metadata"]["name"] and application["metadata"]["namespace"] == "argocd"
    spec = application["spec"]
    assert spec["project"]
    source = spec["source"]
    assert source["path"] == "deploy/helm/tcli" and (ROOT / source["path"] / "Chart.yaml").is_file()
    assert source["repoURL"].startswith("https://") and source["targetRevision"]
    assert spec["destination"]["server"] and spec["destination"]["namespace"]
    assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    # the values it passes are ones the chart accepts (its schema runs on render)
    rendered = render_chart(source["helm"]["valuesObject"], release=source["helm"]["releaseName"])
    container = server_container(only(rendered, "Deployment"))
    assert container["envFrom"] == [{"secretRef": {"name": "tcli-cloud-credentials"}}]
