"""The Helm chart: lint, schema, hardening, alerts, a server-side dry run and an install."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from goodput_operator import metrics, names
from goodput_operator.decide.priority import PRIORITY_CLASS, PriorityClass, priority_class
from tests import helm
from tests.conftest import Cluster, wait_for

ALL_OPTIONAL = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                "networkPolicy": {"enabled": True}, "reports": {"tlsSecret": "reports-tls"},
                "watchNamespaces": ["team-a", "team-b"]}


def render(namespace: str = "goodput-system", **values: Any) -> list[dict[str, Any]]:
    out = helm.helm("template", "gp", str(helm.CHART), "--namespace", namespace,
                    *helm.set_flags(values)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return found


@pytest.mark.parametrize("values", [{}, ALL_OPTIONAL], ids=["defaults", "every-option"])
def test_helm_lint_strict_passes(values: dict[str, Any]) -> None:
    helm.helm("lint", "--strict", str(helm.CHART), *helm.set_flags(values))


@pytest.mark.parametrize(("values", "named"), [
    ({"replicaCount": -1}, "/replicaCount"),
    ({"replicaCount": "two"}, "/replicaCount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"prometheusRule": {"goodputThreshold": 1.5}}, "/prometheusRule/goodputThreshold"),
    ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
    ({"replicas": 2}, "additional properties 'replicas' not allowed"),
])
def test_values_that_do_not_fit_are_refused_naming_the_key(values: dict[str, Any],
                                                           named: str) -> None:
    proc = helm.helm("template", "gp", str(helm.CHART), *helm.set_flags(values), check=False)
    assert proc.returncode != 0
    assert named in proc.stderr, proc.stderr


def test_the_charts_priority_classes_carry_the_grants_the_operator_reads() -> None:
    classes = [{"name": "research-urgent", "value": 100000, "namespaces": ["research", "ml"],
                "preemptAcrossNamespaces": True},
               {"name": "batch", "value": 10, "preemptionPolicy": "Never"}]
    rendered = [d for d in render(priorityClasses=classes) if d["kind"] == "PriorityClass"]
    views = {d["metadata"]["name"]: priority_class(d, PRIORITY_CLASS) for d in rendered}
    assert views["research-urgent"] == PriorityClass(
        "research-urgent", 100000, PRIORITY_CLASS, preempts=True, across_namespaces=True,
        namespaces=frozenset({"research", "ml"}))
    assert views["batch"] == PriorityClass("batch", 10, PRIORITY_CLASS, preempts=False)
    assert not [d for d in render() if d["kind"] == "PriorityClass"]  # none by default


def test_the_deployment_is_hardened() -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "--leader-election" in container["args"]
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}


def test_options_render_what_they_promise() -> None:
    docs = render(**ALL_OPTIONAL)
    args = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert any(a.startswith("--report-url=https://gp-goodput-operator-reports.") for a in args)
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    assert one(docs, "NetworkPolicy")["spec"]["policyTypes"] == ["Ingress"]
    reports = one(docs, "Service", "-reports")
    assert reports["spec"]["selector"][names.LEADER_LABEL] == "true"
    dashboard = one(docs, "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["goodput-operator.json"])["panels"]


def test_alerts_are_valid_rules_over_exported_metrics(tmp_path: Path) -> None:
    rule = one(render(**ALL_OPTIONAL), "PrometheusRule")
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"GoodputQuarantineStorm", "GoodputJobRecoveringTooLong",
                           "GoodputBelowThreshold", "GoodputAutoscalerLimited"}
    known = metrics.series_names()
    for name, expr in alerts.items():
        used = set(re.findall(r"\bgoodput_[a-z_]+", expr))
        assert used and used <= known, f"{name}: {used - known}"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_rendered_manifests_pass_a_server_side_dry_run(crds: Cluster) -> None:
    """Everything but the Prometheus Operator's kinds (the sandbox has no such CRDs)."""
    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    crds.kubectl("create", "namespace", namespace)
    try:
        values = {**ALL_OPTIONAL, "serviceMonitor": {"enabled": False},
                  "prometheusRule": {"enabled": False}}
        docs = render(namespace, **values)
        result = crds.kubectl("apply", "--dry-run=server", "-f", "-",
                              input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                     "items": docs}))
        assert result.stdout.count("(server dry run)") == len(docs), result.stdout
    finally:
        crds.kubectl("delete", "namespace", namespace, "--wait=false")


def test_helm_install_into_the_sandbox(crds: Cluster) -> None:
    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    try:
        helm.install(crds.kubeconfig, "gp", namespace)
        status = json.loads(helm.helm("status", "gp", "-n", namespace, "-o", "json",
                                      kubeconfig=crds.kubeconfig).stdout)
        assert status["info"]["status"] == "deployed"
        assert "Goodput Operator" in status["info"]["notes"]
        deployment = json.loads(crds.kubectl("get", "deployment", "gp-goodput-operator", "-n",
                                             namespace, "-o", "json").stdout)
        assert deployment["spec"]["replicas"] == 2
        wait_for(lambda: crds.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout,
                 timeout=60, what="the Deployment's pods to be created")
        for kind, name in (("pdb", "gp-goodput-operator"),
                           ("service", "gp-goodput-operator-metrics"),
                           ("service", "gp-goodput-operator-reports"),
                           ("serviceaccount", "gp-goodput-operator"),
                           ("clusterrole", "gp-goodput-operator"),
                           ("role", "gp-goodput-operator-leader-election"),
                           ("configmap", "gp-goodput-operator-dashboard")):
            crds.kubectl("get", kind, name, "-n", namespace)
    finally:
        helm.helm("uninstall", "gp", "-n", namespace, "--wait", kubeconfig=crds.kubeconfig,
                  check=False)
        crds.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert crds.kubectl("get", "crd", "trainingjobs.goodput.dev").returncode == 0, \
        "an uninstall keeps the CRDs (and so everyone's jobs)"
