"""The kind lane (issue 47): on a real kind cluster made here, the chart installs the
operator, a TrainingJob runs on the KWOK fleet inside kind, a failed node is replaced in its
UltraServer, an InferenceEndpoint scales from a real Prometheus, and `goodput kind down`
leaves the host as it found it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.sandbox import faults, hostnet, kind, kindhost
from goodput_operator.sandbox.fleet import INSTANCE_TYPE_LABEL, POOL_LABEL, ULTRASERVER_LABEL
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    apply,
    get_job,
    job_pods,
    lift_quarantine,
    training_job,
    trn2_group_spec,
)
from tests.e2e.test_inference import autoscaled, wait_status
from tests.kind.conftest import FLEET, KindLane

pytestmark = pytest.mark.kind


def make_group(cluster: Cluster) -> str:
    """An UltraServerGroup over the built-in trn2 fleet's nodes (its own pool label, not the
    e2e fleets')."""
    name = f"trn2-{uuid.uuid4().hex[:6]}"
    selector = {INSTANCE_TYPE_LABEL: "trn2u.48xlarge", POOL_LABEL: FLEET}
    apply(cluster, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                    "metadata": {"name": name}, "spec": trn2_group_spec(nodeSelector=selector)})
    return name


def node_domains(cluster: Cluster) -> dict[str, str]:
    listed = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(ULTRASERVER_LABEL, "")
            for n in listed}


def test_the_chart_runs_the_operator_on_kinds_own_nodes(kind_lane: KindLane) -> None:
    leader = kind_lane.operator.leader()
    assert leader is not None, "no operator pod leads"
    assert leader["spec"]["nodeName"] in kind_lane.box.node_containers()


def test_the_host_reaches_the_clusters_pods_and_services(kind_lane: KindLane) -> None:
    """Through the routes `kind up` adds (KIND.md, trap 7): the leader's /readyz by its pod
    IP, and the reports Service by its ClusterIP, where the operator itself refuses a
    report without a token (not a 404 from whatever else the host's routes reach)."""
    operator = kind_lane.operator
    assert operator.readiness().get("ok"), operator.readiness()
    request = urllib.request.Request(f"{operator.report_url}/v1/reports/step", data=b"{}",
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401, refused.value.read()
    assert b"missing bearer token" in refused.value.read()


def test_a_job_runs_on_the_fleet_inside_kind_and_a_failed_node_is_replaced_in_its_domain(
        kind_lane: KindLane, namespace: str) -> None:
    cluster, box = kind_lane.cluster, kind_lane.box
    group = make_group(cluster)
    apply(cluster, training_job("train", group, 3), namespace)

    def running(restarts: int) -> dict[int, str] | None:
        job = get_job(cluster, namespace, "train")
        pods = job_pods(cluster, namespace, "train")
        if (job.get("status") or {}).get("phase") != "Running" or \
                int(job["status"].get("restarts") or 0) != restarts or len(pods) != 3 or \
                any(p["status"].get("phase") != "Running" or p["metadata"].get(
                    "deletionTimestamp") for p in pods):
            return None
        return {int(p["metadata"]["labels"][names.RANK_LABEL]): p["spec"]["nodeName"]
                for p in pods}

    before = wait_for(lambda: running(0), timeout=120, what="the job's 3 workers Running")
    domains = node_domains(cluster)
    assert len({domains[n] for n in before.values()}) == 1  # one UltraServer: fewest domains
    victim = before[1]
    faults.fail_node(box, victim)
    try:
        after = wait_for(lambda: running(1), timeout=180,
                         what="the job Running again after rank 1's node failed")
        assert victim not in after.values()
        assert {domains[n] for n in after.values()} == {domains[victim]}  # its UltraServer
        assert after[0] == before[0] and after[2] == before[2]  # the others kept their nodes
    finally:
        cluster.kubectl("delete", "tj", "train", "-n", namespace, "--wait=false")
        faults.heal_node(box, victim)
        faults.wait_recovered(box, victim)
        lift_quarantine(cluster, victim)
        wait_for(lambda: not job_pods(cluster, namespace, "train"), timeout=120,
                 what="the job's pods gone")
        cluster.kubectl("delete", "usg", group, "--ignore-not-found")


def test_an_endpoint_scales_from_a_real_prometheus_on_kind(
        kind_lane: KindLane, namespace: str, tmp_path: Any) -> None:
    from goodput_operator.sandbox.prometheus import Prometheus
    from tests.e2e.prometheus import Exporter

    cluster = kind_lane.cluster
    exporter = Exporter()
    # where the operator's pod reaches the host: the kind network's gateway
    server = Prometheus(tmp_path / "prometheus",
                        [Prometheus.job("servers", f"127.0.0.1:{exporter.port}")],
                        kind_lane.host)
    server.start()
    group = make_group(cluster)
    try:
        exporter.queue(namespace, "chat", 8)
        apply(cluster, autoscaled("chat", group, server.url), namespace)
        wait_status(cluster, namespace, "chat", "1 replica ready", timeout=120,
                    readyReplicas=1, desiredReplicas=1)
        exporter.queue(namespace, "chat", 30)  # 30 / 8 -> 4 replicas
        status = wait_status(cluster, namespace, "chat", "4 replicas ready", timeout=120,
                             readyReplicas=4)
        assert (status["recentScaling"][-1]["from"], status["recentScaling"][-1]["to"]) == \
            (1, 4)
    finally:
        cluster.kubectl("delete", "ie", "chat", "-n", namespace, "--wait=true")
        cluster.kubectl("delete", "usg", group, "--ignore-not-found")
        server.stop()


def test_kind_down_leaves_the_host_as_found(kind_lane: KindLane) -> None:
    """The last test: the cluster deleted, nothing of it left on the host."""
    box = kind_lane.box
    record = json.loads(kindhost.record_file().read_text())
    routed = [destination for destination, _via in record["routes"][box.name]]
    assert routed and all(any(r.startswith(f"{d} ") for r in kindhost.routes()) for d in routed)
    if record["clusters"] != [box.name]:
        pytest.skip(f"other kind clusters of this project hold the host ({record['clusters']}):"
                    " the last of them puts it back")
    assert kind.down(box)
    assert not box.node_containers() and not box.exists()
    networks = kind.podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    assert "kind" not in networks
    assert not kind.podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
    assert kindhost.changed_sysctls(record["sysctls"]) == {}
    assert [c for c in kindhost.chains() if c not in record["chains"]] == []
    assert [c for c in kindhost.cgroups() if c not in record["cgroups"]] == []
    assert [f for f in record["created"] if Path(f).exists()] == []
    assert [r for r in kindhost.routes() if r.split()[0] in routed] == []
    assert hostnet.mounts_under(kind.podman_home()) == []
    assert not kindhost.record_file().is_file() or \
        "sysctls" not in json.loads(kindhost.record_file().read_text())
