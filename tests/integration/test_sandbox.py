"""The sandbox is a real cluster: real scheduling against simulated accelerator capacity,
and faults injected through KWOK stages show up as Kubernetes reports them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from kubernetes import client

from goodput_operator.sandbox import cluster as sandbox_cluster
from goodput_operator.sandbox import fleet
from tests.conftest import Cluster, wait_for

pytestmark = pytest.mark.integration


def goodput(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "goodput_operator.cli", *args],
                          capture_output=True, text=True, timeout=900, check=False)


def accelerator_pod(name: str, resource: str, count: int) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(
                name="worker", image="example.com/trainer:1.0",
                resources=client.V1ResourceRequirements(
                    requests={resource: str(count)}, limits={resource: str(count)}),
            )],
        ),
    )


def pod_state(core: Any, namespace: str, name: str) -> client.V1Pod:
    pod: client.V1Pod = core.read_namespaced_pod(name, namespace)
    return pod


def node_ready(core: Any, name: str) -> str:
    node = core.read_node(name)
    return next(c.status for c in node.status.conditions if c.type == "Ready")


@pytest.mark.parametrize("fleet_name", ["trn2", "p5", "nvl72"])
def test_each_fleet_starts_with_ready_labelled_nodes(cluster: Cluster, fleet_name: str) -> None:
    if not cluster.is_sandbox:
        pytest.skip("starts sandboxes of its own")
    name = f"gt-fleet-{fleet_name}"
    box = sandbox_cluster.Sandbox(name)
    goodput("sandbox", "down", "--name", name)
    started = time.monotonic()
    result = goodput("sandbox", "up", "--fleet", fleet_name, "--name", name)
    elapsed = time.monotonic() - started
    try:
        assert result.returncode == 0, result.stderr
        print(f"warm start of fleet {fleet_name}: {elapsed:.1f}s")
        expected = fleet.nodes(fleet.load(fleet_name))
        listed = json.loads(box.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        by_name = {n["metadata"]["name"]: n for n in listed}
        assert sorted(by_name) == sorted(n["metadata"]["name"] for n in expected)
        for want in expected:
            got = by_name[want["metadata"]["name"]]
            assert sandbox_cluster.is_node_ready(got)
            for key, value in want["metadata"]["labels"].items():
                assert got["metadata"]["labels"].get(key) == value, key
            for resource, quantity in want["status"]["allocatable"].items():
                assert got["status"]["allocatable"][resource] == quantity, resource
        assert str(box.kubeconfig) in result.stdout
    finally:
        goodput("sandbox", "down", "--name", name)
    assert not box.is_running()


def test_trn2_fleet_nodes_as_kubectl_shows_them(cluster: Cluster) -> None:
    """The session fleet's trn2 pool: 16 Neuron chips allocatable, UltraServer labels."""
    listed = json.loads(cluster.kubectl(
        "get", "nodes", "-l", "node.kubernetes.io/instance-type=trn2u.48xlarge", "-o", "json",
    ).stdout)["items"]
    if not listed:
        pytest.skip("the cluster has no trn2u.48xlarge nodes")
    ultraservers = {n["metadata"]["labels"][fleet.ULTRASERVER_LABEL] for n in listed}
    assert len(listed) == 4 * len(ultraservers)
    for node in listed:
        assert node["status"]["allocatable"]["aws.amazon.com/neuron"] == "16"
        for key in fleet.NETWORK_LAYER_LABELS:
            assert node["metadata"]["labels"][key].startswith("nn-")


def test_pod_asking_for_16_neuron_chips_runs_on_a_trn2_node(cluster: Cluster,
                                                           namespace: str) -> None:
    core = cluster.core()
    trn2 = core.list_node(label_selector="node.kubernetes.io/instance-type=trn2u.48xlarge")
    if not trn2.items:
        pytest.skip("the cluster has no trn2u.48xlarge nodes")
    core.create_namespaced_pod(namespace, accelerator_pod("w0", "aws.amazon.com/neuron", 16))
    pod = wait_for(lambda: (p := pod_state(core, namespace, "w0")).status.phase == "Running"
                   and p, timeout=60, what="pod w0 Running")
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "trn2u.48xlarge"


def test_pod_asking_for_17_chips_stays_pending_with_the_schedulers_reason(
        cluster: Cluster, namespace: str) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, accelerator_pod("too-big", "aws.amazon.com/neuron", 17))

    def unschedulable() -> client.V1PodCondition | None:
        pod = pod_state(core, namespace, "too-big")
        return next((c for c in pod.status.conditions or []
                     if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    condition = wait_for(unschedulable, timeout=60, what="PodScheduled=False Unschedulable")
    assert condition.status == "False"
    assert "Insufficient aws.amazon.com/neuron" in condition.message
    assert pod_state(core, namespace, "too-big").status.phase == "Pending"


def test_fail_node_then_heal_node(cluster: Cluster, sandbox: sandbox_cluster.Sandbox) -> None:
    core = cluster.core()
    target = "p5-00-1"
    failed = goodput("sandbox", "fail-node", target, "--reason", "GPUFellOffTheBus",
                     "--name", sandbox.name)
    assert failed.returncode == 0, failed.stderr
    try:
        wait_for(lambda: node_ready(core, target) == "False", timeout=30, what="NotReady")
        ready = next(c for c in core.read_node(target).status.conditions if c.type == "Ready")
        assert ready.reason == "GPUFellOffTheBus"
    finally:
        healed = goodput("sandbox", "heal-node", target, "--name", sandbox.name)
        assert healed.returncode == 0, healed.stderr
    wait_for(lambda: node_ready(core, target) == "True", timeout=30, what="Ready again")


def test_fail_pod_with_exit_code_3(cluster: Cluster, sandbox: sandbox_cluster.Sandbox,
                                   namespace: str) -> None:
    core = cluster.core()
    core.create_namespaced_pod(namespace, accelerator_pod("victim", "nvidia.com/gpu", 8))
    wait_for(lambda: pod_state(core, namespace, "victim").status.phase == "Running",
             timeout=60, what="pod Running")
    result = goodput("sandbox", "fail-pod", "victim", "--exit-code", "3", "-n", namespace,
                     "--name", sandbox.name)
    assert result.returncode == 0, result.stderr
    pod = wait_for(lambda: (p := pod_state(core, namespace, "victim")).status.phase == "Failed"
                   and p, timeout=30, what="pod Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fail-node", "no-such-node"), "node 'no-such-node' does not exist"),
        (("heal-node", "no-such-node"), "node 'no-such-node' does not exist"),
        (("fail-pod", "ghost", "--exit-code", "1"), "pod default/ghost does not exist"),
        (("up", "--fleet", "trn2"), "is already running"),
    ],
)
def test_bad_sandbox_requests_are_one_clear_error(sandbox: sandbox_cluster.Sandbox,
                                                  args: tuple[str, ...], message: str) -> None:
    verb, *rest = args
    result = goodput("sandbox", verb, *rest, "--name", sandbox.name)
    assert result.returncode != 0
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_status_reports_the_running_fleet(sandbox: sandbox_cluster.Sandbox) -> None:
    result = goodput("sandbox", "status", "--name", sandbox.name)
    assert result.returncode == 0, result.stderr
    total = fleet.load("mixed").node_count
    assert f"nodes: {total}/{total} Ready" in result.stdout
    assert "fleet: mixed" in result.stdout


def test_commands_on_a_sandbox_that_is_not_running_say_so() -> None:
    result = goodput("sandbox", "fail-node", "trn2-00-0", "--name", "never-started")
    assert result.returncode != 0
    assert "sandbox 'never-started' is not running" in result.stderr


def test_kubectl_runs_goodput_as_a_plugin(cluster: Cluster) -> None:
    import os
    from pathlib import Path

    from goodput_operator.sandbox.cluster import kubectl_binary

    scripts = Path(sys.executable).parent
    assert (scripts / "kubectl-goodput").is_file()
    env = {**os.environ, "PATH": f"{scripts}:{os.environ.get('PATH', '')}"}
    result = subprocess.run([kubectl_binary(), "goodput", "sandbox", "fleets"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "fleet trn2: 16 nodes" in result.stdout
