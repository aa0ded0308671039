"""decide_group, case by case: node health in; quarantines, releases, labels, probes,
the status and its events out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.ultraservergroup import UltraServerGroupStatus
from goodput_operator.decide import GroupDecision, decide, decide_groups
from goodput_operator.decide.group import Notes, group_status
from goodput_operator.health.probing import Inconclusive
from goodput_operator.health.quarantine import HOLD_SECONDS, REHOLD_SECONDS, SDC, Finding
from goodput_operator.times import millis
from tests.unit.world import (
    NOW,
    conditions,
    group_spec,
    job,
    nodes,
    not_ready,
    quarantined,
    worker,
    world,
)

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def labelled(bodies: dict[str, Obj]) -> dict[str, Obj]:
    """The nodes as the operator labels them (group, domain, slot)."""
    for name, body in bodies.items():
        domain, slot = name.split("-")
        body["metadata"]["labels"].update({names.GROUP_LABEL: "trn2",
                                           names.NODE_DOMAIN_LABEL: f"us-{domain[2:]}",
                                           names.SLOT_LABEL: slot[1:]})
    return bodies


FRESH = labelled(nodes())
SDC_OUT = labelled(nodes(us0_n0=quarantined(nodes()["us0-n0"], "SilentDataCorruption",
                                            NOW - 300)))
DOWN_OUT = labelled(nodes(us0_n0=quarantined(nodes()["us0-n0"], "NodeNotReady", NOW - 900)))
BUSY_US0_N0 = worker(job("busy", workers=1), 0, node_name="us0-n0", phase="Running",
                     ready=True)
HELD = labelled(nodes(us0_n0=quarantined(nodes()["us0-n0"], SDC, NOW - 300, owner="a/forger")))
HOLD_ENDED = names.HOLD_ENDED_ANNOTATION


def hold_ended(body: Obj, at: float) -> Obj:
    """BODY after a tenant's hold on it ended at AT (as release_patch writes it)."""
    annotations = {**body["metadata"].get("annotations", {}), HOLD_ENDED: millis(at)}
    return {**body, "metadata": {**body["metadata"], "annotations": annotations}}


BY_HAND = labelled(nodes(us0_n0=quarantined(nodes()["us0-n0"], "Maintenance", NOW - 900,
                                            by="manual")))


CPU_RUN = Inconclusive("goodput:dev", "the probe ran on numpy (cpu), not on the node's "
                       "neuron devices")


def vote(since: float, owner: str = "ns/dp") -> Finding:
    """Blame from job OWNER's replicas' vote (its reports: a tenant's word)."""
    return Finding(SDC, "rank 2 diverged at step 250", since, owner=owner)


def job_in(namespace: str, name: str) -> Obj:
    body = job(name)
    body["metadata"]["namespace"] = namespace
    return body


def probed(since: float) -> Finding:
    """Blame from a probe run (the admin's image: no owner)."""
    return Finding(SDC, "probe: bad device(s) 3", since)


def outcome(decision: GroupDecision) -> dict[str, Any]:
    return {
        "quarantine": [(q.node, q.finding.reason) for q in decision.quarantine],
        "release": [r.node for r in decision.release],
        "labels": len(decision.labels),
        "probes": [(p.node, p.trigger, p.run) for p in decision.probes],
        "forget": decision.forget_blame, "events": [e.reason for e in decision.events],
        "write": decision.write, "wake_at": decision.wake_at,
        "sweep_mark": decision.sweep_mark, "health": decision.desired["health"],
        "conditions": conditions(decision.desired),
        "held": [(h["node"], h["owner"]) for h in decision.desired["heldEvidence"]],
        "not_before": [(h["node"], h["notBefore"]) for h in decision.desired["heldEvidence"]
                       if "notBefore" in h],
        "hold_ended": [(r.node, r.patch["metadata"]["annotations"].get(HOLD_ENDED))
                       for r in decision.release],
    }


@dataclass
class Case:
    id: str
    nodes: dict[str, Obj]
    expect: dict[str, Any]
    spec: dict[str, Any] = field(default_factory=dict)
    snapshot: dict[str, Any] = field(default_factory=dict)
    status: Obj | None = None


CASES = [
    Case("a new group labels its nodes and reports itself ready",
         nodes(), {"labels": 8, "quarantine": [], "write": True, "health": "Healthy",
                   "conditions": {"Ready": ("True", "DomainsAvailable"),
                                  "Degraded": ("False", "AllHealthy"),
                                  "ProbesScheduled": ("False", "Disabled")}}),
    Case("nodes already labelled are left alone", FRESH, {"labels": 0}),
    Case("a node NotReady within its grace period: judged when the grace runs out",
         labelled(nodes(us0_n0=not_ready(NOW - 2))),
         {"quarantine": [], "wake_at": NOW - 2 + 5, "health": "Degraded"}),
    Case("a node NotReady past its grace period is quarantined, with the evidence",
         labelled(nodes(us0_n0=not_ready(NOW - 20))),
         {"quarantine": [("us0-n0", "NodeNotReady")], "events": []}),
    Case("a device-health condition quarantines at once",
         labelled(nodes(us0_n1={"status": {"conditions": [
             {"type": "Ready", "status": "True"},
             {"type": "NeuronHealth", "status": "True", "reason": "NeuronError"}]}})),
         {"quarantine": [("us0-n1", "NodeCondition")]}),
    Case("more failing nodes than maxUnavailable: the storm guard holds them all",
         labelled(nodes(us0_n0=not_ready(NOW - 20), us1_n0=not_ready(NOW - 20))),
         {"quarantine": [], "events": ["StormGuard"],
          "conditions": {"StormGuard": ("True", "TooManyFailing")}},
         spec={"quarantine": {"maxUnavailable": 1}}),
    Case("a storm already reported is not reported again",
         labelled(nodes(us0_n0=not_ready(NOW - 20), us1_n0=not_ready(NOW - 20))),
         {"events": []}, spec={"quarantine": {"maxUnavailable": 1}},
         status={"conditions": [{"type": "StormGuard", "status": "True",
                                 "reason": "TooManyFailing", "message": "",
                                 "lastTransitionTime": millis(NOW - 10)}]}),
    Case("a node its job's replicas voted corrupt is quarantined for it",
         FRESH, {"quarantine": [("us0-n3", SDC)], "forget": []},
         snapshot={"blamed": {"us0-n3": vote(NOW - 1)}, "jobs": [job("dp")]}),
    Case("blame on a node already quarantined is dropped",
         DOWN_OUT, {"quarantine": [], "forget": ["us0-n0"]},
         snapshot={"blamed": {"us0-n0": vote(NOW - 1)}, "jobs": [job("dp")],
                   "healthy_since": {"us0-n0": NOW - 1}}),
    Case("blame dies with the job that made it",
         FRESH, {"quarantine": [], "forget": ["us0-n3"]},
         snapshot={"blamed": {"us0-n3": vote(NOW - 1)}}),
    Case("a probe's blame the budget held for 15 minutes expires",
         FRESH, {"quarantine": [], "forget": ["us0-n3"]},
         snapshot={"blamed": {"us0-n3": probed(NOW - 901)}, "jobs": [job("dp")]}),
    Case("a job's blame the budget holds is kept while the job lives, and shown",
         FRESH, {"quarantine": [("us0-n0", SDC)], "forget": [], "held": [("us0-n3", "ns/dp")]},
         spec={"quarantine": {"maxUnavailable": 1}},
         snapshot={"blamed": {"us0-n0": vote(NOW - 1000), "us0-n3": vote(NOW - 901)},
                   "jobs": [job("dp")]}),
    Case("one namespace's votes hold at most half the budget: another team's are acted on",
         FRESH, {"quarantine": [("us0-n0", SDC), ("us0-n1", SDC), ("us1-n3", SDC)],
                 "held": [("us1-n0", "a/forger")]},
         spec={"quarantine": {"maxUnavailable": 4}},
         snapshot={"blamed": {"us0-n0": vote(NOW - 30, "a/forger"),
                              "us0-n1": vote(NOW - 20, "a/forger"),
                              "us1-n0": vote(NOW - 10, "a/forger"),
                              "us1-n3": vote(NOW - 1, "b/train")},
                   "jobs": [job_in("a", "forger"), job_in("b", "train")]}),
    Case("a probe's finding goes before the tenants' votes",
         FRESH, {"quarantine": [("us1-n3", SDC)], "held": [("us0-n0", "ns/dp")]},
         spec={"quarantine": {"maxUnavailable": 1}},
         snapshot={"blamed": {"us0-n0": vote(NOW - 30), "us1-n3": probed(NOW - 1)},
                   "jobs": [job("dp")]}),
    Case("blame has a budget of its own and never trips the storm guard",
         FRESH, {"quarantine": [("us0-n0", SDC)], "events": [],
                 "conditions": {"StormGuard": ("False", "WithinBudget")}},
         spec={"quarantine": {"maxUnavailable": 1}},
         snapshot={"blamed": {n: vote(NOW - 1) for n in ("us0-n0", "us0-n1", "us1-n0")},
                   "jobs": [job("dp")]}),
    Case("a tenant's blame cannot stop a failing node's quarantine",
         labelled(nodes(us1_n2=not_ready(NOW - 20))),
         {"quarantine": [("us1-n2", "NodeNotReady"), ("us0-n0", SDC)], "events": []},
         spec={"quarantine": {"maxUnavailable": 1}},
         snapshot={"blamed": {n: vote(NOW - 1) for n in ("us0-n0", "us0-n1", "us1-n0")},
                   "jobs": [job("dp")]}),
    Case("nodes out for corruption do not count against failing nodes' budget",
         labelled(nodes(us0_n0=quarantined(nodes()["us0-n0"], SDC, NOW - 300),
                        us1_n2=not_ready(NOW - 20))),
         {"quarantine": [("us1-n2", "NodeNotReady")], "events": []},
         spec={"quarantine": {"maxUnavailable": 1}}),
    Case("a tenant's hold is probed at once, and waits for the answer at most HOLD_SECONDS",
         HELD, {"probes": [("us0-n0", "suspicion", 0)], "release": [],
                "wake_at": NOW - 300 + HOLD_SECONDS},
         snapshot={"jobs": [job_in("a", "forger")], "clean_probes": {"us0-n0": 7},
                   "probed_at": {"us0-n0": NOW - 400}}),  # clean runs before it don't answer
    Case("one clean probe run since a tenant's hold began releases it, and marks when",
         HELD, {"probes": [], "release": ["us0-n0"], "quarantine": [],
                "hold_ended": [("us0-n0", millis(NOW))]},
         snapshot={"jobs": [job_in("a", "forger")], "probed_at": {"us0-n0": NOW - 10}}),
    Case("a tenant's vote on a node whose hold ended lately is held and listed, and asks "
         "for no probe until half an hour after the hold's end",
         labelled(nodes(us0_n0=hold_ended(nodes()["us0-n0"], NOW - 60))),
         {"quarantine": [], "probes": [], "held": [("us0-n0", "a/forger")],
          "not_before": [("us0-n0", millis(NOW - 60 + REHOLD_SECONDS))],
          "wake_at": NOW - 60 + REHOLD_SECONDS},
         snapshot={"blamed": {"us0-n0": vote(NOW - 1, "a/forger")},
                   "jobs": [job_in("a", "forger")], "probed_at": {"us0-n0": NOW - 60}}),
    Case("a clean probe no tenant asked for (probe-on-start, the schedule) silences no vote",
         FRESH, {"quarantine": [("us0-n0", SDC)], "not_before": []},
         snapshot={"blamed": {"us0-n0": vote(NOW - 1, "a/forger")},
                   "jobs": [job_in("a", "forger")], "probed_at": {"us0-n0": NOW - 60}}),
    Case("a node quarantined for the node's own sake gets no hold's end on release",
         DOWN_OUT, {"release": ["us0-n0"], "hold_ended": [("us0-n0", None)]},
         snapshot={"healthy_since": {"us0-n0": NOW - 601}}),
    Case("a hold no probe answers (probes off) ends after HOLD_SECONDS",
         HELD, {"probes": [], "release": ["us0-n0"]},
         spec={"probes": {"schedule": "", "onSuspicion": False}},
         snapshot={"clock": NOW - 300 + HOLD_SECONDS}),
    Case("a hold stays while the node's own health is bad (the admin's signal)",
         labelled(nodes(us0_n0={**quarantined(nodes()["us0-n0"], SDC, NOW - 300,
                                              owner="a/forger"), **not_ready(NOW - 20)})),
         {"release": [], "quarantine": []},
         snapshot={"probed_at": {"us0-n0": NOW - 10}}),
    Case("a probe's bad answer makes a tenant's hold the admin's quarantine",
         HELD, {"quarantine": [("us0-n0", SDC)], "release": [], "forget": []},
         snapshot={"blamed": {"us0-n0": probed(NOW - 1)}, "jobs": [job_in("a", "forger")]}),
    Case("a tenant's further reports on its hold are dropped",
         HELD, {"quarantine": [], "forget": ["us0-n0"]},
         snapshot={"blamed": {"us0-n0": vote(NOW - 1, "a/forger")},
                   "jobs": [job_in("a", "forger")]}),
    Case("a corruption suspect is probed, run after run",
         SDC_OUT, {"probes": [("us0-n0", "suspicion", 2)], "release": []},
         snapshot={"probe_runs": {"us0-n0": 2}, "clean_probes": {"us0-n0": 1}}),
    Case("a corruption suspect with enough clean probes is released, and says why",
         SDC_OUT, {"probes": [], "release": ["us0-n0"]},
         snapshot={"clean_probes": {"us0-n0": 3}}),
    Case("probes on suspicion can be turned off",
         SDC_OUT, {"probes": []}, spec={"probes": {"schedule": "", "onSuspicion": False}}),
    Case("a node quarantined by the operator returns after being healthy long enough",
         DOWN_OUT, {"release": ["us0-n0"]}, snapshot={"healthy_since": {"us0-n0": NOW - 601}}),
    Case("healthy, but not for long enough: the release is timed",
         DOWN_OUT, {"release": [], "wake_at": NOW - 60 + 600},
         snapshot={"healthy_since": {"us0-n0": NOW - 60}}),
    Case("a node quarantined by hand stays quarantined",
         BY_HAND, {"release": []}, snapshot={"healthy_since": {"us0-n0": NOW - 6000}}),
    Case("a probe schedule starts counting when the group is first seen",
         FRESH, {"probes": [], "sweep_mark": NOW, "wake_at": NOW - NOW % 60 + 60.5,
                 "conditions": {"ProbesScheduled": ("True", "Scheduled")}},
         spec={"probes": {"schedule": "*/5 * * * *"}}),
    Case("when the schedule comes due, every idle healthy node is probed",
         labelled(nodes(domains=1, us0_n3=not_ready(NOW - 20))),
         {"probes": [("us0-n1", "schedule", int(NOW)), ("us0-n2", "schedule", int(NOW))],
          "sweep_mark": NOW},
         spec={"probes": {"schedule": "* * * * *"}},
         snapshot={"last_sweep": {"trn2": NOW - 120},
                   "pods": [BUSY_US0_N0]}),
    Case("a suspect whose probe proved nothing is not probed again with that image, stays "
         "out, and the group says why",
         SDC_OUT, {"probes": [], "release": [],
                   "conditions": {"ProbesInconclusive": ("True", "AcceleratorNotExercised")}},
         snapshot={"probe_runs": {"us0-n0": 3}, "clean_probes": {"us0-n0": 2},
                   "probe_image": "goodput:dev", "inconclusive": {"us0-n0": CPU_RUN}}),
    Case("another probe image tries the suspect again",
         SDC_OUT, {"probes": [("us0-n0", "suspicion", 3)], "release": []},
         spec={"probes": {"image": "probes:neuron"}},
         snapshot={"probe_runs": {"us0-n0": 3}, "probe_image": "goodput:dev",
                   "inconclusive": {"us0-n0": CPU_RUN}}),
    Case("a scheduled sweep skips a node its image cannot test",
         labelled(nodes(domains=1)),
         {"probes": [("us0-n1", "schedule", int(NOW)), ("us0-n2", "schedule", int(NOW)),
                     ("us0-n3", "schedule", int(NOW))],
          "conditions": {"ProbesInconclusive": ("False", "NoneInconclusive")}},
         spec={"probes": {"schedule": "* * * * *"}},
         snapshot={"last_sweep": {"trn2": NOW - 120}, "probe_image": "goodput:dev",
                   "inconclusive": {"us0-n0": CPU_RUN}}),
    Case("a schedule cron cannot read is reported on the group",
         FRESH, {"probes": [], "conditions": {"ProbesScheduled": ("False", "InvalidSchedule")}},
         spec={"probes": {"schedule": "61 * * * *"}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_group_pass(case: Case) -> None:
    fields = dict(case.snapshot)
    snapshot = world(case.nodes, spec=group_spec(**case.spec), group_status=case.status,
                     **fields)
    [decision] = decide_groups(snapshot, [])
    found = outcome(decision)
    expected_conditions = case.expect.get("conditions")
    if expected_conditions is not None:
        found["conditions"] = {k: found["conditions"].get(k) for k in expected_conditions}
    assert {k: found[k] for k in case.expect} == case.expect


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_group_status_decided_is_one_the_crd_accepts(case: Case) -> None:
    snapshot = world(case.nodes, spec=group_spec(**case.spec), group_status=case.status,
                     **case.snapshot)
    for decision in decide(snapshot).groups:
        UltraServerGroupStatus.model_validate(decision.desired)


def test_a_quarantine_carries_its_patch_and_a_message_naming_the_evidence() -> None:
    snapshot = world(labelled(nodes(us0_n0=not_ready(NOW - 20))))
    [decision] = decide_groups(snapshot, [])
    [quarantine] = decision.quarantine
    assert quarantine.patch["metadata"]["resourceVersion"] == "1"
    assert quarantine.patch["spec"]["taints"][-1]["key"] == names.QUARANTINE_TAINT
    assert quarantine.message.startswith("quarantined us0-n0: NodeNotReady: Ready=False")


def test_usage_only_changes_are_written_at_most_every_two_seconds() -> None:
    first = world(FRESH, clock=NOW)
    [decision] = decide_groups(first, [])
    written = {**decision.desired}
    busy = world(FRESH, group_status=written, clock=NOW + 0.5,
                 group_written={"trn2": NOW},
                 pods=[BUSY_US0_N0])
    [later] = decide_groups(busy, [])
    assert later.desired["totals"]["freeAccelerators"] == 112
    assert (later.write, later.wake_at) == (False, NOW + 2.0)


def test_the_group_status_counts_domains_nodes_and_spares() -> None:
    snapshot = world(FRESH, spec=group_spec(spares={"perDomain": 1}))
    status = group_status(snapshot.groups["trn2"], snapshot.fleets["trn2"], [],
                          Notes(None, 1, millis(NOW)))
    assert status["totals"] == {"domains": 2, "healthyDomains": 2, "nodes": 8,
                                "readyNodes": 8, "accelerators": 128,
                                "freeAccelerators": 96, "quarantined": 0, "spares": 2,
                                "standbyDomains": 0}
