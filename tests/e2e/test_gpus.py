"""TrainingJobs on GPUs: a P5 gang on the EFA fabric, and a GB200 NVL72 gang inside one NVLink
clique of a P6e-GB200 UltraServer — on the sandbox's `mixed` fleet (4 p5.48xlarge, one x72
of 18 p6e-gb200.36xlarge)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Faults,
    Operator,
    apply,
    get_object,
    job_pods,
    training_job,
    wait_phase,
)
from tests.e2e.test_recovery import env_of, ranked_nodes, running_again

pytestmark = pytest.mark.e2e
EFA = "vpc.amazonaws.com/efa"
CLIQUE = "nvidia.com/gpu.clique"
ULTRASERVER = "topology.k8s.aws/ultraserver-id"


def gpu_job(name: str, group: str, workers: int, per_worker: int) -> dict[str, Any]:
    job = training_job(name, group, workers, acceleratorsPerWorker=per_worker,
                       checkpoint={"dir": f"/fsx/{name}"})
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/pytorch:25.09"
    return job


def node_labels(crds: Cluster, name: str) -> dict[str, str]:
    labels: dict[str, str] = json.loads(crds.kubectl("get", "node", name, "-o", "json")
                                        .stdout)["metadata"]["labels"]
    return labels


def test_a_p5_gang_of_four_nodes_takes_every_efa_interface_and_the_nccl_settings(
        e2e: Operator, crds: Cluster, namespace: str, gpu_group: Any) -> None:
    group = gpu_group("p5.48xlarge", domainLabel="topology.k8s.aws/network-node-layer-3",
                      interconnect="efa-only", nodesPerDomain=4,
                      accelerator={"resource": "nvidia.com/gpu", "perNode": 8,
                                   "efaPerNode": 32})
    apply(crds, gpu_job("h100", group, 4, 8), namespace)
    wait_phase(crds, namespace, "h100", "Running")
    pods = job_pods(crds, namespace, "h100")
    assert len({p["spec"]["nodeName"] for p in pods}) == 4
    for rank, pod in enumerate(pods):
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert (requests["nvidia.com/gpu"], requests[EFA]) == ("8", "32")
        env = env_of(pod)
        assert (env["FI_PROVIDER"], env["FI_EFA_USE_DEVICE_RDMA"], env["FI_EFA_FORK_SAFE"]) \
            == ("efa", "1", "1")
        assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
        assert (env["NNODES"], env["NODE_RANK"], env["WORLD_SIZE"]) == ("4", str(rank), "32")
        assert pod["status"]["phase"] == "Running"


def test_a_gb200_gang_runs_in_one_clique_of_a_p6e_ultraserver_joined_by_one_compute_domain(
        e2e: Operator, crds: Cluster, namespace: str, gpu_group: Any, faults: Faults) -> None:
    """16 of the x72's 18 nodes: one ComputeDomain, every pod's IMEX channel claim allocated
    by the real kube-scheduler from the simulated driver's ResourceSlices; a failed node's
    replacement joins the same domain; deleting the job deletes the domain."""
    group = gpu_group("p6e-gb200.36xlarge", domainLabel=CLIQUE, interconnect="nvlink",
                      nodesPerDomain=18,
                      accelerator={"resource": "nvidia.com/gpu", "perNode": 4,
                                   "efaPerNode": 8})
    apply(crds, gpu_job("moe", group, 16, 4), namespace)
    job = wait_phase(crds, namespace, "moe", "Running")
    placement = job["status"]["placement"]
    assert len(placement["domains"]) == 1                   # one NVLink domain (clique)
    nodes = ranked_nodes(job)
    labels = [node_labels(crds, n) for n in nodes]
    assert len({lab[CLIQUE] for lab in labels}) == 1 and labels[0][CLIQUE] == \
        placement["domains"][0]
    assert len({lab[ULTRASERVER] for lab in labels}) == 1   # and one P6e-GB200 x72
    pods = job_pods(crds, namespace, "moe")
    assert [p["spec"]["nodeName"] for p in pods] == nodes    # ranks as placed
    for pod in pods:
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert (requests["nvidia.com/gpu"], requests[EFA]) == ("4", "8")
        assert env_of(pod)["WORLD_SIZE"] == "64" and pod["status"]["phase"] == "Running"

    domain = get_object(crds, "computedomain", namespace, "moe-imex")
    assert domain["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "moe-imex-channel"
    assert claimed_nodes(crds, namespace, pods) == nodes    # allocated where each pod runs
    joined = wait_for(lambda: members(crds, namespace, set(nodes)), timeout=30,
                      what="every node in the ComputeDomain's status")
    assert joined["status"] == "Ready"

    victim = nodes[5]
    faults.fail(victim)
    job = running_again(crds, namespace, "moe", 1)
    moved = ranked_nodes(job)
    assert victim not in moved and moved[:5] + moved[6:] == nodes[:5] + nodes[6:]
    pods = job_pods(crds, namespace, "moe")
    assert {p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] for p in pods} == {
        "moe-imex-channel"}                                  # the same domain's channel
    assert claimed_nodes(crds, namespace, pods) == moved
    wait_for(lambda: members(crds, namespace, set(moved)), timeout=30,
             what="the replacement node in the ComputeDomain, the failed one gone")

    crds.kubectl("delete", "tj", "moe", "-n", namespace, "--wait=true")
    wait_for(lambda: "moe-imex" not in crds.kubectl(
        "get", "computedomains", "-n", namespace, "-o", "name").stdout,
        timeout=60, what="the ComputeDomain deleted with its job")


def claimed_nodes(crds: Cluster, namespace: str, pods: list[dict[str, Any]]) -> list[str]:
    """Where each pod's IMEX channel claim was allocated (the scheduler's choice), in pod
    order: the claim kube-controller-manager made from the template for the pod."""
    found = []
    for pod in pods:
        statuses = pod["status"].get("resourceClaimStatuses") or []
        [claim_name] = [s["resourceClaimName"] for s in statuses if s["name"] == "imex-channel"]
        claim = get_object(crds, "resourceclaim", namespace, claim_name)
        terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        found.append(terms[0]["matchFields"][0]["values"][0])
    return found


def members(crds: Cluster, namespace: str, wanted: set[str]) -> dict[str, Any] | None:
    """The ComputeDomain's status once its nodes are exactly WANTED."""
    status = get_object(crds, "computedomain", namespace, "moe-imex").get("status") or {}
    return status if {n["name"] for n in status.get("nodes") or []} == wanted else None
