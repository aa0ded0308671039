"""One truth for accelerator capacity: every pod holding devices on a group's node counts,
in any namespace, whoever made it; a node belongs to one group; and one pass's decisions in
every group never book the same accelerators twice."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goodput_operator.controllers.state import State
from goodput_operator.decide import Failure, decide_jobs, trial
from goodput_operator.decide.group import decide_group
from goodput_operator.times import millis
from goodput_operator.topology.constraints import pinned_node
from goodput_operator.topology.placement import Request, explain_shortage
from tests.unit.fleets import node, trn2
from tests.unit.world import NEURON, NOW, group_spec, job

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"


def affinity(*terms: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("case", "spec", "node_name"), [
    ("bound pods are not 'pinned'", {}, None),
    ("a hostname node selector", {"nodeSelector": {HOST: "n1"}}, "n1"),
    ("a DaemonSet pod's matchFields", {"affinity": affinity(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]})}, "n2"),
    ("hostname In [one]", {"affinity": affinity({"matchExpressions": [
        {"key": HOST, "operator": "In", "values": ["n3"]}]})}, "n3"),
    ("every term names the same node", {"affinity": affinity(
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n3"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]})}, "n3"),
    ("terms naming two nodes pin nothing", {"affinity": affinity(
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n3"]}]},
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n4"]}]})}, None),
    ("a term without a node pins nothing", {"affinity": affinity(
        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n3"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]})}, None),
    ("two hostnames pin nothing", {"affinity": affinity({"matchExpressions": [
        {"key": HOST, "operator": "In", "values": ["n3", "n4"]}]})}, None),
    ("NotIn pins nothing", {"affinity": affinity({"matchExpressions": [
        {"key": HOST, "operator": "NotIn", "values": ["n3"]}]})}, None),
])
def test_a_pod_not_yet_bound_is_pinned_to_the_one_node_it_names(case: str, spec: Obj,
                                                                node_name: str | None) -> None:
    assert pinned_node(spec) == node_name, case


def foreign_pod(name: str, namespace: str, devices: int, node_name: str | None = None,
                pinned: str | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"limits": {NEURON: str(devices)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if pinned:
        spec["nodeSelector"] = {HOST: pinned}
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
            "spec": spec, "status": {"phase": "Pending" if pinned else "Running"}}


def group_body(name: str, selector: dict[str, str], created: float) -> Obj:
    spec = group_spec(nodeSelector=selector)
    return {"metadata": {"name": name, "generation": 1, "creationTimestamp": millis(created)},
            "spec": spec.model_dump(by_alias=True)}


def test_a_foreign_pod_bound_or_pinned_in_any_namespace_counts_and_is_named() -> None:
    fleet = trn2(1)
    fleet.observe_pod(foreign_pod("hog", "team-b", 8, node_name="us0-n1"))
    fleet.observe_pod(foreign_pod("daemon", "kube-system", 16, node_name="us0-n2"))
    assert [n.used for n in fleet.domains["us-0"].nodes] == [0, 8, 16, 0]
    why = explain_shortage(fleet, Request(4, 16), 1)
    assert "node us0-n1: 8 of 16 held by pod team-b/hog" in why
    assert "node us0-n2: 16 of 16 held by pod kube-system/daemon" in why


def test_overlapping_groups_the_older_keeps_the_nodes_and_the_later_says_so() -> None:
    state = State()
    state.upsert_group(group_body("older", {"pool": "trn2"}, NOW - 100))
    state.upsert_group(group_body("later", {"rack": "r0"}, NOW - 50))
    for d in range(2):
        for s in range(4):
            labels = {"pool": "trn2", **({"rack": "r0"} if d == 0 else {})}
            state.upsert_node(node(f"us{d}-n{s}", f"us-{d}", labels=labels))
    assert sorted(state.fleets["older"].nodes) == [f"us{d}-n{s}" for d in range(2)
                                                   for s in range(4)]
    assert not state.fleets["later"].nodes
    later = decide_group(state.snapshot(NOW, with_members=True), "later")
    overlapping = next(c for c in later.desired["conditions"] if c["type"] == "Overlapping")
    assert (overlapping["status"], overlapping["reason"]) == ("True", "SelectorsOverlap")
    assert "4 node(s) also selected by the older group 'older'" in overlapping["message"]
    assert "us0-n0, us0-n1, us0-n2, us0-n3" in overlapping["message"]
    assert [e.reason for e in later.events] == ["Overlapping"]
    older = decide_group(state.snapshot(NOW, with_members=True), "older")
    assert next(c for c in older.desired["conditions"]
                if c["type"] == "Overlapping")["status"] == "False"


# ---- the property: no accelerator is ever booked twice -----------------------------------

SELECTORS = [{"pool": "a"}, {"pool": "b"}, {"zone": "z0"}, {"zone": "z1"}, {"fabric": "trn2"}]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[Obj], list[Obj]]:
    """Nodes in 4 UltraServers (each in a pool and a zone), 1-3 groups whose selectors may
    overlap, foreign pods bound or pinned in any namespace, and jobs in any group."""
    nodes = []
    for d in range(4):
        labels = {"pool": draw(st.sampled_from("ab")), "zone": draw(st.sampled_from(
            ["z0", "z1"])), "fabric": "trn2"}
        nodes += [node(f"us{d}-n{s}", f"us-{d}", labels=labels) for s in range(4)]
    count = draw(st.integers(1, 3))
    selectors = draw(st.lists(st.sampled_from(SELECTORS), min_size=count, max_size=count))
    groups = [group_body(f"g{i}", selector, NOW - 1000 + draw(st.integers(0, 100)))
              for i, selector in enumerate(selectors)]
    free = {n["metadata"]["name"]: 16 for n in nodes}
    pods = []
    for i in range(draw(st.integers(0, 8))):
        where = draw(st.sampled_from(sorted(free)))
        if free[where] == 0:
            continue
        devices = draw(st.integers(1, free[where]))
        free[where] -= devices
        bound = draw(st.booleans())
        pods.append(foreign_pod(f"p{i}", draw(st.sampled_from(["team-a", "team-b", "ops"])),
                                devices, node_name=where if bound else None,
                                pinned=None if bound else where))
    jobs = []
    for i in range(draw(st.integers(1, 5))):
        body = job(f"j{i}", ultraServerGroup=f"g{draw(st.integers(0, count - 1))}",
                   workers=draw(st.integers(1, 4)),
                   acceleratorsPerWorker=draw(st.sampled_from([4, 8, 16])),
                   topology={"unit": draw(st.sampled_from(["node", "domain"])),
                             "policy": "preferred"})
        body["metadata"]["namespace"] = draw(st.sampled_from(["team-a", "team-b"]))
        body["metadata"]["creationTimestamp"] = millis(NOW - 30 + i)
        jobs.append(body)
    return nodes, groups, pods, jobs


@settings(max_examples=150)
@given(layouts())
def test_no_accelerator_is_ever_booked_twice(layout: tuple[list[Obj], list[Obj], list[Obj],
                                                           list[Obj]]) -> None:
    nodes, groups, pods, jobs = layout
    state = State()
    for body in groups:
        state.upsert_group(body)
    for body in nodes:
        state.upsert_node(body)
    for body in pods:
        state.upsert_pod(body)
    for body in jobs:
        state.upsert_job(body)
    for _ in range(2):  # a second pass sees the first one's reservations
        snapshot = state.snapshot(NOW)
        failures: list[Failure] = []
        with trial(snapshot):
            decisions = decide_jobs(snapshot, failures)
        assert not failures
        for decision in decisions:
            state.reserve(decision.reservations)
    held: Counter[str] = Counter()
    homes: Counter[str] = Counter()
    for fleet in state.fleets.values():
        for name, fleet_node in fleet.nodes.items():
            homes[name] += 1
            held[name] += fleet_node.used
            assert fleet_node.used == sum(count for _, count, _ in fleet_node.pods.values())
    assert all(count == 1 for count in homes.values()), "a node in two groups"
    assert all(used <= 16 for used in held.values()), held
    for pod in pods:  # every foreign pod counts on its node, whichever group has it
        name = pod["spec"].get("nodeName") or pod["spec"]["nodeSelector"][HOST]
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if homes[name]:
            assert any(key in fleet.nodes[name].pods for fleet in state.fleets.values()
                       if name in fleet.nodes)


def test_with_resource_claims_capacity_is_declared_and_claimed_counts_are_capped() -> None:
    """DRA nodes publish no extended resource: a Ready node holds the group's perNode; a pod
    counts what its accelerator claim asks for (the operator's annotation), never more than
    a node's, so no pod can make a node look fuller than itself."""
    from goodput_operator import names
    from goodput_operator.topology.model import Fleet, GroupShape

    spec = group_spec(accelerator={"resource": NEURON, "perNode": 16,
                                   "requestStyle": "ResourceClaim"})
    shape = GroupShape.from_spec(spec)
    assert shape.claims
    bare = node("us0-n0", "us0", "b0", 0)          # no aws.amazon.com/neuron allocatable
    fleet = Fleet.from_objects(shape, [bare])
    assert fleet.nodes["us0-n0"].capacity == 16 and fleet.nodes["us0-n0"].state == "ready"

    def claiming(name: str, count: str | None) -> Obj:
        annotations = {} if count is None else {names.ACCELERATORS_ANNOTATION: count}
        return {"metadata": {"name": name, "namespace": "ns", "annotations": annotations},
                "spec": {"nodeName": "us0-n0", "containers": [{"name": "c"}]},
                "status": {"phase": "Running"}}
    fleet.observe_pod(claiming("a", "4"))
    fleet.observe_pod(claiming("b", None))         # claims nothing we know of
    assert fleet.nodes["us0-n0"].used == 4
    fleet.observe_pod(claiming("c", "1000"))       # at most a node's
    assert fleet.nodes["us0-n0"].used == 20
    plain = Fleet.from_objects(GroupShape.from_spec(group_spec()), [bare])
    plain.observe_pod(claiming("a", "4"))          # device-plugin groups read requests only
    assert plain.nodes["us0-n0"].used == 0 and plain.nodes["us0-n0"].state == "misshaped"


def claim(namespace: str, name: str, node: str | None, devices: int,
          pod: str | None = None, driver: str = "neuron.aws.com") -> Obj:
    status: Obj = {}
    if node:
        status["allocation"] = {
            "devices": {"results": [{"driver": driver, "pool": node, "device": f"d{i}",
                                     "request": "r"} for i in range(devices)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    if pod:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u"}]
    return {"metadata": {"namespace": namespace, "name": name}, "status": status}


def test_devices_other_tenants_claim_by_dra_count_against_the_node_ours_once() -> None:
    """A claim allocated on a node holds its devices there in every group that claims by
    DRA; the claim of a pod the fleet already counts (ours: it says how many) is not
    counted twice, whichever of the two the watches bring first."""
    from goodput_operator import names
    from goodput_operator.topology.model import claim_use

    state = State()
    state.upsert_node({**node("us0-n0", "us0", "b0", 0), "metadata": {
        "name": "us0-n0", "labels": {"pool": "trn2", "topology.k8s.aws/ultraserver-id": "us0"}}})
    spec = group_spec(nodeSelector={"pool": "trn2"},
                      accelerator={"resource": NEURON, "perNode": 16,
                                   "requestStyle": "ResourceClaim"})
    state.upsert_group({"metadata": {"name": "trn2", "creationTimestamp": "2027-01-01T00:00:00Z"},
                        "spec": spec.model_dump(by_alias=True)})
    fleet = state.fleets["trn2"]
    assert fleet.nodes["us0-n0"].capacity == 16
    state.upsert_claim("team/theirs", claim_use(claim("team", "theirs", "us0-n0", 8, "p1")))
    assert fleet.nodes["us0-n0"].used == 8                      # a foreign claim counts
    state.upsert_claim("ml/w0-acc", claim_use(claim("ml", "w0-acc", "us0-n0", 4, "w0")))
    assert fleet.nodes["us0-n0"].used == 12                     # not known as ours yet
    ours = {"metadata": {"name": "w0", "namespace": "ml", "resourceVersion": "5",
                         "annotations": {names.ACCELERATORS_ANNOTATION: "4"}},
            "spec": {"nodeName": "us0-n0", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}
    state.upsert_pod(ours)
    assert fleet.nodes["us0-n0"].used == 12                     # now by the pod, not twice
    state.upsert_claim("team/theirs", None)                     # deleted
    assert fleet.nodes["us0-n0"].used == 4
    state.upsert_claim("team/gpu", claim_use(claim("team", "gpu", "us0-n0", 2,
                                                    driver="gpu.nvidia.com")))
    assert fleet.nodes["us0-n0"].used == 4                      # another driver's devices
    state.upsert_group({"metadata": {"name": "trn2", "creationTimestamp": "2027-01-01T00:00:00Z"},
                        "spec": {**spec.model_dump(by_alias=True), "nodesPerDomain": 2}})
    assert state.fleets["trn2"].nodes["us0-n0"].used == 4       # a rebuilt fleet counts them
    state.upsert_claim("team/early", claim_use(claim("team", "early", "us0-n1", 16, "p2")))
    state.upsert_node({**node("us0-n1", "us0", "b0", 0), "metadata": {           # joins later
        "name": "us0-n1", "labels": {"pool": "trn2", "topology.k8s.aws/ultraserver-id": "us0"}}})
    assert state.fleets["trn2"].nodes["us0-n1"].used == 16      # its claim counted then
