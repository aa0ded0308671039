"""InferenceEndpoints end to end: replica groups inside one domain, autoscaling from a real
Prometheus (queue depth from an exporter the test drives), capacity limits, metrics
outages, and rollouts group by group."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import MetricTarget
from goodput_operator.autoscaling import prometheus as promql
from goodput_operator.sandbox.cluster import kubectl_binary
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    NO_SWEEPS,
    Operator,
    apply,
    delete_all,
    get_job,
    get_object,
    settle,
    settle_autoscaler,
    training_job,
    wait_event,
    wait_phase,
)

pytestmark = pytest.mark.e2e
CLIQUE = "nvidia.com/gpu.clique"


@pytest.fixture
def endpoints(crds: Cluster, namespace: str, operator: Operator) -> Iterator[None]:
    """Delete the test's endpoints and wait until their pods are gone, freeing the nodes."""
    yield
    delete_all(crds, "ie", namespace)


@pytest.fixture
def nvl72_group(crds: Cluster) -> Iterator[str]:
    name = "nvl72-ie"
    apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                 "metadata": {"name": name},
                 "spec": {"nodeSelector": {"node.kubernetes.io/instance-type":
                                           "p6e-gb200.36xlarge"},
                          "domainLabel": CLIQUE, "interconnect": "nvlink",
                          "accelerator": {"resource": "nvidia.com/gpu", "perNode": 4},
                          "nodesPerDomain": 18, "probes": NO_SWEEPS}})
    yield name
    crds.kubectl("delete", "usg", name, "--ignore-not-found")


def endpoint(name: str, group: str, workers: int, accelerators: int,
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": name},
            "spec": {"ultraServerGroup": group, "model": {"name": "llama"},
                     "replicaShape": {"workers": workers,
                                      "acceleratorsPerWorker": accelerators},
                     "template": {"spec": {"containers": [{"name": "server",
                                                           "image": "vllm:1"}]}},
                     **spec}}


def get_ie(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return get_object(cluster, "ie", namespace, name)


def wait_status(cluster: Cluster, namespace: str, name: str, what: str, timeout: float = 60,
                **fields: Any) -> dict[str, Any]:
    """FIELDS: status keys and their values, or a test of the value (a callable)."""
    def holds(value: Any, want: Any) -> bool:
        return bool(value is not None and want(value)) if callable(want) else value == want

    def reached() -> dict[str, Any] | None:
        status = get_ie(cluster, namespace, name).get("status") or {}
        return status if all(holds(status.get(k), v) for k, v in fields.items()) else None
    try:
        return wait_for(reached, timeout=timeout, what=what)
    except AssertionError as err:
        status = get_ie(cluster, namespace, name).get("status")
        raise AssertionError(f"{err}; status: {json.dumps(status)}") from None


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions") or [] if c["type"] == type_)


def pods_of(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"{names.ENDPOINT_LABEL}={name}",
        "-o", "json").stdout)["items"]
    return items


def test_multi_node_replicas_stay_inside_one_nvlink_domain(
        crds: Cluster, namespace: str, nvl72_group: str, endpoints: None) -> None:
    apply(crds, endpoint("llama-405b", nvl72_group, 2, 4, replicas=3), namespace)
    status = wait_status(crds, namespace, "llama-405b", "3 groups ready", readyReplicas=3)
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in json.loads(
        crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    assert len(status["groups"]) == 3
    for group in status["groups"]:
        assert len(group["nodes"]) == 2
        assert {labels[n][CLIQUE] for n in group["nodes"]} == {group["domain"]}
    pods = pods_of(crds, namespace, "llama-405b")
    leader = next(p for p in pods if p["metadata"]["labels"][names.ROLE_LABEL] == "leader"
                  and p["metadata"]["labels"][names.REPLICA_LABEL] == "0")
    env = {e["name"]: e.get("value", "") for e in leader["spec"]["containers"][0]["env"]}
    assert env["LWS_GROUP_SIZE"] == "2" and env["GOODPUT_WORKER_INDEX"] == "0"
    leader_dns = f"llama-405b-0-0.llama-405b-members.{namespace}.svc"
    assert env["GOODPUT_LEADER_ADDRESS"] == env["LWS_LEADER_ADDRESS"] == leader_dns
    service = json.loads(crds.kubectl("get", "svc", "llama-405b", "-n", namespace, "-o",
                                      "json").stdout)
    assert service["spec"]["selector"] == {names.ENDPOINT_LABEL: "llama-405b",
                                           names.ROLE_LABEL: "leader"}
    assert status["selector"] == \
        f"{names.ENDPOINT_LABEL}=llama-405b,{names.ROLE_LABEL}=leader"
    group = wait_for(lambda: json.loads(crds.kubectl("get", "usg", nvl72_group, "-o", "json")
                                        .stdout).get("status"), timeout=30,
                     what="the group's status")      # one domain: totals still integers
    assert group["totals"]["domains"] == 1 and group["totals"]["healthyDomains"] == 1
    # each two-node replica is its own IMEX ComputeDomain, its members' channels allocated
    # by the scheduler from the simulated driver's ResourceSlices on their nodes
    for index in range(3):
        members = [p for p in pods if p["metadata"]["labels"][names.REPLICA_LABEL] == str(index)]
        domain = get_object(crds, "computedomain", namespace, f"llama-405b-r{index}-imex")
        assert domain["metadata"]["ownerReferences"][0]["kind"] == "InferenceEndpoint"
        for pod in members:
            [claim] = pod["spec"]["resourceClaims"]
            assert claim["resourceClaimTemplateName"] == f"llama-405b-r{index}-imex-channel"
        wait_for(lambda i=index, m=members: {n["name"] for n in (get_object(
            crds, "computedomain", namespace, f"llama-405b-r{i}-imex").get("status") or {})
            .get("nodes") or []} == {p["spec"]["nodeName"] for p in m} or None, timeout=30,
            what=f"replica {index}'s nodes in its ComputeDomain")


def autoscaled(name: str, group: str, url: str, workers: int = 1, **scaling: Any
               ) -> dict[str, Any]:
    return endpoint(name, group, workers, 16, scaling={
        "minReplicas": 1, "maxReplicas": 4, "intervalSeconds": 1, "prometheusUrl": url,
        "metrics": [{"type": "QueueDepth", "target": 8}],
        "scaleUp": {"stabilizationSeconds": 0},
        "scaleDown": {"stabilizationSeconds": 8}, **scaling})


def test_queue_depth_scales_up_at_once_down_after_the_window_and_never_flaps(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()
    exporter.queue(namespace, "chat", 8)
    apply(crds, autoscaled("chat", group, prometheus.url), namespace)
    wait_status(crds, namespace, "chat", "1 replica ready", readyReplicas=1, desiredReplicas=1)

    exporter.queue(namespace, "chat", 30)                 # 30 / 8 -> 4 replicas
    status = wait_status(crds, namespace, "chat", "4 replicas ready", readyReplicas=4)
    up = status["recentScaling"][-1]
    assert (up["from"], up["to"]) == (1, 4), status       # one step: no window held it back
    assert up["metrics"] == {"QueueDepth": "30"}

    decisions = len(status["recentScaling"])
    for depth in (31, 33, 29.5, 34, 30, 32.5):          # +-7%: inside the 10% tolerance
        exporter.queue(namespace, "chat", depth)
        settle_autoscaler(operator, namespace, "chat")
    status = get_ie(crds, namespace, "chat")["status"]
    assert status["desiredReplicas"] == 4 and len(status["recentScaling"]) == decisions

    dropped = time.time()
    exporter.queue(namespace, "chat", 8)
    status = wait_status(crds, namespace, "chat", "back to 1", timeout=60, desiredReplicas=1,
                         readyReplicas=1)
    down = status["recentScaling"][-1]
    assert (down["from"], down["to"]) == (4, 1)
    decided = datetime.fromisoformat(down["time"].replace("Z", "+00:00")).timestamp()
    # the window runs from the last evaluation that saw the demand: at most one interval
    # (1 s, plus a tick) before the drop
    assert decided >= dropped + 8 - 1.5                   # not before the scale-down window
    assert "1 -> 4" in wait_event(crds, "chat", "Scaled", "4 -> 1", namespace=namespace)


def test_the_arrival_rate_from_vllms_counters_sizes_and_a_backlog_adds_what_drains_it(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()
    exporter.queue(namespace, "rated", 0)
    exporter.serving(namespace, "rated", running=3, finished_per_second=7)  # 7 arrive/s
    # rate() over [1m] reads a new counter low until a minute of it is in the window
    query = promql.query_for(MetricTarget(type="RequestRate", target=4), namespace, "rated")
    wait_for(lambda: (promql.instant(prometheus.url, query) or 0) >= 6, timeout=90,
             what="the default RequestRate query reading 7 requests/s")
    apply(crds, autoscaled("rated", group, prometheus.url, metrics=[
        {"type": "RequestRate", "target": 4}, {"type": "QueueDepth", "target": 8}],
        scaleDown={"stabilizationSeconds": 60}),
        namespace)
    status = wait_status(crds, namespace, "rated", "2 replicas for 7 requests/s",
                         desiredReplicas=2)                # ceil(7 / 4), for 4-8 req/s alike
    arriving = float(status["recentScaling"][-1]["metrics"]["RequestRate"])
    assert 6 <= arriving <= 8, status                      # the default query, from vLLM's

    exporter.queue(namespace, "rated", 16)                 # 16 queued / 8: 2 more drain it
    status = wait_status(crds, namespace, "rated", "4 replicas", desiredReplicas=4)
    assert "backlog" in status["recentScaling"][-1]["reason"], status


def test_a_new_replicas_counter_counts_in_full_from_its_first_seconds(
        metrics_source: Any, namespace: str) -> None:
    """A scale-out's new server: its counter is younger than the rate's window, which
    reads it low (here at a sixth after 10 s); the default RequestRate query reads it in
    full, beside the old server's minute of history."""
    exporter, prometheus = metrics_source
    exporter.queue(namespace, "young", 0)
    exporter.serving(namespace, "young", running=0, finished_per_second=3)
    history = f'max(count_over_time(vllm:request_success_total{{namespace="{namespace}"}}[1m]))'
    wait_for(lambda: (promql.instant(prometheus.url, history) or 0) >= 55, timeout=120,
             interval=1, what="a minute of the first server's counter")
    exporter.serving(namespace, "young", running=0, finished_per_second=3, pod="server-1")
    query = promql.query_for(MetricTarget(type="RequestRate", target=1), namespace, "young")
    plain = (f'sum(rate(vllm:request_success_total{{namespace="{namespace}",'
             f'endpoint="young"}}[1m]))')
    time.sleep(10)                                      # the new series: 10 s of samples
    read, naive = promql.instant(prometheus.url, query), promql.instant(prometheus.url, plain)
    assert read is not None and naive is not None
    assert 5.2 <= read <= 6.8, (read, naive)            # 6 requests/s finish now
    assert naive <= 4.5, (read, naive)                  # what rate() alone says


def test_sglangs_kv_cache_use_scales_by_its_ratio(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()
    exporter.sglang_cache_use(namespace, "cached", 0.85, 0.95)   # 0.9 on average
    apply(crds, autoscaled("cached", group, prometheus.url, metricNames="SGLang",
                           maxReplicas=2, metrics=[{"type": "KVCacheUtilization",
                                                    "target": 0.5}]), namespace)
    status = wait_status(crds, namespace, "cached", "2 replicas", desiredReplicas=2)
    up = status["recentScaling"][-1]      # 2 then want 4 (2 x 0.9 / 0.5), held at the max
    assert (up["from"], up["to"]) == (1, 2), status                # ceil(1 x 0.9 / 0.5)
    assert up["metrics"] == {"KVCacheUtilization": "0.9"}, status


def test_demand_beyond_the_free_domains_is_limited_with_a_reason(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()                                  # 2 UltraServers x 4 nodes
    exporter.queue(namespace, "big", 400)                 # asks for 50 two-node replicas
    apply(crds, autoscaled("big", group, prometheus.url, workers=2, maxReplicas=10,
                           scaleUp={"stabilizationSeconds": 0, "policies": [
                               {"type": "Replicas", "value": 10, "periodSeconds": 1}]}),
          namespace)
    status = wait_status(crds, namespace, "big", "4 replicas ready", readyReplicas=4,
                         desiredReplicas=4)
    limited = condition(status, "ScalingLimited")
    assert limited["status"] == "True" and limited["reason"] == "InsufficientCapacity"
    assert "the free domains can host only 4" in limited["message"]
    settle_autoscaler(operator, namespace, "big")
    pods = pods_of(crds, namespace, "big")
    assert len(pods) == 8 and all(p["status"].get("phase") == "Running" for p in pods)
    for group_status in status["groups"]:               # each replica inside one UltraServer
        assert group_status["domain"] and len(group_status["nodes"]) == 2


def test_a_standby_ultraserver_is_lent_to_a_job_and_reclaimed_for_a_burst(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()                                  # 2 UltraServers x 4 nodes
    exporter.queue(namespace, "warm", 5)                  # one two-node replica
    apply(crds, autoscaled("warm", group, prometheus.url, workers=2, standbyDomains=1),
          namespace)
    status = wait_status(crds, namespace, "warm", "1 replica and a standby UltraServer",
                         readyReplicas=1, standby=lambda held: len(held["domains"]) == 1)
    [home] = {g["domain"] for g in status["groups"]}
    [spare] = status["standby"]["domains"]
    assert spare != home and condition(status, "Standby")["reason"] == "Held"
    usg = wait_for(lambda: (s := json.loads(crds.kubectl("get", "usg", group, "-o", "json")
                                            .stdout).get("status") or {})
                   .get("totals", {}).get("standbyDomains") == 1 and s, timeout=30,
                   what="the group counting the standby UltraServer")
    assert {d["id"]: d.get("standbyFor") for d in usg["domains"]}[spare] == \
        f"{namespace}/warm"
    try:
        apply(crds, training_job("borrower", group, 4, borrowStandby=True),
              namespace)                                  # fits only in the spare
        job = wait_phase(crds, namespace, "borrower", "Running", timeout=60)
        assert "borrows standby UltraServer(s)" in job["status"]["placement"]["reason"]

        exporter.queue(namespace, "warm", 20)             # 3 replicas: the third needs it
        said = wait_event(crds, "borrower", "Preempted", "requeued", namespace, timeout=60)
        assert f"reclaimed by InferenceEndpoint {namespace}/warm" in said
        assert spare in wait_event(crds, "warm", "Reclaiming", "reclaiming", namespace)
        status = wait_status(crds, namespace, "warm", "3 replicas", readyReplicas=3,
                             desiredReplicas=3)
        assert spare in {g["domain"] for g in status["groups"]}
        assert condition(status, "ScalingLimited")["status"] == "False", status
        standby = wait_status(crds, namespace, "warm", "no standby left",
                              standby=lambda held: held["domains"] == [])
        assert condition(standby, "Standby")["reason"] == "InsufficientCapacity"
        assert get_job(crds, namespace, "borrower")["status"]["phase"] != "Running"
    finally:  # the endpoint's pods and the job's alike
        crds.kubectl("delete", "tj", "--all", "-n", namespace, "--wait=true", "--timeout=60s")
        delete_all(crds, "ie", namespace)


def test_prometheus_down_holds_the_size_and_raises_a_condition(
        crds: Cluster, namespace: str, make_group: Any, endpoints: None,
        metrics_source: Any, operator: Operator) -> None:
    exporter, prometheus = metrics_source
    group = make_group()
    exporter.queue(namespace, "steady", 16)
    apply(crds, autoscaled("steady", group, prometheus.url), namespace)
    wait_status(crds, namespace, "steady", "2 ready", readyReplicas=2, desiredReplicas=2)
    prometheus.stop()
    try:
        def raised() -> dict[str, Any] | None:
            status = get_ie(crds, namespace, "steady")["status"]
            return status if condition(status, "MetricsUnavailable")["status"] == "True" \
                else None
        status = wait_for(raised, timeout=30, what="MetricsUnavailable")
        assert "holding 2 replicas" in condition(status, "MetricsUnavailable")["message"]
        exporter.queue(namespace, "steady", 0)            # unseen: Prometheus is down
        settle_autoscaler(operator, namespace, "steady")
        assert get_ie(crds, namespace, "steady")["status"]["desiredReplicas"] == 2
    finally:
        prometheus.start()
    exporter.queue(namespace, "steady", 16)
    wait_for(lambda: condition(get_ie(crds, namespace, "steady")["status"],
                               "MetricsUnavailable")["status"] == "False",
             timeout=60, what="MetricsUnavailable cleared")


def test_a_template_change_rolls_out_group_by_group(
        crds: Cluster, namespace: str, nvl72_group: str, endpoints: None,
        operator: Operator) -> None:
    apply(crds, endpoint("roll", nvl72_group, 2, 4, replicas=3,
                         rollout={"maxSurge": 1, "maxUnavailable": 0}), namespace)
    wait_status(crds, namespace, "roll", "3 ready", readyReplicas=3, updatedReplicas=3)
    watch = subprocess.Popen(
        [str(kubectl_binary()), "--kubeconfig",
         str(crds.kubeconfig), "get", "ie", "roll", "-n", namespace, "-w", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        crds.kubectl("patch", "ie", "roll", "-n", namespace, "--type", "merge", "-p",
                     json.dumps({"spec": {"template": {"spec": {"containers": [
                         {"name": "server", "image": "vllm:2"}]}}}}))
        status = wait_status(crds, namespace, "roll", "rolled out", timeout=60,
                             observedGeneration=2, updatedReplicas=3, readyReplicas=3,
                             replicas=3)
        settle(operator)                                  # the watch has caught up
    finally:
        watch.terminate()
        output, _ = watch.communicate(timeout=10)
    snapshots, decoder, position = [], json.JSONDecoder(), 0
    while position < len(output):
        while position < len(output) and output[position].isspace():
            position += 1
        if position >= len(output):
            break
        obj, position = decoder.raw_decode(output, position)
        snapshots.append(obj.get("status") or {})
    during = [s for s in snapshots if s.get("observedGeneration") == 2]
    assert during, "the watch saw no status of the rollout"
    assert any(0 < s.get("updatedReplicas", 0) < 3 for s in during)  # group by group
    for seen in during:
        assert seen["replicas"] <= 3 + 1                # maxSurge 1
        assert seen["readyReplicas"] >= 3 - 0           # maxUnavailable 0
    revisions = {g["revision"] for g in status["groups"]}
    assert len(revisions) == 1
