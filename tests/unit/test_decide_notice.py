"""A node of a running gang is about to go (a Spot interruption, maintenance, Karpenter, a
drain): the gang is asked to save, then its ranks there move to a spare and it resumes
from that save (decide.noticing, health.notices)."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.decide.job import decide_job
from goodput_operator.health import notices
from goodput_operator.operator.reports import save_request
from goodput_operator.times import millis
from goodput_operator.topology.model import node_state
from goodput_operator.topology.record import nodes_of
from tests.unit.test_decide_job import RUNNING_2, running_pods
from tests.unit.world import NOW, group_spec, job, nodes, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
SPOT = {"spec": {"taints": [{"key": notices.NTH_SPOT_TAINT, "effect": "NoSchedule"}]}}
NOTICED = NOW - 10  # when the operator first saw the taint


def running(saved_at: float | None = None) -> Obj:
    """The job running on us0-n0 and us0-n1, its newest checkpoint (step 100) committed at
    SAVED_AT (None: one from before the notice, step 90)."""
    latest = {"step": 100, "path": "/ckpt/100", "time": millis(saved_at)} if saved_at \
        else {"step": 90, "path": "/ckpt/90", "time": millis(NOW - 300)}
    return job(status={**RUNNING_2, "checkpoint": {"latest": latest}})


def decided(owner: Obj, clock: float = NOW, mark: Obj = SPOT, **group: Any) -> Any:
    """The pass at CLOCK over OWNER's gang, us0-n1 marked by MARK; GROUP: the group's
    spec fields."""
    snapshot = world(nodes(us0_n1=mark), [owner], running_pods(owner, "Running", "Running"),
                     spec=group_spec(**group), noticed={"us0-n1": NOTICED}, clock=clock)
    return decide_job(snapshot, owner)


def test_a_notice_asks_the_gang_to_save_and_keeps_it_running_meanwhile() -> None:
    decision = decided(running())
    deadline = millis(NOTICED + 120)
    assert decision.desired["phase"] == "Running" and "restarts" not in decision.desired
    assert decision.desired["notice"] == {"node": "us0-n1", "kind": "SpotInterruption",
                                          "since": millis(NOTICED), "deadline": deadline}
    assert decision.wake_at is not None and decision.wake_at <= NOTICED + 120
    assert save_request({"status": decision.desired}) == {"save": {
        "reason": "SpotInterruption", "by": "node/us0-n1", "deadline": deadline}}
    [event] = [e for e in decision.events if e.reason == "NodeNotice"]
    assert event.type == "Warning" and "SpotInterruption notice on node us0-n1" in event.message
    again = running()
    again["status"]["notice"] = decision.desired["notice"]  # the pass after: said once
    assert not [e for e in decided(again).events if e.reason == "NodeNotice"]


def test_once_saved_its_ranks_move_to_a_spare_and_resume_from_that_save() -> None:
    owner = running(saved_at=NOW - 4)
    owner["status"]["notice"] = decided(running()).desired["notice"]  # the pass before
    decision = decided(owner)
    incident = decision.desired["incidents"][-1]
    assert decision.desired["restarts"] == 1 and decision.desired["notice"] is None
    assert incident["cause"] == "Notice" and incident["nodes"] == ["us0-n1"]
    assert "saved at step 100" in incident["message"]
    assert incident["resumeFrom"]["step"] == 100 and incident["lostWorkSeconds"] == 0.0
    assert "us0-n1" not in nodes_of(decision.placement)
    assert nodes_of(decision.placement)[0] == "us0-n0"  # the rank that stays keeps its node


def test_unsaved_at_the_deadline_its_ranks_move_anyway() -> None:
    decision = decided(running(), clock=NOTICED + 121)
    incident = decision.desired["incidents"][-1]
    assert incident["cause"] == "Notice" and "the deadline passed unsaved" in incident["message"]
    assert incident["resumeFrom"]["step"] == 90
    assert "us0-n1" not in nodes_of(decision.placement)


@pytest.mark.parametrize(("kind", "taint", "seconds"), [
    ("SpotInterruption", notices.NTH_SPOT_TAINT, 120),  # EC2 reclaims it at two minutes
    ("RebalanceRecommendation", notices.NTH_REBALANCE_TAINT, 600),
    ("ScheduledMaintenance", notices.NTH_MAINTENANCE_TAINT, 600),
    ("AutoScalingTermination", notices.NTH_ASG_TAINT, 600),
    ("KarpenterDisruption", notices.KARPENTER_DISRUPTED_TAINT, 600),
    ("Drain", None, 600),  # a cordon: the drain waits on the budget
])
def test_each_kind_of_notice_has_its_own_deadline_by_default(
        kind: str, taint: str | None, seconds: int) -> None:
    mark = {"spec": {"taints": [{"key": taint, "effect": "NoSchedule"}]}} if taint \
        else {"spec": {"unschedulable": True}}
    notice = decided(running(), mark=mark).desired["notice"]
    assert notice["kind"] == kind and notice["deadline"] == millis(NOTICED + seconds)


def test_the_group_sets_each_kinds_deadline_and_zero_moves_the_ranks_at_once() -> None:
    drain = {"spec": {"unschedulable": True}}
    late = decided(running(), mark=drain, noticeDeadlineSeconds={"drain": 30})
    assert late.desired["notice"]["deadline"] == millis(NOTICED + 30)  # 10 s in: waits
    assert decided(running(), mark=SPOT, noticeDeadlineSeconds={"drain": 30}
                   ).desired["notice"]["deadline"] == millis(NOTICED + 120)  # others kept
    moved = decided(running(), clock=NOTICED + 31, mark=drain,
                    noticeDeadlineSeconds={"drain": 30}).desired["incidents"][-1]
    assert moved["cause"] == "Notice" and "the deadline passed unsaved" in moved["message"]
    at_once = decided(running(), mark=drain, noticeDeadlineSeconds={"drain": 0})
    assert at_once.desired["incidents"][-1]["nodes"] == ["us0-n1"]
    assert at_once.desired.get("notice") is None and at_once.desired["restarts"] == 1


@pytest.mark.parametrize(("spec", "kind"), [
    ({"taints": [{"key": notices.NTH_SPOT_TAINT, "effect": "NoSchedule"}]}, "SpotInterruption"),
    ({"taints": [{"key": notices.NTH_REBALANCE_TAINT, "effect": "NoSchedule"}]},
     "RebalanceRecommendation"),
    ({"taints": [{"key": notices.NTH_MAINTENANCE_TAINT, "effect": "NoSchedule"}]},
     "ScheduledMaintenance"),
    ({"taints": [{"key": notices.NTH_ASG_TAINT, "effect": "NoSchedule"}]},
     "AutoScalingTermination"),
    ({"taints": [{"key": notices.KARPENTER_DISRUPTED_TAINT, "effect": "NoSchedule"}]},
     "KarpenterDisruption"),
    ({"taints": [{"key": notices.KARPENTER_DISRUPTION_TAINT, "value": "disrupting",
                  "effect": "NoSchedule"}]}, "KarpenterDisruption"),
    ({"taints": [{"key": notices.KARPENTER_DISRUPTION_TAINT, "value": "other",
                  "effect": "NoSchedule"}]}, None),
    ({"unschedulable": True}, "Drain"),
    ({"taints": [{"key": "example.com/other", "effect": "NoSchedule"}]}, None),
    ({}, None),
])
def test_which_node_marks_are_notices(spec: Obj, kind: str | None) -> None:
    body = {"metadata": {"name": "n"}, "spec": spec}
    found = notices.notice_of("n", body, NOW)
    assert (found.kind if found else None) == kind
    # a node about to go is not placed on (topology: cordoned)
    assert (node_state({**body, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}) == "cordoned") == (kind is not None)


def test_a_notice_is_dated_from_when_it_was_first_seen_and_forgotten_when_lifted() -> None:
    seen: dict[str, float] = {}
    body = {"metadata": {"name": "n"}, "spec": SPOT["spec"]}
    notices.observe("n", body, NOW, seen)
    notices.observe("n", body, NOW + 30, seen)  # a later pass does not move the deadline
    assert notices.notice_of("n", body, seen["n"]).deadline == NOW + 120  # type: ignore
    notices.observe("n", {"metadata": {"name": "n"}, "spec": {}}, NOW + 60, seen)
    assert seen == {}
