"""The sandbox's Kueue: which webhooks it registers and how, its configuration, and the
MultiKueue wiring `goodput sandbox connect` applies."""

from __future__ import annotations

import base64

import pytest
import yaml

from goodput_operator.sandbox import build, kueue
from goodput_operator.sandbox.cluster import Sandbox
from goodput_operator.sandbox.versions import KUEUE_COMPONENT

pytestmark = pytest.mark.unit

MANIFESTS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  name: mjob.kb.io
  rules: [{apiGroups: [batch], resources: [jobs]}]
- clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  name: mpod.kb.io
  rules: [{apiGroups: [""], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- clientConfig: {service: {name: webhook-service, namespace: system,
                 path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}}
  name: vclusterqueue.kb.io
  rules: [{apiGroups: [kueue.x-k8s.io], resources: [clusterqueues]}]
- clientConfig: {service: {name: webhook-service, namespace: system,
                 path: /validate-ray-io-v1-raycluster}}
  name: vraycluster.kb.io
  rules: [{apiGroups: [ray.io], resources: [rayclusters]}]
"""


def test_only_kueue_and_batch_job_webhooks_are_registered_by_url_and_ca() -> None:
    found = kueue.webhook_configurations(MANIFESTS, 9443, b"PEM")
    assert [c["kind"] for c in found] == ["MutatingWebhookConfiguration",
                                          "ValidatingWebhookConfiguration"]
    hooks = [h for c in found for h in c["webhooks"]]
    assert [h["name"] for h in hooks] == ["mjob.kb.io", "vclusterqueue.kb.io"]
    assert hooks[0]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": base64.b64encode(b"PEM").decode()}


def test_the_real_manifests_keep_the_kueue_and_job_webhooks() -> None:
    source = build.module_dir(KUEUE_COMPONENT) if build.is_built(KUEUE_COMPONENT) else None
    if source is None:
        pytest.skip("Kueue not built here")
    text = (source / "config" / "components" / "webhook" / "manifests.yaml").read_text()
    hooks = [h for c in kueue.webhook_configurations(text, 1, b"x") for h in c["webhooks"]]
    paths = {h["clientConfig"]["url"].split(":1", 1)[1] for h in hooks}
    assert "/mutate-batch-v1-job" in paths
    assert "/validate-kueue-x-k8s-io-v1beta2-workload" in paths
    assert not any("pod" in p.split("-") for p in paths)


def test_the_configuration_names_our_kinds_as_external_frameworks() -> None:
    config = kueue.configuration(Sandbox("region-a"), {"health": 1, "metrics": 2,
                                                        "webhook": 3}, build.cache_root())
    assert config["integrations"]["externalFrameworks"] == list(kueue.FRAMEWORKS)
    assert config["multiKueue"]["externalFrameworks"] == [
        {"name": f} for f in kueue.FRAMEWORKS]
    assert config["multiKueue"]["origin"] == "region-a"
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_connect_wires_each_worker_alone_and_all_of_them() -> None:
    items = kueue.wiring([("region-a", "A"), ("region-b", "B")])
    by_kind: dict[str, list[str]] = {}
    for item in items:
        by_kind.setdefault(item["kind"], []).append(item["metadata"]["name"])
    assert by_kind["Secret"] == ["region-a-kubeconfig", "region-b-kubeconfig"]
    assert by_kind["MultiKueueCluster"] == ["region-a", "region-b"]
    assert by_kind["AdmissionCheck"] == ["region-a", "region-b", kueue.ALL_WORKERS]
    configs = {i["metadata"]["name"]: i["spec"]["clusters"] for i in items
               if i["kind"] == "MultiKueueConfig"}
    assert configs == {"region-a": ["region-a"], "region-b": ["region-b"],
                       kueue.ALL_WORKERS: ["region-a", "region-b"]}
    secret = next(i for i in items if i["kind"] == "Secret")
    assert secret["metadata"]["namespace"] == kueue.NAMESPACE
    assert secret["stringData"] == {"kubeconfig": "A"}
