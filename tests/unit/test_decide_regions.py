"""Multi-region endpoints (decide.regions): where new replicas go under each split, which
leave first, failover away from a region whose replicas stay unready, rollouts one replica
at a time, and the manager's status summing the regions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import InferenceEndpointStatus, MultiRegion
from goodput_operator.autoscaling.algorithm import Decision
from goodput_operator.decide import Scaled, decide_endpoints, trial
from goodput_operator.decide.regions import (
    DROPPED_PER_PASS,
    SENT_PER_PASS,
    Replica,
    plan_regions,
    revision,
)
from goodput_operator.resources import workload as kueue
from goodput_operator.times import millis
from tests.unit.world import GROUP, NOW, conditions, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
GRACE = 60


def policy(split: str = "Capacity", **weights: int) -> MultiRegion:
    regions = [{"name": n, "queue": f"q-{n}", "weight": w}
               for n, w in (weights or {"east": 1, "west": 1}).items()]
    return MultiRegion.model_validate({"split": split, "failoverSeconds": GRACE,
                                       "regions": regions})


def replica(name: str, region: str, ready: bool = True, since: float = NOW - 10,
            room: int | None = None, fresh: bool = True) -> Replica:
    return Replica(name, region, ready, since, fresh, room, f"{region}-cluster")


@dataclass(frozen=True)
class Case:
    name: str
    split: str
    weights: dict[str, int]
    desired: int
    replicas: list[Replica]
    creates: list[str]  # regions, in order
    deletes: list[str]
    unavailable: tuple[str, ...] = ()


CASES = [
    Case("Capacity: the region reporting the most room", "Capacity", {},
         3, [replica("r-0", "east", room=1), replica("r-1", "west", room=5)], ["west"], []),
    Case("enough replicas: nothing moves", "Capacity", {},
         2, [replica("r-0", "east", room=1), replica("r-1", "west", room=5)], [], []),
    Case("Capacity: new replicas follow the room, counted down as they go", "Capacity", {},
         4, [replica("r-0", "east", room=1), replica("r-1", "west", room=2)],
         ["west", "east"], []),
    Case("Capacity: a region reporting no room gets none", "Capacity", {},
         3, [replica("r-0", "east", room=0), replica("r-1", "west", room=3)],
         ["west"], []),
    Case("Capacity: unknown room counts as one, then fewer replicas first", "Capacity", {},
         2, [], ["east", "west"], []),
    Case("Weighted: shares by weight", "Weighted", {"east": 3, "west": 1},
         4, [], ["east", "east", "east", "west"], []),
    Case("Weighted: zero-weight regions only when nothing else is open", "Weighted",
         {"east": 1, "west": 0}, 2, [], ["east", "east"], []),
    Case("scale-down: unready first, then the region with the least room", "Capacity", {},
         2, [replica("r-0", "east", room=1), replica("r-1", "west", room=4),
             replica("r-2", "west", room=4), replica("r-3", "east", ready=False, room=1)],
         [], ["r-3", "r-0"]),
    Case("failover: unready past the grace moves, and its region is closed", "Capacity",
         {}, 2, [replica("r-0", "east", ready=False, since=NOW - GRACE - 1, room=0),
                 replica("r-1", "west", room=3)], ["west"], ["r-0"], ("east",)),
    Case("unready within the grace stays", "Capacity", {},
         2, [replica("r-0", "east", ready=False, since=NOW - 5),
             replica("r-1", "west")], [], []),
    Case("a replica in a region no longer listed is deleted and replaced", "Capacity",
         {"west": 1}, 1, [replica("r-0", "east")], ["west"], ["r-0"]),
    Case("rollout: one new replica first while the old ones serve", "Capacity", {},
         2, [replica("r-0", "east", fresh=False), replica("r-1", "west", fresh=False)],
         ["east"], []),
    Case("rollout: an old one leaves once the new one is ready, the next new one comes",
         "Capacity", {}, 2, [replica("r-0", "east", fresh=False),
                             replica("r-1", "west", fresh=False), replica("r-2", "east")],
         ["west"], ["r-1"]),
    Case("rollout: not while the new one is still starting", "Capacity", {},
         2, [replica("r-0", "east", fresh=False), replica("r-1", "west", fresh=False),
             replica("r-2", "east", ready=False)], [], []),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_where_replicas_go_and_which_leave(case: Case) -> None:
    plan = plan_regions(policy(case.split, **case.weights), case.desired, case.replicas,
                        {}, NOW)
    assert plan.create == case.creates
    assert plan.delete == case.deletes
    assert tuple(sorted(plan.unavailable)) == case.unavailable


def test_a_closed_region_stays_closed_for_the_grace_then_opens() -> None:
    closed = {"east": (NOW + 30, "replica r-0 not ready for 61s")}
    plan = plan_regions(policy(), 2, [replica("r-1", "west", room=0)], closed, NOW)
    assert plan.create == [] and "east: replica r-0" in plan.short
    later = plan_regions(policy(), 2, [replica("r-1", "west", room=0)], closed, NOW + 31)
    assert later.create == ["east"] and later.unavailable == {}


PARENT_SPEC = {
    "ultraServerGroup": GROUP, "model": {"name": "m"}, "replicas": 3,
    "replicaShape": {"workers": 4, "acceleratorsPerWorker": 16},
    "template": {"spec": {"containers": [{"name": "s", "image": "i"}]}},
    "multiRegion": {"regions": [{"name": "east", "queue": "q-east"},
                                {"name": "west", "queue": "q-west"}],
                    "failoverSeconds": GRACE}}


def parent(status: Obj | None = None) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": "llm", "namespace": "ns", "uid": "uid-llm",
                         "generation": 1},
            "spec": PARENT_SPEC, "status": status or {}}


def child(index: int, region: str, ready: bool, room: int, cluster: str,
          since: float = NOW - 10) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": f"llm-{index}", "namespace": "ns", "uid": f"c{index}",
                         "creationTimestamp": millis(NOW - 600),
                         "labels": {names.REGION_LABEL: region,
                                    names.REVISION_LABEL: revision(PARENT_SPEC),
                                    kueue.QUEUE_LABEL: f"q-{region}",
                                    names.GLOBAL_ENDPOINT_LABEL: "llm"},
                         "annotations": {names.GLOBAL_UID_ANNOTATION: "uid-llm"}},
            "spec": {"managedBy": kueue.MULTIKUEUE},
            "status": {"readyReplicas": int(ready), "room": room, "cluster": cluster,
                       "conditions": [{"type": "Ready", "status": str(ready),
                                       "lastTransitionTime": millis(since)}]}}


def test_the_manager_sends_replicas_and_sums_the_regions() -> None:
    children = [child(0, "east", True, 0, "cluster-e"), child(1, "west", True, 2,
                                                                "cluster-w")]
    snapshot = world(None, endpoints=[parent()], delegated_endpoints=children,
                     kueue=True)
    with trial(snapshot):
        [decided, *handed] = decide_endpoints(snapshot, [])
    [sent] = decided.children
    assert sent["metadata"]["labels"][names.REGION_LABEL] == "west"
    assert sent["metadata"]["labels"][kueue.QUEUE_LABEL] == "q-west"
    assert sent["spec"]["managedBy"] == kueue.MULTIKUEUE and sent["spec"]["replicas"] == 1
    assert "multiRegion" not in sent["spec"] and "scaling" not in sent["spec"]
    assert sent["metadata"]["name"] == "llm-2"
    assert sent["metadata"]["labels"][names.GLOBAL_ENDPOINT_LABEL] == "llm"
    status = decided.desired
    InferenceEndpointStatus.model_validate(status)
    assert (status["replicas"], status["desiredReplicas"], status["readyReplicas"]) == \
        (3, 3, 2)
    regions = {r["name"]: r for r in status["regions"]}
    assert regions["east"] == {"name": "east", "replicas": 1, "readyReplicas": 1, "room": 0,
                               "cluster": "cluster-e"}
    assert regions["west"]["replicas"] == 2 and regions["west"]["room"] == 2
    assert conditions(status)["Ready"] == ("False", "ReplicasNotReady")
    # the replicas on the manager: already sent, so nothing of theirs is written here
    assert [h.desired for h in handed] == [{}, {}]


def test_a_failing_region_is_said_in_the_status_and_an_event() -> None:
    children = [child(0, "east", False, 0, "cluster-e", since=NOW - GRACE - 5),
                child(1, "west", True, 4, "cluster-w")]
    snapshot = world(None, endpoints=[parent({"replicas": 2})],
                     delegated_endpoints=children, kueue=True)
    with trial(snapshot):
        [decided, *_] = decide_endpoints(snapshot, [])
    assert decided.drop == ["llm-0"]
    assert [c["metadata"]["labels"][names.REGION_LABEL] for c in decided.children] == \
        ["west", "west"]
    east = {r["name"]: r for r in decided.desired["regions"]}["east"]
    assert east["unavailableUntil"] == millis(NOW + GRACE)
    assert "not ready for 65s in cluster-e" in east["message"]
    [event] = [e for e in decided.events if e.reason == "ReplicaMoved"]
    assert event.type == "Warning" and "region east takes no new replica" in event.message


def test_a_replica_whose_endpoint_is_gone_is_deleted() -> None:
    orphan = child(0, "east", True, 0, "cluster-e")
    snapshot = world(None, endpoints=[], delegated_endpoints=[orphan], kueue=True)
    with trial(snapshot):
        [decided] = decide_endpoints(snapshot, [])
    assert decided.drop == ["llm-0"]
    recreated = {**parent(), "metadata": {**parent()["metadata"], "uid": "other"}}
    snapshot = world(None, endpoints=[recreated], delegated_endpoints=[orphan], kueue=True)
    with trial(snapshot):
        [_, decided] = decide_endpoints(snapshot, [])
    assert decided.drop == ["llm-0"]  # a new endpoint of the same name is not its owner


def test_with_scaling_the_autoscalers_decision_sizes_the_whole_endpoint() -> None:
    scaled_spec = {**PARENT_SPEC, "scaling": {
        "minReplicas": 1, "maxReplicas": 8,
        "metrics": [{"type": "QueueDepth", "target": 8,
                     "query": 'sum(vllm:num_requests_waiting{endpoint="llm"})'}]}}
    del scaled_spec["replicas"]
    body = {**parent(), "spec": scaled_spec}
    children = [child(0, "east", True, 3, "cluster-e"), child(1, "west", True, 1,
                                                                "cluster-w")]
    for c in children:
        c["metadata"]["labels"][names.REVISION_LABEL] = revision(scaled_spec)
    decision = Decision(4, "queue 30 > 2 x 8", {})
    snapshot = world(None, endpoints=[body], delegated_endpoints=children, kueue=True,
                     scaled={("ns", "llm", ""): Scaled(decision, 2, NOW)})
    with trial(snapshot):
        [decided, *_] = decide_endpoints(snapshot, [])
    assert decided.desired["desiredReplicas"] == 4
    assert [c["metadata"]["labels"][names.REGION_LABEL] for c in decided.children] == \
        ["east", "east"]  # where the room is
    assert all("scaling" not in c["spec"] for c in decided.children)
    assert decided.desired["lastScaling"]["to"] == 4 and decided.scaling_recorded == [""]


def test_a_huge_endpoint_sends_a_bounded_number_of_replicas_a_pass() -> None:
    huge = parent()
    huge["spec"] = {**PARENT_SPEC, "replicas": 4096}
    snapshot = world(None, endpoints=[huge], kueue=True)
    with trial(snapshot):
        [decided] = decide_endpoints(snapshot, [])
    assert len(decided.children) == SENT_PER_PASS
    assert decided.desired["replicas"] == SENT_PER_PASS  # what exists or was sent
    assert sum(r["replicas"] for r in decided.desired["regions"]) == SENT_PER_PASS
    # and back down to one: at most DROPPED_PER_PASS deletes a pass
    many = [child(i, "east", True, 0, "cluster-e") for i in range(DROPPED_PER_PASS + 10)]
    small = parent()
    small["spec"] = {**PARENT_SPEC, "replicas": 1}
    snapshot = world(None, endpoints=[small], delegated_endpoints=many, kueue=True)
    with trial(snapshot):
        [decided, *_] = decide_endpoints(snapshot, [])
    assert len(decided.drop) == DROPPED_PER_PASS and not decided.children
