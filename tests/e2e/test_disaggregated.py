"""Disaggregated serving end to end on two GB200 NVL72 racks: prefill and decode pools
scaled apart from a real Prometheus (decode on KV-cache use, prefill on its queue), each
serving unit's groups inside one NVLink domain."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.sandbox import drivers
from goodput_operator.sandbox import fleet as fleets
from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    NO_SWEEPS,
    OWN_FLEET,
    Operator,
    apply,
    delete_all,
    get_object,
    wait_pool_ready,
)

pytestmark = pytest.mark.e2e
POOL = "disaggregated"  # the pool of this test's own two racks
GB200 = "p6e-gb200.36xlarge"


@pytest.fixture
def two_racks(crds: Cluster, namespace: str, operator: Operator) -> Iterator[str]:
    """Two NVL72 racks (18 KWOK nodes of 4 GPUs each, one clique a rack) of the test's own,
    their IMEX channels published as the driver does, and a group over exactly them; all
    deleted afterwards, the test's endpoints and their pods first."""
    fleet = fleets.parse({
        "apiVersion": fleets.FLEET_API_VERSION, "kind": fleets.FLEET_KIND,
        "metadata": {"name": OWN_FLEET},
        "spec": {"region": "us-east-2", "zone": "us-east-2a", "pools": [{
            "name": POOL, "instanceType": GB200, "domains": 2, "nodesPerDomain": 18,
            "ultraServerNodes": 18, "domainLabel": drivers.CLIQUE_LABEL,
            "capacity": {"cpu": 144, "memory": "960Gi", "pods": 110,
                         drivers.GPU_RESOURCE: 4}}]}}, "test")
    bodies = fleets.nodes(fleet)
    slices = [s for s in map(drivers.channel_slice, bodies) if s is not None]
    node_names = [b["metadata"]["name"] for b in bodies]
    crds.kubectl("create", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": bodies + slices}))
    group = f"racks-{uuid.uuid4().hex[:6]}"
    try:
        wait_pool_ready(crds, POOL, "the two racks")
        apply(crds, {"apiVersion": "goodput.dev/v1alpha1", "kind": "UltraServerGroup",
                     "metadata": {"name": group},
                     "spec": {"nodeSelector": {fleets.POOL_LABEL: POOL},
                              "domainLabel": drivers.CLIQUE_LABEL, "interconnect": "nvlink",
                              "accelerator": {"resource": drivers.GPU_RESOURCE,
                                              "perNode": 4},
                              "nodesPerDomain": 18, "probes": NO_SWEEPS}})
        yield group
    finally:
        delete_all(crds, "ie", namespace)
        crds.kubectl("delete", "usg", group, "--ignore-not-found")
        crds.kubectl("delete", "resourceslice", *[s["metadata"]["name"] for s in slices],
                     "--ignore-not-found")
        crds.kubectl("delete", "node", *node_names, "--ignore-not-found")


def scaling(url: str, metric: dict[str, Any], most: int = 4) -> dict[str, Any]:
    return {"minReplicas": 1, "maxReplicas": most, "intervalSeconds": 1, "prometheusUrl": url,
            "metrics": [metric], "scaleDown": {"stabilizationSeconds": 600}}


def disaggregated(group: str, url: str) -> dict[str, Any]:
    """Decode replicas of 9 nodes (half a rack) scaled on KV-cache use; prefill replicas
    of one node scaled on their queue."""
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": "split"},
            "spec": {"ultraServerGroup": group, "model": {"name": "llama"},
                     "template": {"spec": {"containers": [{"name": "server",
                                                           "image": "vllm:1"}]}},
                     "roles": {
                         "decode": {"replicaShape": {"workers": 9, "acceleratorsPerWorker": 4},
                                    "scaling": scaling(url, {"type": "KVCacheUtilization",
                                                             "target": 0.5}, most=2)},
                         "prefill": {"replicaShape": {"workers": 1, "acceleratorsPerWorker": 4},
                                     "scaling": scaling(url, {"type": "QueueDepth",
                                                              "target": 8})}}}}


def roles_status(cluster: Cluster, namespace: str) -> dict[str, Any]:
    return (get_object(cluster, "ie", namespace, "split").get("status") or {})


def reached(cluster: Cluster, namespace: str, ready: dict[str, int], units: int
            ) -> dict[str, Any] | None:
    status = roles_status(cluster, namespace)
    got = {r["name"]: r.get("readyReplicas", 0) for r in status.get("roles") or []}
    return status if got == ready and len(status.get("units") or []) == units else None


def test_prefill_and_decode_scale_apart_and_each_unit_stays_in_one_nvlink_domain(
        crds: Cluster, namespace: str, two_racks: str, metrics_source: Any) -> None:
    exporter, prometheus = metrics_source
    exporter.cache_use(namespace, "split", "decode", 0.4)
    exporter.queue(namespace, "split", 4, role="prefill")
    exporter.queue(namespace, "split", 500, role="")      # another pool's queue: not read
    apply(crds, disaggregated(two_racks, prometheus.url), namespace)
    status = wait_for(lambda: reached(crds, namespace, {"decode": 1, "prefill": 1}, 1),
                      timeout=90, what="the first unit: one decode and one prefill group")

    exporter.cache_use(namespace, "split", "decode", 0.9)   # 1 x 0.9 / 0.5 -> 2 decode
    # (then 2 x 0.9 / 0.5 -> 4, held at its maxReplicas 2)
    status = wait_for(lambda: reached(crds, namespace, {"decode": 2, "prefill": 2}, 2),
                      timeout=90, what="a second unit in the other rack")
    decisions = {d["role"]: d for d in status["recentScaling"]}
    assert (decisions["decode"]["from"], decisions["decode"]["to"]) == (1, 2), status
    assert decisions["decode"]["metrics"] == {"KVCacheUtilization": "0.9"}, status
    assert "prefill" not in decisions, status        # its second group is the unit's, not
    prefill = next(r for r in status["roles"] if r["name"] == "prefill")   # its queue's
    assert prefill["desiredReplicas"] == 2

    exporter.queue(namespace, "split", 30, role="prefill")    # 30 / 8 -> 4 prefill
    status = wait_for(lambda: reached(crds, namespace, {"decode": 2, "prefill": 4}, 2),
                      timeout=90, what="four prefill groups, two in each unit")
    up = [d for d in status["recentScaling"] if d.get("role") == "prefill"][-1]
    assert (up["from"], up["to"], up["metrics"]) == (1, 4, {"QueueDepth": "30"}), status
    decode = next(r for r in status["roles"] if r["name"] == "decode")
    assert decode["desiredReplicas"] == 2                # the prefill queue moved only prefill

    cliques = {n["metadata"]["name"]: n["metadata"]["labels"][drivers.CLIQUE_LABEL]
               for n in json.loads(crds.kubectl("get", "nodes", "-l",
                                                f"{fleets.POOL_LABEL}={POOL}", "-o",
                                                "json").stdout)["items"]}
    groups = {(g["role"], g["index"]): g for g in status["groups"]}
    assert {u["scope"] for u in status["units"]} == set(cliques.values())   # both racks
    for unit in status["units"]:
        assert len(unit["decode"]) == 1 and len(unit["prefill"]) == 2, status["units"]
        members = [groups[("decode", i)] for i in unit["decode"]] + \
                  [groups[("prefill", i)] for i in unit["prefill"]]
        assert {cliques[n] for g in members for n in g["nodes"]} == {unit["scope"]}
    pods = json.loads(crds.kubectl("get", "pods", "-n", namespace, "-l",
                                   f"{names.ENDPOINT_LABEL}=split", "-o", "json").stdout)["items"]
    assert len(pods) == 2 * 9 + 4
    for pod in pods:                                     # the NVLink domain the scheduler
        labels = pod["metadata"]["labels"]               # bound it to is its unit's
        group = groups[(labels[names.SERVING_ROLE_LABEL], int(labels[names.REPLICA_LABEL]))]
        assert cliques[pod["spec"]["nodeName"]] == group["domain"]
    service = get_object(crds, "svc", namespace, "split")
    assert service["spec"]["selector"][names.SERVING_ROLE_LABEL] == "decode"
