"""Warm standby (scaling.standbyDomains), pass by pass: an endpoint holds whole free
domains for its next replica groups; jobs keep off them while anything else fits, borrow
them otherwise, and give them back (checkpoint, then stop) when a group needs one."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.api.inferenceendpoint import InferenceEndpointStatus
from goodput_operator.api.ultraservergroup import UltraServerGroupStatus
from goodput_operator.decide import decide, decide_groups, trial
from goodput_operator.decide.priority import PRIORITY_CLASS, Classes, PriorityClass
from goodput_operator.decide.standby import Held, choose_standby
from goodput_operator.times import millis
from tests.unit.test_decide_endpoint import endpoint, group
from tests.unit.test_decide_preemption import running_job
from tests.unit.world import NOW, conditions, job, nodes, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
SCALING = {"minReplicas": 1, "maxReplicas": 4, "standbyDomains": 1,
           "metrics": [{"type": "QueueDepth", "target": 10}]}


def standby_ie(held: list[str] | None = None, reclaim: Obj | None = None,
               replicas: int = 1) -> Obj:
    """2-node replica groups (half an UltraServer) with one standby UltraServer."""
    status = {"desiredReplicas": replicas,
              **({"standby": {"domains": held, "reclaim": reclaim}} if held else {})}
    return endpoint(status=status, scaling={**SCALING, "minReplicas": replicas})


def three() -> dict[str, Obj]:
    return nodes(3)


def test_choose_keeps_what_it_held_and_tops_up_with_pristine_domains_in_fabric_order() -> None:
    snapshot = world(three(), pods=group(endpoint(), 0, ("us0-n0", "us0-n1")))
    fleet = snapshot.fleets["trn2"]
    assert choose_standby(fleet, 1, [], {"us-0"}, {}, "ns/ie") == ["us-1"]
    assert choose_standby(fleet, 1, ["us-2"], {"us-0"}, {}, "ns/ie") == ["us-2"]
    assert choose_standby(fleet, 2, ["us-0"], {"us-0"}, {}, "ns/ie") == ["us-1", "us-2"]
    other = {"us-1": Held("ns/other")}              # another endpoint's: never shared
    assert choose_standby(fleet, 2, [], {"us-0"}, other, "ns/ie") == ["us-2"]


def test_an_endpoint_holds_a_standby_domain_and_the_group_counts_it() -> None:
    ie = standby_ie()
    plan = decide(world(three(), endpoints=[ie]))
    [decision] = plan.endpoints
    assert decision.desired["standby"] == {"domains": ["us-1"], "lent": [], "reclaim": None}
    assert conditions(decision.desired)["Standby"] == ("True", "Held")
    InferenceEndpointStatus.model_validate({**decision.status, **decision.desired})
    ie["status"] = {**decision.status, **decision.desired}          # as written
    [group_decision] = decide_groups(world(three(), endpoints=[ie]), [])
    status = group_decision.desired
    assert status["totals"]["standbyDomains"] == 1
    assert [d.get("standbyFor") for d in status["domains"]] == [None, "ns/ie", None]
    UltraServerGroupStatus.model_validate(status)


def test_jobs_keep_off_standby_domains_while_anything_else_fits() -> None:
    ie = standby_ie(["us-0"])
    small = job("small", workers=4)                  # a whole UltraServer: us-0 first, if
    plan = decide(world(three(), [small], endpoints=[ie]))       # it were not on standby
    assert plan.jobs[0].placement["domains"] == ["us-1"]
    assert "borrows" not in plan.jobs[0].placement["reason"]


def test_a_job_that_fits_nowhere_else_borrows_a_standby_domain_and_is_told() -> None:
    ie = standby_ie(["us-1"])
    big = job("big", workers=12, borrowStandby=True)   # all three UltraServers
    plan = decide(world(three(), [big], endpoints=[ie]))
    reason = plan.jobs[0].placement["reason"]
    assert "borrows standby UltraServer(s) us-1 of InferenceEndpoint(s) ns/ie" in reason


def test_a_job_that_did_not_opt_in_never_borrows_and_is_told_it_would_fit() -> None:
    ie = standby_ie(["us-1"])
    plan = decide(world(three(), [job("big", workers=12)], endpoints=[ie]))
    [decision] = plan.jobs
    assert decision.placement is None and decision.desired["phase"] == "Pending"
    assert "which only a job with spec.borrowStandby borrows" in \
        decision.desired["message"]


def test_a_standby_domain_being_reclaimed_is_lent_to_no_one() -> None:
    ie = standby_ie(["us-1"], reclaim={"domain": "us-1", "jobs": ["ns/gone"]})
    big = job("big", workers=12, borrowStandby=True)
    plan = decide(world(three(), [big], endpoints=[ie]))
    assert plan.jobs[0].placement is None


def test_a_group_that_fits_nowhere_else_reclaims_the_standby_domain_a_job_borrowed() -> None:
    ie = standby_ie(["us-2"], replicas=3)
    borrower, borrowed = running_job("borrower", *[f"us2-n{s}" for s in range(4)])
    filler, filled = running_job("filler", *[f"us1-n{s}" for s in range(4)])
    pods = borrowed + filled + group(ie, 0, ("us0-n0", "us0-n1")) + group(ie, 1, (
        "us0-n2", "us0-n3"))                         # group 2 has no room but us-2
    plan = decide(world(three(), [borrower, filler], pods=pods, endpoints=[ie]))
    [decision] = plan.endpoints
    assert decision.desired["standby"]["reclaim"] == {"domain": "us-2",
                                                      "jobs": ["ns/borrower"]}
    assert decision.desired["standby"]["lent"] == ["ns/borrower"]
    assert [e.reason for e in decision.events if e.reason == "Reclaiming"] == ["Reclaiming"]
    assert "reclaiming us-2 from ns/borrower" in dict(
        (c["type"], c["message"]) for c in decision.desired["conditions"])["Standby"]

    # the next pass: the borrower is asked to checkpoint, then stops and is requeued
    ie["status"] = {**decision.status, **decision.desired}
    snapshot = world(three(), [borrower, filler], pods=pods, endpoints=[ie])
    with trial(snapshot):
        found = {d.job["metadata"]["name"]: d for d in decide(snapshot).jobs}
    victim = found["borrower"]
    assert conditions(victim.desired)["Preempted"] == ("True", "Checkpointing")
    assert victim.desired["preemption"]["by"] == "InferenceEndpoint ns/ie"
    assert "preemption" not in found["filler"].desired
    assert victim.desired["preemption"]["deadline"] == millis(NOW + 120)   # its own grace


def test_a_reclaim_no_longer_needed_is_dropped_and_the_job_runs_on() -> None:
    ie = standby_ie(["us-2"], reclaim={"domain": "us-2", "jobs": ["ns/borrower"]})
    borrower, borrowed = running_job("borrower", *[f"us2-n{s}" for s in range(4)])
    plan = decide(world(three(), [borrower], pods=borrowed, endpoints=[ie]))
    [decision] = plan.endpoints
    assert decision.desired["standby"]["reclaim"] is None   # its one group fits in us-0
    assert decision.desired["standby"]["lent"] == ["ns/borrower"]


def test_a_borrower_of_a_higher_class_than_the_endpoint_is_never_reclaimed() -> None:
    classes = Classes(pod={"urgent": PriorityClass("urgent", 1000, PRIORITY_CLASS)})
    ie = standby_ie(["us-2"], replicas=3)
    borrower, borrowed = running_job("borrower", *[f"us2-n{s}" for s in range(4)])
    borrower["spec"]["priorityClassName"] = "urgent"
    filler, filled = running_job("filler", *[f"us1-n{s}" for s in range(4)])
    pods = borrowed + filled + group(ie, 0, ("us0-n0", "us0-n1")) + group(ie, 1, (
        "us0-n2", "us0-n3"))
    plan = decide(world(three(), [borrower, filler], pods=pods, endpoints=[ie],
                        classes=classes))
    assert plan.endpoints[0].desired["standby"]["reclaim"] is None
    ie["spec"]["priorityClassName"] = "urgent"       # an endpoint of the same class may
    plan = decide(world(three(), [borrower, filler], pods=pods, endpoints=[ie],
                        classes=classes))
    assert plan.endpoints[0].desired["standby"]["reclaim"] == {"domain": "us-2",
                                                               "jobs": ["ns/borrower"]}


def test_a_namespaces_endpoints_hold_at_most_the_admins_cap_of_standby_domains() -> None:
    first = standby_ie(["us-1"])
    second = endpoint("second", status={"desiredReplicas": 1},
                      scaling={**SCALING, "standbyDomains": 1})
    plan = decide(world(nodes(4), endpoints=[first, second], standby_per_namespace=1))
    held = {d.ie["metadata"]["name"]: d.desired for d in plan.endpoints}
    assert held["ie"]["standby"]["domains"] == ["us-1"]
    assert held["second"]["standby"]["domains"] == []
    assert conditions(held["second"])["Standby"] == ("False", "NamespaceLimit")
    assert "may hold 1 in all" in dict((c["type"], c["message"]) for c in
                                       held["second"]["conditions"])["Standby"]
