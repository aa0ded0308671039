"""Accelerators by Dynamic Resource Allocation: a group in ResourceClaim mode places a Trn2
gang whose pods claim their Neuron devices through the job's ResourceClaimTemplate, and the
real kube-scheduler allocates them from the sandbox's ResourceSlices on the nodes placement
chose."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.topology.record import ranks_of
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    Operator,
    apply,
    get_object,
    job_pods,
    training_job,
    trn2_pool,
    wait_phase,
)
from tests.e2e.test_gpus import gpu_job

pytestmark = pytest.mark.e2e
NEURON = "aws.amazon.com/neuron"


def test_a_trn2_gang_in_dra_mode_holds_claims_the_scheduler_allocated_where_it_was_placed(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any) -> None:
    group = make_group(accelerator={"resource": NEURON, "perNode": 16,
                                    "requestStyle": "ResourceClaim"})
    apply(crds, training_job("dra", group, 4, checkpoint={"dir": "/fsx/dra"}), namespace)
    job = wait_phase(crds, namespace, "dra", "Running")
    placed = {r["rank"]: r["node"] for r in ranks_of(job["status"]["placement"])}
    assert set(placed.values()) <= set(trn2_pool(crds))
    assert len(job["status"]["placement"]["domains"]) == 1   # one UltraServer, as ever

    template = get_object(crds, "resourceclaimtemplate", namespace, "dra-accelerators-16")
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (request["deviceClassName"], request["count"]) == ("neuron.aws.com", 16)
    assert template["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    for rank, pod in enumerate(job_pods(crds, namespace, "dra")):
        trainer = pod["spec"]["containers"][0]
        assert NEURON not in (trainer.get("resources") or {}).get("requests", {})
        assert pod["metadata"]["annotations"][names.ACCELERATORS_ANNOTATION] == "16"
        assert pod["spec"]["nodeName"] == placed[rank] and pod["status"]["phase"] == "Running"
        [status] = [s for s in pod["status"]["resourceClaimStatuses"]
                    if s["name"] == "accelerators"]
        claim = get_object(crds, "resourceclaim", namespace, status["resourceClaimName"])
        allocation = claim["status"]["allocation"]
        devices = allocation["devices"]["results"]
        assert len(devices) == 16 and {d["driver"] for d in devices} == {"neuron.aws.com"}
        assert {d["pool"] for d in devices} == {placed[rank]}    # on the placed node
        node = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
        assert node["values"] == [placed[rank]]

    status = json.loads(crds.kubectl("get", "usg", group, "-o", "json").stdout)["status"]
    assert status["totals"]["accelerators"] == 16 * 8           # perNode, no extended resource
    used = {d["id"]: d["freeAccelerators"] for d in status["domains"]}
    assert sorted(used.values()) == [0, 64]                     # the gang's domain is full


def test_devices_another_tenant_claims_by_dra_keep_a_gang_off_their_node(
        e2e: Operator, crds: Cluster, namespace: str, make_group: Any) -> None:
    """A plain pod outside the operator claims all 16 Neuron devices of the first
    UltraServer's first node; the operator reads the allocated claim, so a gang that needs
    a whole UltraServer goes to the other one instead of being refused by the scheduler."""
    group = make_group(accelerator={"resource": NEURON, "perNode": 16,
                                    "requestStyle": "ResourceClaim"})
    busy = trn2_pool(crds)[0]
    apply(crds, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "theirs"},
                 "spec": {"devices": {"requests": [{"name": "all", "exactly": {
                     "deviceClassName": "neuron.aws.com", "allocationMode": "ExactCount",
                     "count": 16}}]}}}, namespace)
    apply(crds, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "theirs"},
                 "spec": {"nodeSelector": {"kubernetes.io/hostname": busy},
                          "resourceClaims": [{"name": "all", "resourceClaimName": "theirs"}],
                          "containers": [{"name": "c", "image": "example.com/tool:1",
                                          "resources": {"claims": [{"name": "all"}]}}]}},
          namespace)

    def counted() -> dict[str, Any] | None:
        status = json.loads(crds.kubectl("get", "usg", group, "-o", "json").stdout).get(
            "status") or {}
        free = sorted(d["freeAccelerators"] for d in status.get("domains") or [])
        return status if free == [48, 64] else None
    wait_for(counted, timeout=60, what="the foreign claim's devices counted on its node")
    apply(crds, training_job("dra", group, 4, checkpoint={"dir": "/fsx/dra"}), namespace)
    job = wait_phase(crds, namespace, "dra", "Running")
    placed = {r["node"] for r in ranks_of(job["status"]["placement"])}
    assert placed == set(trn2_pool(crds)[4:8])                  # the other UltraServer
    crds.kubectl("delete", "pod", "theirs", "-n", namespace, "--wait=true")


def test_a_p5_gang_in_dra_mode_claims_its_gpus_from_nvidias_driver(
        e2e: Operator, crds: Cluster, namespace: str, gpu_group: Any) -> None:
    group = gpu_group("p5.48xlarge", domainLabel="topology.k8s.aws/network-node-layer-3",
                      interconnect="efa-only", nodesPerDomain=4,
                      accelerator={"resource": "nvidia.com/gpu", "perNode": 8,
                                   "efaPerNode": 32, "requestStyle": "ResourceClaim"})
    apply(crds, gpu_job("h100", group, 2, 8), namespace)
    wait_phase(crds, namespace, "h100", "Running")
    for pod in job_pods(crds, namespace, "h100"):
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert "nvidia.com/gpu" not in requests and requests["vpc.amazonaws.com/efa"] == "32"
        [status] = pod["status"]["resourceClaimStatuses"]
        claim = get_object(crds, "resourceclaim", namespace, status["resourceClaimName"])
        devices = claim["status"]["allocation"]["devices"]["results"]
        assert len(devices) == 8 and {d["driver"] for d in devices} == {"gpu.nvidia.com"}
        assert {d["pool"] for d in devices} == {pod["spec"]["nodeName"]}
