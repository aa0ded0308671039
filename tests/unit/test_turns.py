"""Turns at placement (decide.turns): one namespace's objects that wait for placement run
at most `searches_per_namespace` searches a pass, those searched longest ago first; the
others keep what their last search said, and other namespaces are not slowed."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from goodput_operator.decide import decide, decide_endpoints, decide_jobs, trial, turns
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.times import millis
from tests.unit.test_decide_endpoint import endpoint
from tests.unit.world import NOW, conditions, job, nodes, placed, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def in_namespace(obj: Obj, namespace: str) -> Obj:
    obj["metadata"]["namespace"] = namespace
    return obj


def no_room(name: str, namespace: str = "a") -> Obj:
    """A job of 16 workers: two UltraServers hold 8."""
    return in_namespace(job(name, workers=16), namespace)


def searched(snapshot: Snapshot, kind: str = "TrainingJob") -> set[str]:
    return {name for _, _, name in turns.granted(snapshot, kind)}


@pytest.mark.parametrize(("what", "waiting", "limit", "last", "granted"), [
    ("within its turns: every one searches, none is counted", 3, 3, {}, set()),
    ("over them: the first in line, never searched", 5, 2, {}, {"j0", "j1"}),
    ("over them: those searched longest ago", 4, 2, {"j0": NOW - 5, "j1": NOW - 5,
                                                     "j2": NOW - 10}, {"j2", "j3"}),
    ("ties: in queue order", 3, 1, {"j0": NOW - 5, "j1": NOW - 9, "j2": NOW - 9},
     {"j1"}),
])
def test_turns_go_to_the_objects_searched_longest_ago(
        what: str, waiting: int, limit: int, last: dict[str, float],
        granted: set[str]) -> None:
    jobs = [no_room(f"j{i}") for i in range(waiting)]
    snapshot = world(nodes(2), jobs, searches_per_namespace=limit,
                     searched={("TrainingJob", "a", k): v for k, v in last.items()})
    with trial(snapshot):
        decided = decide_jobs(snapshot, [])
    assert searched(snapshot) == granted, what
    ran = {d.key[1] for d in decided if d.placement_seconds is not None}
    assert ran == (granted or {j["metadata"]["name"] for j in jobs}), what


def test_every_waiting_object_is_searched_within_its_share_of_passes() -> None:
    """LRU turns: 7 waiting jobs, 3 turns a pass: each searched once in every 3 passes."""
    jobs = [no_room(f"j{i}") for i in range(7)]
    last: dict[tuple[str, str, str], float] = {}
    seen: list[set[str]] = []
    for n in range(6):
        snapshot = world(nodes(2), jobs, clock=NOW + n, searches_per_namespace=3,
                         searched=dict(last))
        with trial(snapshot):
            decide_jobs(snapshot, [])
        seen.append(searched(snapshot))
        last.update((key, NOW + n) for key in turns.granted(snapshot, "TrainingJob"))
    for start in range(4):
        window = set().union(*seen[start:start + math.ceil(7 / 3)])
        assert window == {f"j{i}" for i in range(7)}
    assert all(len(s) == 3 for s in seen)


def test_one_namespaces_backlog_does_not_slow_another_namespaces_job() -> None:
    backlog = [no_room(f"a{i}") for i in range(50)]
    theirs = in_namespace(job("b", workers=2), "b")
    snapshot = world(nodes(2), [*backlog, theirs], searches_per_namespace=4)
    plan = decide(snapshot)
    ran = [d.key for d in plan.jobs if d.placement_seconds is not None]
    assert len(ran) == 5 and ("b", "b") in ran
    assert plan.jobs[-1].desired["phase"] == "Placing"


def test_a_job_without_a_turn_keeps_what_its_last_search_said() -> None:
    said = {"type": "Placed", "status": "False", "reason": "WaitingForCapacity",
            "message": "needs 16 nodes, 8 free", "lastTransitionTime": "t0",
            "observedGeneration": 1}
    first, second = no_room("j0"), no_room("j1", "a")
    second["status"] = {"phase": "Pending", "conditions": [said]}
    snapshot = world(nodes(2), [first, second], searches_per_namespace=1,
                     searched={("TrainingJob", "a", "j1"): NOW - 1})
    [one, two] = decide(snapshot).jobs
    assert conditions(one.desired)["Placed"] == ("False", "WaitingForCapacity")
    assert two.placement_seconds is None
    assert [c for c in two.desired["conditions"] if c["type"] == "Placed"] == [said]
    assert two.desired["message"] == "needs 16 nodes, 8 free"


def test_a_job_never_searched_says_it_waits_for_a_turn() -> None:
    snapshot = world(nodes(2), [no_room("j0"), no_room("j1")], searches_per_namespace=1)
    [_, second] = decide(snapshot).jobs
    assert conditions(second.desired)["Placed"] == ("False", turns.REASON)
    assert "namespace a" in second.desired["message"]


@pytest.mark.parametrize(("what", "status", "waits"), [
    ("placed: a replacement is never a turn", {"phase": "Running",
                                               "placement": placed("us0-n0", "us0-n1")}, False),
    ("ended", {"phase": "Failed"}, False),
    ("suspended", {"phase": "Suspended"}, False),
    ("preempting: its search for victims takes turns", {"phase": "Pending", "conditions": [
        {"type": "Placed", "status": "False", "reason": "Preempting"}]}, True),
    ("new", {}, True),
    ("pending", {"phase": "Pending", "conditions": [
        {"type": "Placed", "status": "False", "reason": "WaitingForCapacity"}]}, True),
])
def test_which_jobs_wait_for_a_turn(what: str, status: Obj, waits: bool) -> None:
    from goodput_operator.decide.placing import waits_for_placement
    assert waits_for_placement(job(status=status)) is waits, what


def test_an_endpoint_without_a_turn_creates_nothing_and_keeps_its_condition() -> None:
    said = {"type": "ScalingLimited", "status": "True", "reason": "InsufficientCapacity",
            "message": "group 0: no UltraServer has 2 free nodes",
            "lastTransitionTime": "t0", "observedGeneration": 1}
    first = in_namespace(endpoint("e0", replicas=1), "a")
    second = in_namespace(endpoint("e1", replicas=1, status={
        "observedGeneration": 1, "replicas": 0, "desiredReplicas": 1,
        "conditions": [said]}), "a")
    snapshot = world(nodes(2), endpoints=[first, second], searches_per_namespace=1,
                     searched={("InferenceEndpoint", "a", "e1"): NOW - 1})
    with trial(snapshot):
        [one, two] = decide_endpoints(snapshot, [], WriteBudget(100))
    assert len(one.create) == 2
    assert two.create == [] and two.reservations == []
    assert [c for c in two.desired["conditions"] if c["type"] == "ScalingLimited"] == [said]
    assert searched(snapshot, "InferenceEndpoint") == {"e0"}


@pytest.mark.parametrize(("what", "status", "spec", "waits"), [
    ("new: no status yet", {}, {}, True),
    ("fewer groups than desired", {"observedGeneration": 1, "replicas": 1,
                                   "desiredReplicas": 2}, {}, True),
    ("a spec not acted on", {"observedGeneration": 0, "replicas": 2,
                             "desiredReplicas": 2}, {}, True),
    ("all its groups", {"observedGeneration": 1, "replicas": 2, "desiredReplicas": 2},
     {}, False),
    ("multi-region: placed by its regions", {}, {"multiRegion": {"regions": []}}, False),
])
def test_which_endpoints_wait_for_a_turn(what: str, status: Obj, spec: Obj,
                                         waits: bool) -> None:
    from goodput_operator.decide.endpoint import _waits_for_placement
    assert _waits_for_placement(endpoint(status=status, **spec)) is waits, what


def multi_region(name: str) -> Obj:
    from tests.unit.test_decide_regions import parent
    body = parent()
    body["metadata"] = {**body["metadata"], "name": name, "uid": f"uid-{name}",
                        "namespace": "a"}
    return body


def test_one_namespaces_multi_region_endpoints_send_replicas_in_turns() -> None:
    from goodput_operator.decide.regions import REGIONS
    snapshot = world(None, endpoints=[multi_region(f"m{i}") for i in range(3)], kueue=True,
                     searches_per_namespace=2)
    with trial(snapshot):
        decided = decide_endpoints(snapshot, [])
    assert [len(d.children) for d in decided] == [3, 3, 0]
    assert searched(snapshot, REGIONS) == {"m0", "m1"}
    assert conditions(decided[2].desired)["ScalingLimited"] == ("True", turns.REASON)


def test_a_refused_replica_backs_the_sending_off_and_says_why() -> None:
    from goodput_operator.decide.types import Refusal
    refusal = Refusal(3, "InferenceEndpoint m0-0: exceeded quota", NOW - 2)
    snapshot = world(None, endpoints=[multi_region("m0")], kueue=True,
                     refused={("a", "m0"): refusal})
    with trial(snapshot):
        [held] = decide_endpoints(snapshot, [])
    assert held.children == [] and held.wake_at == refusal.retry_at()
    assert conditions(held.desired)["ScalingLimited"] == ("True", "ReplicaCreateRefused")
    assert "exceeded quota" in next(c["message"] for c in held.desired["conditions"]
                                    if c["type"] == "ScalingLimited")
    later = world(None, endpoints=[multi_region("m0")], kueue=True, clock=NOW + 7,
                  refused={("a", "m0"): refusal})
    with trial(later):
        [sent] = decide_endpoints(later, [])
    assert len(sent.children) == 3


class QuotaKube:
    """The manager's API server refusing every replica for good (a ResourceQuota on the
    endpoints' count); status writes and events taken; what was asked, counted."""

    def __init__(self) -> None:
        self.creates = 0

    def create(self, body: Obj) -> Obj:
        from kubernetes.client.exceptions import ApiException
        self.creates += 1
        raise ApiException(status=403, reason="Forbidden: exceeded quota")

    def patch_status(self, *args: Any) -> str:
        return "2"

    def event(self, *args: Any) -> None:
        return None


def test_the_manager_backs_off_a_refused_replica_instead_of_posting_it_every_pass() -> None:
    import asyncio
    from typing import cast

    from goodput_operator.controllers.inferenceendpoint import reconcile_endpoints
    from goodput_operator.controllers.kube import Kube
    from goodput_operator.controllers.state import State
    state, kube = State(), QuotaKube()
    state.kueue = True
    state.upsert_endpoint(multi_region("m0"))
    now = time.time()  # a refusal is recorded at the time it came
    asyncio.run(reconcile_endpoints(state, cast(Kube, kube), now))
    assert kube.creates == 3 and state.refused[("a", "m0")].times == 1
    asyncio.run(reconcile_endpoints(state, cast(Kube, kube), now + 1))  # backing off
    assert kube.creates == 3
    asyncio.run(reconcile_endpoints(state, cast(Kube, kube), now + 3))  # 2 s: tried again
    assert kube.creates == 6 and state.refused[("a", "m0")].times == 2


@pytest.mark.parametrize(("times", "wait"), [(1, 2), (3, 8), (8, 256), (30, 256)])
def test_a_refusals_backoff_doubles_up_to_a_few_minutes(times: int, wait: float) -> None:
    from goodput_operator.decide.types import Refusal
    assert Refusal(times, "refused", NOW).retry_at() == NOW + wait


def test_an_odd_status_on_one_endpoint_fails_no_other_endpoints_turns() -> None:
    odd = in_namespace(endpoint("odd", replicas=1, status={
        "observedGeneration": 1, "replicas": "many", "desiredReplicas": [1]}), "a")
    fine = [in_namespace(endpoint(f"e{i}", replicas=1), "a") for i in range(2)]
    snapshot = world(nodes(2), endpoints=[odd, *fine], searches_per_namespace=1)
    failures: list[object] = []
    with trial(snapshot):
        decided = decide_endpoints(snapshot, failures, WriteBudget(100))  # type: ignore[arg-type]
    assert failures == [] and len(decided) == 3


def test_preempting_jobs_take_turns_at_the_search_and_keep_their_victims_between(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three gangs of one namespace, each preempting the job on one UltraServer, one turn a
    pass: one searches for victims again (another namespace's waiting job is searched as
    if they were not there); the two without a turn mark the victims of their
    last search again (they still make room: one placement each), say what they said, and
    no victim is told its preemptor gave up."""
    from goodput_operator.decide import preemption
    from tests.unit.test_decide_preemption import running_job
    calls: list[str] = []
    search = preemption.preempt
    monkeypatch.setattr(preemption, "preempt", lambda fleet, request, candidates: (
        calls.append("search"), search(fleet, request, candidates))[1])
    gangs, lows, pods = [], [], []
    for i in range(3):
        said = {"type": "Placed", "status": "False", "reason": "Preempting",
                "message": f"preempting ns/low-{i} (said before)",
                "lastTransitionTime": "t0", "observedGeneration": 1}
        gangs.append(job(f"h{i}", workers=4, priority=10, preemptionPolicy="LowerPriority",
                         status={"phase": "Pending", "conditions": [said]}))
        marked = {"by": f"ns/h{i}", "at": millis(NOW - 30), "deadline": millis(NOW + 90)}
        low, low_pods = running_job(f"low-{i}", *(f"us{i}-n{s}" for s in range(4)),
                                    status={"preemption": marked})
        lows.append(low)
        pods += low_pods
    theirs = in_namespace(job("theirs", workers=16), "b")  # another team's, waiting
    snapshot = world(nodes(3), [*gangs, *lows, theirs], pods, searches_per_namespace=1,
                     searched={("TrainingJob", "ns", "h0"): NOW - 10,
                               ("TrainingJob", "ns", "h1"): NOW - 5,
                               ("TrainingJob", "ns", "h2"): NOW - 5})
    with trial(snapshot):
        failures: list[Any] = []
        decided = {d.key[1]: d for d in decide_jobs(snapshot, failures)}
    assert failures == []
    assert len(calls) == 1, "one search for victims, by the gang whose turn it is"
    assert searched(snapshot) == {"h0"}
    for i in range(3):
        assert decided[f"low-{i}"].desired["preemption"]["by"] == f"ns/h{i}"
        assert conditions(decided[f"h{i}"].desired)["Placed"] == ("False", "Preempting")
    for name in ("h1", "h2"):
        assert decided[name].desired["message"].endswith("(said before)")
        assert decided[name].events == []
    assert decided["theirs"].placement_seconds is not None, "namespace b searched as ever"


def test_a_preempting_job_without_a_turn_searches_when_its_victims_no_longer_make_room(
        ) -> None:
    """g1 was preempting low-a on us-0, but a job it may not preempt has since taken a node
    there: low-a alone makes no room, so g1 searches now (low-b's UltraServer) rather than
    hold low-a for nothing until its turn."""
    from tests.unit.test_decide_preemption import running_job
    said = {"type": "Placed", "status": "False", "reason": "Preempting",
            "message": "preempting ns/low-a (said before)", "lastTransitionTime": "t0",
            "observedGeneration": 1}
    first = job("g0", workers=16)
    gang = job("g1", workers=4, priority=10, preemptionPolicy="LowerPriority",
               status={"phase": "Pending", "conditions": [said]})
    marked = {"by": "ns/g1", "at": millis(NOW - 30), "deadline": millis(NOW + 90)}
    a, a_pods = running_job("low-a", "us0-n0", "us0-n1", "us0-n2",
                            status={"preemption": marked})
    high, high_pods = running_job("high", "us0-n3", priority=20)
    b, b_pods = running_job("low-b", *(f"us1-n{s}" for s in range(4)))
    snapshot = world(nodes(2), [first, gang, a, high, b], [*a_pods, *high_pods, *b_pods],
                     searches_per_namespace=1,
                     searched={("TrainingJob", "ns", "g1"): NOW - 1})
    with trial(snapshot):
        decided = {d.key[1]: d for d in decide_jobs(snapshot, [])}
    assert searched(snapshot) == {"g0"}
    assert decided["g1"].desired["message"].startswith("preempting ns/low-b")
    assert decided["low-b"].desired["preemption"]["by"] == "ns/g1"
    assert conditions(decided["low-a"].desired)["Preempted"] == ("False", "Cancelled")
