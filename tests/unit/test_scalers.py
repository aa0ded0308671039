"""What the autoscaler peers are given (sandbox/scalers.py, bench/autoscaling_peers.py): the
adapter's rules, the APIServices, HPAs and ScaledObjects; the KEDA fields checked against
its CRD's schema where KEDA v2.21 is built here, and the wrapper carrying its one replace."""

from __future__ import annotations

import re

import pytest
import yaml
from bench import autoscaling_peers as bench

from goodput_operator.sandbox import build, scalers
from goodput_operator.sandbox.versions import KEDA_COMPONENT, PROMETHEUS_ADAPTER_COMPONENT
from tests.unit.test_peers import schema_keys

pytestmark = pytest.mark.unit


def test_the_adapter_serves_each_vllm_gauge_per_pod_and_the_finished_requests_rate() -> None:
    rules = scalers.adapter_rules()["rules"]
    assert [r["name"]["as"] for r in rules] == [
        "vllm_num_requests_waiting", "vllm_num_requests_running",
        "vllm_${1}_per_second"]
    for rule in rules:  # a custom metric names a pod of a namespace: both labels required
        assert 'namespace!=""' in rule["seriesQuery"] and 'pod!=""' in rule["seriesQuery"]
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                                  "pod": {"resource": "pod"}}
    finished = rules[-1]
    assert re.match(finished["name"]["matches"], "vllm:request_success_total")
    assert "rate(<<.Series>>{<<.LabelMatchers>>}[1m])" in finished["metricsQuery"]


def test_an_api_service_reaches_loopback_through_an_external_name_service() -> None:
    service, api = scalers.api_service(scalers.CUSTOM_METRICS, 40123)
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost",
                               "ports": [{"name": "https", "port": 40123, "protocol": "TCP"}]}
    assert api["metadata"]["name"] == "v1beta1.custom.metrics.k8s.io"
    assert (api["spec"]["group"], api["spec"]["version"]) == ("custom.metrics.k8s.io",
                                                              "v1beta1")
    assert api["spec"]["service"] == {"name": service["metadata"]["name"],
                                      "namespace": scalers.NAMESPACE, "port": 40123}


def test_an_hpa_keeps_kubernetes_defaults_and_reads_each_metric_per_pod() -> None:
    hpa = scalers.hpa("chat", "ns", {"vllm_num_requests_waiting": 8, "rate": 4}, 64)
    assert "behavior" not in hpa["spec"]
    assert hpa["spec"]["metrics"] == [
        {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                  "target": {"type": "AverageValue", "averageValue": "8"}}},
        {"type": "Pods", "pods": {"metric": {"name": "rate"},
                                  "target": {"type": "AverageValue", "averageValue": "4"}}}]


def test_keda_polls_at_its_default_unless_tuned() -> None:
    default = scalers.scaled_object("chat", "ns", "http://p:9090", {"sum(q)": 8}, 64)
    assert "pollingInterval" not in default["spec"]
    assert default["spec"]["triggers"] == [{"type": "prometheus", "metadata": {
        "serverAddress": "http://p:9090", "query": "sum(q)", "threshold": "8"}}]
    tuned = scalers.scaled_object("chat", "ns", "http://p:9090", {"sum(q)": 8, "r": 4}, 64,
                                  polling_seconds=5)
    assert tuned["spec"]["pollingInterval"] == 5
    assert [t["metadata"]["threshold"] for t in tuned["spec"]["triggers"]] == ["8", "4"]


@pytest.mark.parametrize(("scaler", "metrics"), [
    ("hpa", ["vllm_num_requests_waiting"]),
    ("hpa-tuned", ["vllm_num_requests_waiting", "vllm_request_success_per_second"]),
])
def test_each_hpa_of_the_bench_reads_what_the_adapter_serves(scaler: str,
                                                              metrics: list[str]) -> None:
    target = bench.Target(scaler, "flash", [30.0] * 120)
    [hpa] = bench.scaler_objects(target, "http://p", minimum=1)
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == metrics
    served = {r["name"]["as"].replace("${1}", "request_success")
              for r in scalers.adapter_rules()["rules"]}
    assert set(metrics) <= served


def test_every_target_starts_with_what_its_first_minute_needs_and_the_same_bounds() -> None:
    for scaler in bench.SCALERS:
        target = bench.Target(scaler, "bursty", [30.0] * 60 + [90.0] * 60)
        assert target.start == 9  # 30 req/s at 4 per replica, 10% to spare
        [obj] = bench.scaler_objects(target, "http://p", minimum=target.start)
        spec = obj["spec"].get("scaling", obj["spec"])
        low = spec.get("minReplicas", spec.get("minReplicaCount"))
        high = spec.get("maxReplicas", spec.get("maxReplicaCount"))
        assert (low, high) == (9, bench.MAX), scaler


def test_ours_meets_the_target_only_below_both_peers_at_no_more_replica_seconds() -> None:
    def rows(ours: tuple[int, int]) -> list[dict[str, object]]:
        return [{"trace": "flash", "scaler": "hpa", "slo_violation_s": 100, "replica_s": 900},
                {"trace": "flash", "scaler": "keda", "slo_violation_s": 80, "replica_s": 1000},
                {"trace": "flash", "scaler": "goodput", "slo_violation_s": ours[0],
                 "replica_s": ours[1]}]
    assert bench.met(rows((79, 900)), "flash")
    assert not bench.met(rows((80, 900)), "flash")      # as many as KEDA
    assert not bench.met(rows((10, 901)), "flash")      # more replica-seconds than the HPA


def test_the_keda_wrapper_carries_its_one_replace() -> None:
    assert KEDA_COMPONENT.replaces and not PROMETHEUS_ADAPTER_COMPONENT.replaces
    assert KEDA_COMPONENT.key != KEDA_COMPONENT.__class__(
        **{**KEDA_COMPONENT.__dict__, "replaces": {}}).key  # a different graph, a new binary


def test_every_field_given_to_keda_is_one_its_crd_knows() -> None:
    if not build.is_built(KEDA_COMPONENT):
        pytest.skip("KEDA not built here")
    crd = yaml.safe_load((build.module_dir(KEDA_COMPONENT) / scalers.KEDA_CRDS /
                          "keda.sh_scaledobjects.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for scaler in ("keda", "keda-tuned"):
        [obj] = bench.scaler_objects(bench.Target(scaler, "flash", [30.0] * 60), "http://p", 1)
        assert schema_keys(schema, obj["spec"], scaler) == []
