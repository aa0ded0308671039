"""Which nodes a pod may run on, as kube-scheduler judges it (topology.constraints)."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.topology.constraints import eligibility, pod_requests, why_not

pytestmark = pytest.mark.unit


def node(labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         **allocatable: str) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": {"pool": "trn2", "zone": "a", "gen": "2",
                                                  **(labels or {})}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": "192", "memory": "2Ti",
                                       "vpc.amazonaws.com/efa": "16", **allocatable}}}


def pod(**spec: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "i", "resources": spec.pop("resources", {})}],
            **spec}


def term(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(("case", "node_", "pod_", "refused"), [
    ("nothing asked", node(), pod(), None),
    ("selector met", node(), pod(nodeSelector={"zone": "a"}), None),
    ("selector missed", node(), pod(nodeSelector={"zone": "b"}), "nodeSelector zone=b"),
    ("affinity In", node(), pod(affinity=term({"key": "zone", "operator": "In",
                                               "values": ["a", "b"]})), None),
    ("affinity NotIn", node(), pod(affinity=term({"key": "zone", "operator": "NotIn",
                                                  "values": ["a"]})), "required node affinity"),
    ("affinity Exists / DoesNotExist", node(),
     pod(affinity=term({"key": "pool", "operator": "Exists"},
                       {"key": "spot", "operator": "DoesNotExist"})), None),
    ("affinity Gt", node(), pod(affinity=term({"key": "gen", "operator": "Gt",
                                               "values": ["2"]})), "required node affinity"),
    ("a taint not tolerated", node(taints=[GPU_TAINT]), pod(),
     "taint nvidia.com/gpu:NoSchedule"),
    ("a taint tolerated by key and value", node(taints=[GPU_TAINT]),
     pod(tolerations=[{"key": "nvidia.com/gpu", "value": "present",
                       "effect": "NoSchedule"}]), None),
    ("a taint tolerated by Exists", node(taints=[GPU_TAINT]),
     pod(tolerations=[{"operator": "Exists"}]), None),
    ("a toleration for another effect", node(taints=[GPU_TAINT]),
     pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists",
                       "effect": "NoExecute"}]), "taint nvidia.com/gpu:NoSchedule"),
    ("PreferNoSchedule only steers", node(taints=[{**GPU_TAINT, "effect": "PreferNoSchedule"}]),
     pod(), None),
    ("the operator's quarantine is the fleet model's business",
     node(taints=[{"key": names.QUARANTINE_TAINT, "effect": "NoSchedule"}]), pod(), None),
    ("CPU within allocatable", node(), pod(resources={"requests": {"cpu": "190"}}), None),
    ("CPU beyond allocatable", node(), pod(resources={"requests": {"cpu": "500"}}),
     "cpu 500 > allocatable 192"),
    ("EFA devices beyond allocatable", node(),
     pod(resources={"limits": {"vpc.amazonaws.com/efa": "32"}}),
     "vpc.amazonaws.com/efa 32 > allocatable 16"),
    ("an extended resource the node lacks", node(),
     pod(resources={"limits": {"example.com/fpga": "1"}}), "example.com/fpga 1 > allocatable 0"),
])
def test_why_a_node_refuses_a_pod(case: str, node_: dict[str, Any], pod_: dict[str, Any],
                                  refused: str | None) -> None:
    assert why_not(node_, pod_, pod_requests(pod_)) == refused, case


def test_requests_sum_containers_and_take_the_largest_init_container() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                           {"resources": {"limits": {"cpu": "500m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "8"}}},
                               {"resources": {"requests": {"memory": "1Ki"}}}]}
    requests = pod_requests(spec)
    assert (requests["cpu"], requests["memory"]) == (8, 2**30)


def test_eligibility_names_the_nodes_and_the_commonest_reasons() -> None:
    nodes = [node(), {**node(taints=[GPU_TAINT]), "metadata": {"name": "t", "labels": {}}}]
    nodes[0]["metadata"]["name"] = "ok"
    fit, why = eligibility(nodes, pod())
    assert fit == frozenset({"ok"}) and why == "1 refuse it: taint nvidia.com/gpu:NoSchedule"
    assert eligibility([nodes[0]], pod()) == (None, "")
