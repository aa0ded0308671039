"""decide_endpoint, case by case: replica groups, their placement inside one UltraServer,
the write budget, the autoscaler's decision and the conditions."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec, InferenceEndpointStatus
from goodput_operator.autoscaling.algorithm import Decision
from goodput_operator.controllers.inferenceendpoint import reconcile_endpoints
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import State
from goodput_operator.decide import EndpointDecision, Scaled, decide, decide_endpoints, trial
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.types import Refusal
from goodput_operator.resources import inference as build
from goodput_operator.times import millis
from tests.unit.world import NEURON, NOW, TRN2, conditions, group_spec, nodes, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
SCALING = {"minReplicas": 1, "maxReplicas": 4,
           "metrics": [{"type": "QueueDepth", "target": 10}]}


def endpoint(name: str = "ie", status: Obj | None = None, **spec: Any) -> Obj:
    return {"apiVersion": "goodput.dev/v1alpha1", "kind": "InferenceEndpoint",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "generation": 1},
            "spec": {"ultraServerGroup": "trn2", "model": {"name": "llama"},
                     "replicaShape": {"workers": 2, "acceleratorsPerWorker": 16},
                     "template": {"spec": {"containers": [{"name": "s", "image": "i"}]}},
                     **spec},
            "status": status or {}}


def group(ie: Obj, index: int, nodes: tuple[str, str] | None = None,
          phase: str = "Running") -> list[Obj]:
    """Replica group INDEX of IE at its current revision: gated, or running on NODES."""
    spec = InferenceEndpointSpec.model_validate(ie["spec"])
    pods = build.group_pods(ie, spec, index, build.revision(ie["spec"]), TRN2)
    for member, pod in enumerate(pods):
        pod["metadata"]["resourceVersion"] = "1"
        pod["status"] = {"phase": "Pending"}
        if nodes:
            pod["spec"]["schedulingGates"] = []
            pod["spec"]["nodeName"] = nodes[member]
            pod["metadata"]["annotations"][names.DOMAIN_ANNOTATION] = "us-0"
            pod["status"] = {"phase": phase, "conditions": [
                {"type": "Ready", "status": "True" if phase == "Running" else "False"}]}
    return pods


def scaled(desired: int, current: int, **fields: Any) -> Scaled:
    return Scaled(Decision(desired, "queue 30 > 10 per replica", {"QueueDepth": "30"},
                           **fields), current, NOW - 1)


def short(pod_name: str) -> str:
    """ie-0-48a3c-1 -> ie-0-1: endpoint, group, member (the revision hash aside)."""
    return re.sub(r"-[0-9a-f]{5}-(\d+)$", r"-\1", pod_name)


def outcome(decision: EndpointDecision) -> dict[str, Any]:
    return {
        "create": len(decision.create), "delete": sorted(map(short, decision.delete)),
        "pin": [(short(pod["metadata"]["name"]), node) for pod, node, _ in decision.pin],
        "created": [(short(pod["metadata"]["name"]),
                     pod["metadata"].get("annotations", {}).get(names.NODE_ANNOTATION))
                    for pod in decision.create],
        "events": [e.reason for e in decision.events],
        "reserve": len(decision.reservations), "deferred": decision.deferred,
        "replicas": decision.desired.get("replicas"),
        "desiredReplicas": decision.desired.get("desiredReplicas"),
        "limited": decision.limited, "recorded": bool(decision.scaling_recorded),
        "conditions": conditions(decision.desired),
    }


@dataclass
class Case:
    id: str
    endpoint: Obj
    expect: dict[str, Any]
    pods: list[Obj] = field(default_factory=list)
    snapshot: dict[str, Any] = field(default_factory=dict)


IE = endpoint(replicas=2)
AUTO = endpoint(scaling=SCALING)
RUNNING_0 = group(IE, 0, ("us0-n0", "us0-n1"))
CASES = [
    Case("an invalid spec says so on Ready",
         endpoint(replicaShape={"workers": 0}),
         {"create": 0, "conditions": {"Ready": ("False", "InvalidSpec")}}),
    Case("a missing group says so on Ready",
         endpoint(ultraServerGroup="elsewhere"),
         {"create": 0, "conditions": {"Ready": ("False", "UltraServerGroupNotFound")}}),
    Case("a new endpoint's replica groups are placed whole and created pinned: a write a pod",
         IE, {"created": [("ie-0-0", "us0-n0"), ("ie-0-1", "us0-n1"),
                          ("ie-1-0", "us0-n2"), ("ie-1-1", "us0-n3")],
              "pin": [], "reserve": 4, "events": ["Placed"], "replicas": 0,
              "desiredReplicas": 2,
              "conditions": {"Ready": ("False", "ReplicasNotReady"),
                             "Progressing": ("True", "RollingOut")}}),
    Case("a new group that does not fit has no pods, and waits (an unplaced gang costs none)",
         endpoint(replicas=3, replicaShape={"workers": 4, "acceleratorsPerWorker": 16}),
         {"created": [("ie-0-0", "us0-n0"), ("ie-0-1", "us0-n1"), ("ie-0-2", "us0-n2"),
                      ("ie-0-3", "us0-n3"), ("ie-1-0", "us1-n0"), ("ie-1-1", "us1-n1"),
                      ("ie-1-2", "us1-n2"), ("ie-1-3", "us1-n3")],
          "reserve": 8, "limited": True,
          "conditions": {"ScalingLimited": ("True", "InsufficientCapacity")}}),
    Case("whole gated groups are placed inside one UltraServer each and pinned",
         IE, {"create": 0, "reserve": 4, "events": ["Placed"],
              "pin": [("ie-0-0", "us0-n0"), ("ie-0-1", "us0-n1"),
                      ("ie-1-0", "us0-n2"), ("ie-1-1", "us0-n3")]},
         pods=group(IE, 0) + group(IE, 1)),
    Case("a group missing a member while gated gets it back",
         IE, {"create": 1}, pods=group(IE, 0)[:1] + group(IE, 1)),
    Case("ready groups at the desired count: Ready, nothing to do",
         IE, {"create": 0, "delete": [], "events": [],
              "conditions": {"Ready": ("True", "ReplicasReady"),
                             "Progressing": ("False", "Complete")}},
         pods=RUNNING_0 + group(IE, 1, ("us1-n0", "us1-n1"))),
    Case("a stopped member restarts its whole group, with a warning",
         IE, {"delete": ["ie-0-0", "ie-0-1"], "events": ["GroupRestarted", "Placed"]},
         pods=group(IE, 0, ("us0-n0", "us0-n1"), phase="Failed")
         + group(IE, 1, ("us1-n0", "us1-n1"))),
    Case("scaling down removes a group quietly",
         endpoint(replicas=1), {"delete": ["ie-1-0", "ie-1-1"], "events": []},
         pods=RUNNING_0 + group(IE, 1, ("us1-n0", "us1-n1"))),
    Case("a spent write budget builds nothing and leaves the writes for the next pass",
         IE, {"create": 0, "deferred": 4}, snapshot={"write_budget": 0}),
    Case("groups that do not fit stay gated: ScalingLimited, short of capacity",
         endpoint(replicas=3, replicaShape={"workers": 4, "acceleratorsPerWorker": 16}),
         {"pin": [("ie-0-0", "us0-n0"), ("ie-0-1", "us0-n1"), ("ie-0-2", "us0-n2"),
                  ("ie-0-3", "us0-n3"), ("ie-1-0", "us1-n0"), ("ie-1-1", "us1-n1"),
                  ("ie-1-2", "us1-n2"), ("ie-1-3", "us1-n3")],
          "limited": True, "conditions": {"ScalingLimited": ("True", "InsufficientCapacity")}},
         pods=[p for i in range(3) for p in group(
             endpoint(replicas=3, replicaShape={"workers": 4, "acceleratorsPerWorker": 16}),
             i)]),
    Case("without the autoscaler, the size is spec.replicas; no metric conditions",
         IE, {"desiredReplicas": 2, "recorded": False},
         pods=RUNNING_0 + group(IE, 1, ("us1-n0", "us1-n1"))),
    Case("a new autoscaler decision is recorded once, with an event",
         AUTO, {"desiredReplicas": 3, "recorded": True, "events": ["Placed", "Scaled"],
                "conditions": {"MetricsUnavailable": ("False", "MetricsFresh"),
                               "Panic": ("False", "Steady"),
                               "Ready": ("False", "ReplicasNotReady"),
                               "Progressing": ("True", "RollingOut"),
                               "ScalingLimited": ("False", "WithinLimits")}},
         pods=RUNNING_0, snapshot={"scaled": {("ns", "ie", ""): scaled(3, 1)}}),
    Case("an autoscaler decision already recorded is not recorded again",
         AUTO, {"desiredReplicas": 3, "recorded": False, "events": ["Placed"]},
         pods=RUNNING_0,
         snapshot={"scaled": {("ns", "ie", ""): Scaled(scaled(3, 1).decision, 1, NOW - 1,
                                                   written=True)}}),
    Case("held at maxReplicas: ScalingLimited, AtMaxReplicas",
         AUTO, {"limited": True,
                "conditions": {"ScalingLimited": ("True", "AtMaxReplicas")}},
         pods=RUNNING_0,
         snapshot={"scaled": {("ns", "ie", ""): scaled(
             4, 4, limited="6 wanted, scaling.maxReplicas is 4")}}),
    Case("held by the free domains: ScalingLimited, InsufficientCapacity",
         AUTO, {"conditions": {"ScalingLimited": ("True", "InsufficientCapacity")}},
         pods=RUNNING_0,
         snapshot={"scaled": {("ns", "ie", ""): scaled(
             2, 2, limited="4 wanted, the free domains can host only 2 replica(s) now",
             capacity_limited=True)}}),
    Case("stale metrics hold the size, and say so",
         AUTO, {"conditions": {"MetricsUnavailable": ("True", "MetricsMissing")}},
         pods=RUNNING_0,
         snapshot={"scaled": {("ns", "ie", ""): scaled(1, 1, unavailable="no samples")}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_an_endpoint_pass(case: Case) -> None:
    snapshot = world(None, pods=case.pods, endpoints=[case.endpoint], **case.snapshot)
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [])
    found = outcome(decision)
    expected_conditions = case.expect.get("conditions")
    if expected_conditions is not None:  # the named ones; others may be there too
        found["conditions"] = {k: found["conditions"].get(k) for k in expected_conditions}
    assert {k: found[k] for k in case.expect} == case.expect


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_endpoint_status_decided_is_one_the_crd_accepts(case: Case) -> None:
    snapshot = world(None, pods=case.pods, endpoints=[case.endpoint], **case.snapshot)
    for decision in decide(snapshot).endpoints:
        merged = {**decision.status, **decision.desired}
        InferenceEndpointStatus.model_validate({k: v for k, v in merged.items()
                                                if v is not None})


def test_endpoints_share_the_passes_write_budget_in_order() -> None:
    snapshot = world(None, endpoints=[endpoint("a", replicas=2), endpoint("b", replicas=2)])
    budget = WriteBudget(3)
    with trial(snapshot):
        first, second = decide_endpoints(snapshot, [], budget)
    assert (len(first.create), first.writes) == (4, 4)  # one object may overdraw
    assert (len(second.create), second.deferred) == (0, 4)
    assert budget.deferred == 4


def test_an_endpoint_sees_the_reservations_of_the_jobs_decided_before_it() -> None:
    from tests.unit.world import job
    snapshot = world(None, [job("big", workers=8)],
                     pods=group(IE, 0) + group(IE, 1), endpoints=[IE])
    plan = decide(snapshot)
    assert len(plan.jobs[0].reservations) == 8
    [decision] = plan.endpoints
    assert decision.pin == [] and decision.limited


def test_replica_groups_go_only_where_their_pods_fit() -> None:
    """An endpoint's pods are judged as a job's: a node selector (here: UltraServer us-1
    only) keeps its groups off every other node."""
    ie = endpoint(replicas=1, template={"spec": {
        "containers": [{"name": "s", "image": "i"}],
        "nodeSelector": {"topology.k8s.aws/ultraserver-id": "us-1"}}})
    snapshot = world(None, endpoints=[ie], pods=group(ie, 0))
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [])
    assert {node for _, node, _ in decision.pin} <= {f"us1-n{i}" for i in range(4)}
    assert len(decision.pin) == 2


@pytest.mark.parametrize(("refused_at", "creates"), [(NOW - 1, False), (NOW - 3, True)])
def test_an_endpoint_whose_pods_were_refused_waits_out_its_backoff_without_the_budget(
        refused_at: float, creates: bool) -> None:
    """One tenant's refused endpoint must not spend every pass's write budget, which the
    other endpoints' rollouts share: it tries again only after 2**times seconds."""
    ie = endpoint(replicas=2)
    snapshot = world(None, endpoints=[ie], refused={
        ("ns", "ie"): Refusal(1, "pod ie-0-x-0: forbidden", refused_at)})
    budget = WriteBudget(256)
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [], budget)
    assert bool(decision.create) is creates
    assert (budget.left == 256) is not creates
    assert decision.wake_at == (None if creates else refused_at + 2)


def test_an_endpoint_on_a_group_that_claims_devices_by_dra_claims_them_per_member() -> None:
    spec = group_spec(accelerator={"resource": NEURON, "perNode": 16,
                                   "requestStyle": "ResourceClaim"})
    plan = decide(world(None, endpoints=[endpoint()], spec=spec))
    [decision] = plan.endpoints
    assert len(decision.create) == 2
    for pod in decision.create:
        assert NEURON not in pod["spec"]["containers"][0]["resources"]["requests"]
        assert pod["spec"]["resourceClaims"] == [
            {"name": "accelerators", "resourceClaimTemplateName": "ie-serving-accelerators-16"}]
    [template] = build.claim_sources(decision.ie, decision.create, "neuron.aws.com")
    assert template["metadata"]["ownerReferences"][0]["kind"] == "InferenceEndpoint"


def test_a_job_and_an_endpoint_of_one_name_want_no_child_of_the_same_name_but_the_service(
        ) -> None:
    """Only the Service keeps the bare name for both kinds (JobSet's and KServe's
    convention, which workers' and clients' DNS names rely on): whichever comes second is
    refused with a condition naming the holder (tests/e2e/test_tenancy.py)."""
    from goodput_operator.resources import trainingjob as training
    from tests.unit.world import job as training_job
    spec = group_spec(accelerator={"resource": NEURON, "perNode": 16,
                                   "requestStyle": "ResourceClaim"})
    plan = decide(world(None, [training_job("same", workers=2)], endpoints=[endpoint("same")],
                        spec=spec))
    [job], [ie] = plan.jobs, plan.endpoints
    assert job.attempt is not None

    def children(sources: list[Obj], pods: list[Obj], services: list[str]) -> set[str]:
        return {s["metadata"]["name"] for s in sources} | \
            {p["metadata"]["name"] for p in pods} | set(services)
    of_job = children(training.claim_sources(job.job, job.attempt.create, "neuron.aws.com"),
                      job.attempt.create, [training.service_name("same"),
                                           training.hostfile_name("same")])
    of_endpoint = children(build.claim_sources(ie.ie, ie.create, "neuron.aws.com"),
                           ie.create, [s["metadata"]["name"] for s in ie.services])
    assert of_job & of_endpoint == {"same"}


class RefusingKube:
    """The API server as apply_endpoint meets it: Services created, every pod refused for
    good (a quota, a tenant's admission policy), status writes and events taken."""

    def create(self, body: Obj) -> Obj:
        if body["kind"] == "Pod":
            raise ApiException(status=403, reason="Forbidden")
        return body

    def patch_status(self, *args: Any) -> str:
        return "2"

    def event(self, *args: Any) -> None:
        return None


def test_a_pod_created_pinned_and_refused_gives_its_node_back() -> None:
    """Pods created pinned reserve their nodes in the decision; when the API server
    refuses them, nothing holds those nodes: the next endpoint (or job) may use them."""
    state = State()
    for body in nodes(1).values():
        state.upsert_node(body)
    state.upsert_group({"metadata": {"name": "trn2", "creationTimestamp": millis(NOW - 60)},
                        "spec": group_spec().model_dump(by_alias=True)})
    state.upsert_endpoint(endpoint(replicas=1))
    asyncio.run(reconcile_endpoints(state, cast(Kube, RefusingKube()), NOW))
    assert state.fleets["trn2"].pods == {}, "no reservation outlives its refused pod"
    assert state.refused[("ns", "ie")].times == 1


def test_the_groups_a_pass_places_are_one_event_not_one_each() -> None:
    snapshot = world(None, endpoints=[endpoint(replicas=3)])
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [])
    assert [(e.reason, e.message) for e in decision.events] == [
        ("Placed", "3 groups placed, each inside one UltraServer: 0 in us-0, 1 in us-0, "
                   "2 in us-1")]


@pytest.mark.parametrize(("refused_for", "moved"), [(10, False), (31, True)])
def test_a_group_the_scheduler_refuses_where_it_was_pinned_is_placed_again(
        refused_for: float, moved: bool) -> None:
    """Placement counted the nodes free, but another scheduler's pods bound there in the
    same moment: a group whose pinned member kube-scheduler refuses for 30 s is placed
    again, never left Pending for good (as a TrainingJob's worker is)."""
    ie = endpoint(replicas=1)
    pods = group(ie, 0)
    for member, pod in enumerate(pods):
        pod["spec"]["schedulingGates"] = []
        pod["metadata"]["annotations"][names.NODE_ANNOTATION] = f"us0-n{member}"
        pod["metadata"]["annotations"][names.DOMAIN_ANNOTATION] = "us-0"
    pods[1]["status"]["conditions"] = [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/8 nodes are available: 1 Insufficient aws.amazon.com/neuron.",
        "lastTransitionTime": millis(NOW - refused_for)}]
    snapshot = world(None, pods=pods, endpoints=[ie])
    with trial(snapshot):
        [decision] = decide_endpoints(snapshot, [])
    if not moved:
        assert decision.delete == [] and decision.wake_at == NOW - refused_for + 30
        return
    assert sorted(map(short, decision.delete)) == ["ie-0-0", "ie-0-1"]
    [event] = [e for e in decision.events if e.reason == "GroupMoved"]
    assert "the scheduler refuses ie-0-" in event.message and "on node us0-n1 for 31s" in \
        event.message and "placing the group again" in event.message
