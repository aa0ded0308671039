"""TrainingJob end to end on the sandbox: the operator as a process, the real scheduler,
KWOK nodes of the `mixed` fleet (2 Trn2 UltraServers of 4 nodes x 16 chips)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from goodput_operator import names
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import is_gated, pin
from goodput_operator.topology.record import nodes_of, to_slices
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Operator,
    apply,
    get_job,
    job_pods,
    sandbox_cli,
    training_job,
    trn2_pool,
    wait_event,
    wait_phase,
)

pytestmark = pytest.mark.e2e
ULTRASERVER = "topology.k8s.aws/ultraserver-id"


def node_labels(cluster: Cluster) -> dict[str, dict[str, str]]:
    items = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in items}


def test_eight_workers_land_on_two_whole_ultraservers_in_fabric_order(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("pretrain", trn2_group, 8, launcher={"type": "neuron"}), namespace)
    job = wait_phase(crds, namespace, "pretrain", "Running")
    labels = node_labels(crds)
    pods = job_pods(crds, namespace, "pretrain")
    nodes = [p["spec"]["nodeName"] for p in pods]
    assert len(set(nodes)) == 8, "one worker per node"
    assert len({labels[n][ULTRASERVER] for n in nodes}) == 2, "2 whole UltraServers"
    assert nodes == nodes_of(job["status"]["placement"])
    # fabric order: each UltraServer's ranks are contiguous and follow its slots
    domains = [labels[n][ULTRASERVER] for n in nodes]
    assert domains == sorted(domains, key=domains.index), "contiguous per UltraServer"
    for domain in set(domains):
        mine = [n for n in nodes if labels[n][ULTRASERVER] == domain]
        assert mine == sorted(mine), "slot order inside an UltraServer"
    env = {e["name"]: e.get("value", "") for e in pods[5]["spec"]["containers"][0]["env"]}
    assert (env["NODE_RANK"], env["NNODES"], env["MASTER_ADDR"]) == (
        "5", "8", f"w0.pretrain.{namespace}.svc")
    assert env["NEURON_RT_ROOT_COMM_ID"] == f"w0.pretrain.{namespace}.svc:29501"
    hostfile = json.loads(crds.kubectl("get", "configmap", "pretrain-hostfile", "-n", namespace,
                                       "-o", "json").stdout)["data"]
    assert hostfile["hostfile"].splitlines() == [f"w{i}.pretrain slots=16" for i in range(8)]
    assert job["status"]["accelerators"] == 128
    columns = crds.kubectl("get", "tj", "pretrain", "-n", namespace, "--no-headers").stdout
    assert columns.split()[1:5] == ["Running", "8", "8", "128"]


def test_two_workers_take_an_aligned_half_of_one_ultraserver(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("small", trn2_group, 2), namespace)
    wait_phase(crds, namespace, "small", "Running")
    nodes = [p["spec"]["nodeName"] for p in job_pods(crds, namespace, "small")]
    labels = node_labels(crds)
    assert labels[nodes[0]][ULTRASERVER] == labels[nodes[1]][ULTRASERVER]
    slots = sorted(int(n.rsplit("-", 1)[1]) for n in nodes)
    assert slots in ([0, 1], [2, 3])


def test_a_job_too_big_waits_with_a_reason_and_starts_when_the_other_finishes(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("first", trn2_group, 6), namespace)
    wait_phase(crds, namespace, "first", "Running")
    apply(crds, training_job("second", trn2_group, 4), namespace)

    def waiting() -> dict | None:
        conditions = (get_job(crds, namespace, "second").get("status") or {}).get("conditions")
        return next((c for c in conditions or [] if c["type"] == "Placed"
                     and c["reason"] == "WaitingForCapacity"), None)

    condition = wait_for(waiting, timeout=30, what="second to wait for capacity")
    assert condition["status"] == "False"
    assert condition["message"].startswith("needs 1 whole UltraServer (4 nodes x 16 "
                                           "aws.amazon.com/neuron) for 4 workers x 16")
    assert f"tj/{namespace}/first" in condition["message"]
    assert get_job(crds, namespace, "second")["status"]["phase"] == "Pending"
    assert job_pods(crds, namespace, "second") == [], "a gang that waits has no pods"
    wait_event(crds, "second", "WaitingForCapacity", "needs 1 whole UltraServer",
               namespace=namespace)

    for pod in job_pods(crds, namespace, "first"):
        sandbox_cli(crds, "succeed-pod", pod["metadata"]["name"], "-n", namespace)
    done = wait_phase(crds, namespace, "first", "Succeeded")
    assert done["status"]["message"] == "all 6 workers succeeded"
    assert done["status"]["completionTime"]
    wait_phase(crds, namespace, "second", "Running")
    running = [p for p in json.loads(crds.kubectl("get", "pods", "-n", namespace, "-o", "json")
                                     .stdout)["items"] if p["status"].get("phase") == "Running"]
    per_node = Counter(p["spec"]["nodeName"] for p in running)
    assert max(per_node.values()) == 1, "never two 16-chip workers on one 16-chip node"


def test_a_worker_exiting_with_a_fail_code_fails_the_job(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("brittle", trn2_group, 2, failurePolicy={
        "exitCodes": [{"codes": [3], "action": "fail"}]}), namespace)
    wait_phase(crds, namespace, "brittle", "Running")
    victim = job_pods(crds, namespace, "brittle")[1]["metadata"]["name"]
    sandbox_cli(crds, "fail-pod", victim, "--exit-code", "3", "-n", namespace)
    failed = wait_phase(crds, namespace, "brittle", "Failed")
    assert failed["status"]["message"] == (
        f"worker w1 ({victim}) exited with code 3; failurePolicy.exitCodes says fail "
        '(last words: "container failed")'), "the termination message KWOK's fault wrote"
    reasons = {c["type"]: c["reason"] for c in failed["status"]["conditions"]}
    assert reasons["Failed"] == "WorkerFailed"


def test_deleting_a_job_removes_every_child(e2e: Operator, crds: Cluster, namespace: str,
                                            trn2_group: str) -> None:
    apply(crds, training_job("gone", trn2_group, 2), namespace)
    wait_phase(crds, namespace, "gone", "Running")
    crds.kubectl("delete", "tj", "gone", "-n", namespace, "--wait=true", "--timeout=30s")

    def children() -> list[str]:
        out = crds.kubectl("get", "pods,services,configmaps", "-n", namespace, "-l",
                           f"{names.JOB_LABEL}=gone", "-o", "name").stdout
        return out.split()

    wait_for(lambda: not children(), timeout=60, what="children garbage-collected")
    assert crds.kubectl("get", "tj", "gone", "-n", namespace, check=False).returncode != 0


def test_suspend_stops_workers_and_resume_starts_them(e2e: Operator, crds: Cluster,
                                                     namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("pausable", trn2_group, 2), namespace)
    wait_phase(crds, namespace, "pausable", "Running")
    crds.kubectl("patch", "tj", "pausable", "-n", namespace, "--type", "merge", "-p",
                 '{"spec": {"suspend": true}}')
    wait_phase(crds, namespace, "pausable", "Suspended")
    wait_for(lambda: not job_pods(crds, namespace, "pausable"), timeout=30, what="no workers")
    crds.kubectl("patch", "tj", "pausable", "-n", namespace, "--type", "merge", "-p",
                 '{"spec": {"suspend": false}}')
    wait_phase(crds, namespace, "pausable", "Running")


def test_higher_priority_gets_freed_capacity_first(e2e: Operator, crds: Cluster,
                                                   namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("holder", trn2_group, 8), namespace)
    wait_phase(crds, namespace, "holder", "Running")
    apply(crds, training_job("early-low", trn2_group, 8, priority=0), namespace)
    apply(crds, training_job("late-high", trn2_group, 8, priority=10), namespace)
    for name in ("early-low", "late-high"):                # both seen, both waiting
        wait_for(lambda name=name: any(
            c["type"] == "Placed" and c["reason"] == "WaitingForCapacity"
            for c in get_job(crds, namespace, name).get("status", {}).get("conditions", [])),
            timeout=30, what=f"{name} waiting for capacity")
    crds.kubectl("delete", "tj", "holder", "-n", namespace, "--wait=true")
    wait_phase(crds, namespace, "late-high", "Running")
    assert get_job(crds, namespace, "early-low")["status"]["phase"] == "Pending"


def test_operator_restart_mid_launch_finishes_the_launch_without_duplicates(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    """The operator stops after writing a placement and pinning one of four workers (the
    state is laid down here exactly as it would have left it); a new operator finishes."""
    e2e.stop()
    try:
        apply(crds, training_job("interrupted", trn2_group, 4), namespace)
        job = get_job(crds, namespace, "interrupted")
        nodes = trn2_pool(crds)[4:8]  # the second UltraServer
        domain = node_labels(crds)[nodes[0]][ULTRASERVER]
        placement = {"domains": [domain], "reason": "laid down by the test",
                     "slices": to_slices({"rank": i, "node": n, "domain": domain}
                                         for i, n in enumerate(nodes))}
        crds.kubectl("patch", "tj", "interrupted", "-n", namespace, "--subresource", "status",
                     "--type", "merge", "-p", json.dumps(
                         {"status": {"phase": "Placing", "placement": placement}}))
        for index in range(4):
            pod = build.worker_pod(job, index, 0, Fabric("aws.amazon.com/neuron", 16))
            apply(crds, pod, namespace)
        first = pin(build.worker_pod(job, 0, 0, Fabric("aws.amazon.com/neuron", 16)), nodes[0],
                          domain)
        first["metadata"]["annotations"][names.NODE_ANNOTATION] = nodes[0]
        crds.kubectl("patch", "pod", build.pod_name("interrupted", 0, 0), "-n", namespace,
                     "--type", "merge", "-p", json.dumps(first))
    finally:
        e2e.start()
    wait_phase(crds, namespace, "interrupted", "Running")
    pods = job_pods(crds, namespace, "interrupted")
    assert [p["metadata"]["name"] for p in pods] == [
        build.pod_name("interrupted", 0, i) for i in range(4)]
    assert [p["spec"]["nodeName"] for p in pods] == nodes
    assert not any(is_gated(p) for p in pods)


def test_metrics_are_served(e2e: Operator) -> None:
    text = e2e.metrics()
    for name in ("goodput_trainingjobs{phase=\"Running\"}", "goodput_placement_latency_seconds",
                 "goodput_reconcile_errors_total", "goodput_time_pending_seconds"):
        assert name in text, name


def test_topology_view_shows_the_placement(e2e: Operator, crds: Cluster, namespace: str,
                                           trn2_group: str, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    apply(crds, training_job("drawn", trn2_group, 2), namespace)
    wait_phase(crds, namespace, "drawn", "Running")
    svg = tmp_path / "fleet.svg"
    result = subprocess.run(
        [sys.executable, "-m", "goodput_operator.cli", "topology", "--kubeconfig",
         str(crds.kubeconfig), "--group", trn2_group, "--output", str(svg)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{trn2_group}: 2 UltraServers, 8 nodes (2 in use)")
    assert any(" 0 drawn" in line and " 1 drawn" in line for line in lines)
    titles = [t.text or "" for t in ET.parse(svg).getroot().iter(
        "{http://www.w3.org/2000/svg}title")]
    assert sum(t.endswith(": drawn") for t in titles) == 2


def test_a_finished_job_is_deleted_after_its_ttl(e2e: Operator, crds: Cluster, namespace: str,
                                                 trn2_group: str) -> None:
    apply(crds, training_job("shortlived", trn2_group, 1, ttlSecondsAfterFinished=2), namespace)
    wait_phase(crds, namespace, "shortlived", "Running")
    pod = job_pods(crds, namespace, "shortlived")[0]["metadata"]["name"]
    sandbox_cli(crds, "succeed-pod", pod, "-n", namespace)
    wait_phase(crds, namespace, "shortlived", "Succeeded")
    wait_for(lambda: crds.kubectl("get", "tj", "shortlived", "-n", namespace,
                                  check=False).returncode != 0,
             timeout=30, what="the job deleted after its TTL")


def test_a_leader_and_eight_workers_land_together_in_one_ultraserver(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    """spec.podSets: a one-chip leader is placed in the same decision as its 8 workers
    (4 chips each: two full nodes) and lands, bound by kube-scheduler, on another node of
    the workers' UltraServer."""
    leader_template = {"spec": {"containers": [{"name": "leader",
                                                "image": "example.com/launch:1"}]}}
    apply(crds, training_job("led", trn2_group, 8, acceleratorsPerWorker=4, podSets=[
        {"name": "leader", "acceleratorsPerPod": 1, "template": leader_template}]), namespace)
    job = wait_phase(crds, namespace, "led", "Running")
    labels = node_labels(crds)
    workers = [p["spec"]["nodeName"] for p in job_pods(crds, namespace, "led")]
    [leader] = json.loads(crds.kubectl(
        "get", "pods", "-n", namespace, "-l", f"{names.POD_SET_LABEL}=leader",
        "-o", "json").stdout)["items"]
    assert len(workers) == 8 and len(set(workers)) == 2, "4 workers of 4 chips per node"
    ultraservers = {labels[n][ULTRASERVER] for n in workers}
    assert len(ultraservers) == 1
    assert labels[leader["spec"]["nodeName"]][ULTRASERVER] in ultraservers
    assert leader["spec"]["nodeName"] not in workers, "the workers' nodes are full"
    assert leader["spec"]["containers"][0]["image"] == "example.com/launch:1"
    env = {e["name"]: e.get("value", "") for e in leader["spec"]["containers"][0]["env"]}
    assert (env[names.ENV_POD_SET], env["MASTER_ADDR"]) == ("leader", f"w0.led.{namespace}.svc")
    assert job["status"]["placement"]["podSets"] == [
        {"set": "leader", "index": 0, "node": leader["spec"]["nodeName"],
         "domain": labels[leader["spec"]["nodeName"]][ULTRASERVER]}]
    assert job["status"]["accelerators"] == 33
