"""spec.topology end to end, one case per field (issue 46): each field, set on a
TrainingJob through the API server, changes where the real operator puts the gang on the
session fleet's two Trn2 UltraServers (4 nodes x 16 chips), against what the defaults do
(unit domain, policy required, no slices, no balance: six whole-node workers go 4 + 2,
and four wait for one UltraServer while each has only two nodes free).
A change that drops a field on its way to the engine fails its case here."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.conftest import Cluster, wait_for
from tests.e2e.conftest import (
    POOL_LABEL,
    Operator,
    apply,
    get_job,
    job_pods,
    training_job,
    wait_phase,
)

pytestmark = pytest.mark.e2e
ULTRASERVER = "topology.k8s.aws/ultraserver-id"
NEURON = "aws.amazon.com/neuron"


def split(crds: Cluster, namespace: str, name: str) -> list[int]:
    """Workers per UltraServer, largest first, of a running job."""
    wait_phase(crds, namespace, name, "Running")
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in json.loads(
        crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    counts = Counter(labels[p["spec"]["nodeName"]][ULTRASERVER]
                     for p in job_pods(crds, namespace, name))
    return sorted(counts.values(), reverse=True)


def placed_condition(crds: Cluster, namespace: str, name: str) -> dict[str, str]:
    def said() -> dict[str, str] | None:
        conditions = (get_job(crds, namespace, name).get("status") or {}).get("conditions")
        return next((c for c in conditions or [] if c["type"] == "Placed"), None)
    return wait_for(said, timeout=60, what=f"{name}'s Placed condition")


def test_by_default_six_workers_take_the_fewest_ultraservers(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("plain", trn2_group, 6), namespace)
    assert split(crds, namespace, "plain") == [4, 2]


def test_balance_splits_six_workers_evenly(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("even", trn2_group, 6, topology={"balance": True}), namespace)
    assert split(crds, namespace, "even") == [3, 3]


def test_slices_of_three_keep_each_slice_in_one_ultraserver(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str) -> None:
    apply(crds, training_job("sliced", trn2_group, 6, topology={"slice": {"size": 3}}),
          namespace)
    assert split(crds, namespace, "sliced") == [3, 3]


@pytest.fixture
def half_held(e2e: Operator, crds: Cluster, namespace: str) -> Iterator[None]:
    """Pods of no job of ours, bound to the first two nodes of each Trn2 UltraServer and
    holding their chips: each UltraServer keeps 2 of its 4 nodes free. Deleted at once
    after the test (before its jobs' cleanup waits for the namespace's pods)."""
    hold_half_of_each_ultraserver(crds, namespace)
    yield
    crds.kubectl("delete", "pods", "-n", namespace, "-l", "e2e.goodput.dev/other=true",
                 "--grace-period=0", "--force")


def hold_half_of_each_ultraserver(crds: Cluster, namespace: str) -> None:
    nodes = [n for n in json.loads(crds.kubectl("get", "nodes", "-o", "json").stdout)["items"]
             if n["metadata"]["labels"].get(POOL_LABEL) == "trn2"]
    by_domain: dict[str, list[str]] = {}
    for n in nodes:
        by_domain.setdefault(n["metadata"]["labels"][ULTRASERVER], []).append(
            n["metadata"]["name"])
    held = [name for members in by_domain.values() for name in sorted(members)[:2]]
    for i, name in enumerate(held):
        apply(crds, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                         "name": f"other-{i}", "labels": {"e2e.goodput.dev/other": "true"}},
                     "spec": {"nodeName": name, "containers": [{
                         "name": "c", "image": "example.com/other:1", "resources": {
                             "requests": {NEURON: "16"}, "limits": {NEURON: "16"}}}]}},
              namespace)
    wait_for(lambda: all(p["status"].get("phase") == "Running" for p in json.loads(
        crds.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]),
        what="the other pods running")


def test_with_half_of_each_ultraserver_held_the_default_waits_for_one(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        half_held: None) -> None:
    """Four workers fit one UltraServer: unit domain, policy required wait for one."""
    apply(crds, training_job("packed", trn2_group, 4), namespace)
    placed = placed_condition(crds, namespace, "packed")
    assert (placed["status"], placed["reason"]) == ("False", "WaitingForCapacity")


def test_unit_node_takes_any_nodes(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        half_held: None) -> None:
    apply(crds, training_job("anywhere", trn2_group, 4, topology={"unit": "node"}), namespace)
    assert split(crds, namespace, "anywhere") == [2, 2]


def test_policy_preferred_spans_more_ultraservers_rather_than_wait(
        e2e: Operator, crds: Cluster, namespace: str, trn2_group: str,
        half_held: None) -> None:
    apply(crds, training_job("wider", trn2_group, 4, topology={"policy": "preferred"}),
          namespace)
    assert split(crds, namespace, "wider") == [2, 2]
