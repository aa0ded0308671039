"""decide_job, case by case: a job, its pods and the fleet in; phase, pods, placement,
reservations and events out. Each case states only what it is about."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.trainingjob import TrainingJobStatus
from goodput_operator.decide import JobDecision, Snapshot, decide, decide_jobs, trial
from goodput_operator.decide.types import Refusal
from goodput_operator.health import badput
from goodput_operator.health.hang import StepClock
from goodput_operator.health.straggler import Pace, stragglers
from goodput_operator.times import millis
from goodput_operator.topology.record import nodes_of
from tests.unit.fleets import US
from tests.unit.world import (
    NOW,
    conditions,
    group_spec,
    job,
    nodes,
    not_ready,
    placed,
    quarantined,
    worker,
    world,
)

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
PLACED_2 = placed("us0-n0", "us0-n1")
GPU_TAINT = {"key": "example.com/reserved", "value": "x", "effect": "NoSchedule"}
DENIED = ('Pod j-r0-w0: pods "j-r0-w0" is forbidden: violates PodSecurity "restricted:latest": '
          'privileged (container "t" must not set securityContext.privileged=true)')
RUNNING_2 = {"phase": "Running", "placement": PLACED_2, "startTime": millis(NOW - 600),
             "goodput": {"since": millis(NOW - 600), "productiveSeconds": 0}}


def running_pods(owner: Obj, *phases: str) -> list[Obj]:
    """The job's ranks on us0-n0, us0-n1, ... in these phases (Running: ready)."""
    return [worker(owner, rank, node_name=f"us0-n{rank}", phase=phase, ready=phase == "Running")
            for rank, phase in enumerate(phases)]


def outcome(decision: JobDecision) -> dict[str, Any]:
    plan = decision.attempt
    return {
        "phase": decision.desired.get("phase"),
        "events": [e.reason for e in decision.events],
        "create": [p["metadata"]["name"] for p in plan.create] if plan else [],
        "pin": [(pod, node) for pod, node, _ in plan.pin] if plan else [],
        "delete": sorted(plan.delete) if plan else [],
        "reserve": [(r.pod_key, r.node) for r in decision.reservations],
        "ranks": nodes_of(decision.placement),
        "probes": [p.node for p in decision.probes],
        "probe_first": (decision.placement or {}).get("probeFirst", []),
        "wake_at": decision.wake_at,
        "restarts": decision.desired.get("restarts"),
        "conditions": conditions(decision.desired),
    }


def forged(pod: Obj, name: str, uid: str | None = None, rank: str | None = None) -> Obj:
    """POD renamed, owned by UID (None: by nobody), its rank label set to RANK."""
    pod["metadata"]["name"] = name
    pod["metadata"]["ownerReferences"] = [{"kind": "TrainingJob", "name": "j", "uid": uid,
                                           "controller": True}] if uid else []
    if rank is not None:
        pod["metadata"]["labels"][names.RANK_LABEL] = rank
    return pod


@dataclass
class Case:
    id: str
    job: Obj
    expect: dict[str, Any]
    pods: list[Obj] = field(default_factory=list)
    nodes: dict[str, Obj] | None = None
    snapshot: dict[str, Any] = field(default_factory=dict)


NEW = job()
PLACED_JOB = job(status={"phase": "Placing", "placement": PLACED_2})
RUNNING = job(status=RUNNING_2)
BRITTLE = job(status=RUNNING_2, failurePolicy={"backoff": {"initialSeconds": 30}})
DEVICE_CODES = job(status=RUNNING_2,
                   failurePolicy={"exitCodes": [{"codes": [74], "action": "probe"}]})
ELASTIC = {"minWorkers": 2, "step": 2}
SHRUNK = job(status={**RUNNING_2, "goodput": {**RUNNING_2["goodput"], "asOf": millis(NOW)}},
             workers=4, elastic=ELASTIC)                   # 2 of 4 running for 600 s


def shrunk(after: int, committed: float | None = None) -> Obj:
    """SHRUNK with elastic.growAfterSeconds AFTER and a checkpoint committed then."""
    status = {**SHRUNK["status"]}
    if committed is not None:
        status["checkpoint"] = {"latest": {"step": 9, "path": "/c/9", "time": millis(committed)}}
    return job(status=status, workers=4, elastic={**ELASTIC, "growAfterSeconds": after})


N0_OUT = nodes(us0_n0=quarantined(nodes()["us0-n0"], "NodeNotReady", NOW - 20))

CASES = [
    Case("an invalid spec fails the job with the reason, and nothing else",
         job(workers=0), {"phase": "Failed", "create": [], "events": [],
                          "conditions": {"Failed": ("True", "InvalidSpec")}}),
    Case("a job without a group (stored before the CRD required one) fails, naming it",
         job(ultraServerGroup=None), {"phase": "Failed", "create": [],
                                      "conditions": {"Failed": ("True", "InvalidSpec")}}),
    Case("a job naming a missing group waits for it",
         job(ultraServerGroup="elsewhere"),
         {"phase": "Pending", "conditions": {"Placed": ("False", "UltraServerGroupNotFound")}}),
    Case("a new job creates its workers gated and places the gang in one UltraServer",
         NEW, {"phase": "Placing", "events": ["Placed"], "create": ["j-r0-w0", "j-r0-w1"],
               "ranks": ["us0-n0", "us0-n1"],
               "reserve": [("ns/j-r0-w0", "us0-n0"), ("ns/j-r0-w1", "us0-n1")],
               "conditions": {"Placed": ("True", "Placed")}}),
    Case("a gang bigger than the free fleet waits, with the reason once, and has no pods",
         job(workers=9), {"phase": "Pending", "events": ["WaitingForCapacity"], "reserve": [],
                          "create": [],
                          "conditions": {"Placed": ("False", "WaitingForCapacity")}}),
    Case("a placed gang is created in chunks under the pass's write budget",
         job(workers=8), {"phase": "Placing", "create": ["j-r0-w0", "j-r0-w1", "j-r0-w2"],
                          "reserve": [(f"ns/j-r0-w{r}", f"us{r // 4}-n{r % 4}")
                                      for r in range(8)]},
         snapshot={"write_budget": 3}),
    Case("a gang taking a whole UltraServer skips the one a foreign pod holds",
         job(workers=4), {"ranks": ["us1-n0", "us1-n1", "us1-n2", "us1-n3"]},
         pods=[worker(job("other"), 0, node_name="us0-n2", phase="Running", ready=True)]),
    Case("spec.nodeSelector narrows the group to the nodes that carry it",
         job(workers=2, nodeSelector={US: "us-1"}), {"ranks": ["us1-n0", "us1-n1"]}),
    Case("a node whose taint the pod does not tolerate is never placed on",
         job(workers=4), {"ranks": ["us1-n0", "us1-n1", "us1-n2", "us1-n3"]},
         nodes=nodes(us0_n1={"spec": {"taints": [GPU_TAINT]}})),
    Case("a tolerated taint is no obstacle",
         job(workers=4, template={"spec": {"containers": [{"name": "t", "image": "i"}],
                                           "tolerations": [{"operator": "Exists"}]}}),
         {"ranks": ["us0-n0", "us0-n1", "us0-n2", "us0-n3"]},
         nodes=nodes(us0_n1={"spec": {"taints": [GPU_TAINT]}})),
    Case("a pod no node has the CPU for waits, and says why",
         job(workers=1, template={"spec": {"containers": [
             {"name": "t", "image": "i", "resources": {"requests": {"cpu": "500"}}}]}}),
         {"phase": "Pending", "ranks": [], "events": ["WaitingForCapacity"],
          "conditions": {"Placed": ("False", "WaitingForCapacity")}}),
    Case("quarantined nodes are never placed on",
         job(workers=4), {"ranks": ["us1-n0", "us1-n1", "us1-n2", "us1-n3"]}, nodes=N0_OUT),
    Case("gated workers of a placed attempt are pinned to their ranks",
         PLACED_JOB, {"phase": "Placing", "pin": [("j-r0-w0", "us0-n0"),
                                                  ("j-r0-w1", "us0-n1")], "reserve": []},
         pods=[worker(PLACED_JOB, 0), worker(PLACED_JOB, 1)]),
    Case("a missing worker of a placed attempt is created (pinned when applied)",
         PLACED_JOB, {"create": ["j-r0-w1"], "pin": [("j-r0-w0", "us0-n0")]},
         pods=[worker(PLACED_JOB, 0)]),
    Case("every worker ready: Running, once; hangs and stragglers are not judged before "
         "step reports",
         PLACED_JOB, {"phase": "Running", "events": ["Running"],
                      "conditions": {"Running": ("True", "AllWorkersRunning"),
                                     "HangDetection": ("False", "NoStepReports"),
                                     "Straggler": ("False", "NoStepReports")}},
         pods=running_pods(PLACED_JOB, "Running", "Running")),
    Case("a running job that stays running says nothing new",
         RUNNING, {"phase": "Running", "events": []},
         pods=running_pods(RUNNING, "Running", "Running")),
    Case("all workers succeeded: the job succeeds and gives its accelerators back",
         RUNNING, {"phase": "Succeeded", "events": ["Succeeded"],
                   "conditions": {"Succeeded": ("True", "AllWorkersSucceeded"),
                                  "Running": ("False", "AllWorkersSucceeded")}},
         pods=running_pods(RUNNING, "Succeeded", "Succeeded")),
    Case("suspending deletes the workers and drops the placement",
         job(status=RUNNING_2, suspend=True),
         {"phase": "Suspended", "events": ["Suspended"], "delete": ["j-r0-w0", "j-r0-w1"],
          "ranks": [], "conditions": {"Suspended": ("True", "Suspended")}},
         pods=running_pods(RUNNING, "Running", "Running")),
    Case("a finished job deletes what still runs and decides nothing else",
         job(status={"phase": "Failed", "message": "gave up", "placement": PLACED_2}),
         {"phase": "Failed", "delete": ["j-r0-w1"], "events": [], "create": []},
         pods=running_pods(RUNNING, "Failed", "Running")),
    Case("a rank's node quarantined: the gang restarts at once on the spare-less fleet's "
         "free node in the same UltraServer",
         RUNNING, {"phase": "Recovering", "events": ["Interrupted", "Restarting", "Replaced"],
                   "restarts": 1, "delete": ["j-r0-w0", "j-r0-w1"],
                   "ranks": ["us0-n2", "us0-n1"],
                   "reserve": [("ns/j-r1-w0", "us0-n2"), ("ns/j-r1-w1", "us0-n1")]},
         pods=running_pods(RUNNING, "Running", "Running"), nodes=N0_OUT),
    Case("nodeReplacement: wait — the gang waits for capacity instead of moving",
         job(status=RUNNING_2, failurePolicy={"nodeReplacement": "wait"}),
         {"phase": "Recovering", "events": ["Interrupted", "Restarting", "WaitingForCapacity"],
          "ranks": [], "reserve": []},
         pods=running_pods(RUNNING, "Running", "Running"), nodes=N0_OUT),
    Case("a rank's node failing but not yet judged: the gang keeps running meanwhile",
         RUNNING, {"phase": "Running", "events": [], "restarts": None},
         pods=running_pods(RUNNING, "Running", "Running"),
         nodes=nodes(us0_n0=not_ready(NOW - 2)),
         snapshot={"seen_unhealthy": {"us0-n0": NOW - 2}}),
    Case("an application error waits out its backoff, with a timer",
         BRITTLE, {"phase": "Recovering", "events": ["Interrupted"], "restarts": None,
                   "wake_at": NOW + 30, "delete": []},
         pods=running_pods(BRITTLE, "Failed", "Running")),
    Case("an exit code makes the worker's node suspect: the gang restarts at once in place, "
         "the suspect to be probed first",
         DEVICE_CODES, {"phase": "Recovering", "events": ["Interrupted", "Restarting",
                                                          "Replaced"],
                        "probe_first": ["us0-n0"], "restarts": 1,
                        "ranks": ["us0-n0", "us0-n1"]},
         pods=[worker(DEVICE_CODES, 0, node_name="us0-n0", phase="Failed", code=74),
               worker(DEVICE_CODES, 1, node_name="us0-n1", phase="Running", ready=True)]),
    Case("a worker failure with the restart budget used up fails the job",
         job(status={**RUNNING_2, "restarts": 2, "restartsByBudget": {"application": 2}},
             failurePolicy={"maxRestarts": 2}),
         {"phase": "Failed", "events": ["Failed"],
          "conditions": {"Failed": ("True", "RestartBudgetExhausted"),
                         "Running": ("False", "RestartBudgetExhausted")}},
         pods=[worker(RUNNING, 0, 2, "us0-n0", "Failed", code=1),
               worker(RUNNING, 1, 2, "us0-n1", "Running", True)]),
    Case("probeOnStart: the placed nodes are probed first; nothing is pinned",
         job(sdc={"probeOnStart": True}),
         {"phase": "Placing", "probes": ["us0-n0", "us0-n1"], "pin": [],
          "ranks": ["us0-n0", "us0-n1"]}),
    Case("probeOnStart with fresh clean probes: the workers are pinned",
         job(status={"phase": "Placing", "placement": PLACED_2}, sdc={"probeOnStart": True}),
         {"probes": [], "pin": [("j-r0-w0", "us0-n0"), ("j-r0-w1", "us0-n1")]},
         pods=[worker(PLACED_JOB, 0), worker(PLACED_JOB, 1)],
         snapshot={"probed_at": {"us0-n0": NOW - 10, "us0-n1": NOW - 10}}),
    Case("workers the API server refuses: a condition, an event, no creates until the "
         "backoff runs out",
         NEW, {"phase": "Placing", "events": ["CreateRefused", "Placed"], "wake_at": NOW + 2,
               "create": [], "conditions": {"WorkersCreated": ("False", "CreateRefused"),
                                            "Placed": ("True", "Placed")}},
         snapshot={"refused": {("ns", "j"): Refusal(1, DENIED, NOW)}}),
    Case("workers refused again: no new event, a longer backoff",
         PLACED_JOB, {"events": [], "wake_at": NOW - 1 + 8, "create": [],
                      "conditions": {"WorkersCreated": ("False", "CreateRefused")}},
         snapshot={"refused": {("ns", "j"): Refusal(3, DENIED, NOW - 1)}}),
    Case("once the backoff has run out, the workers are created again",
         PLACED_JOB, {"create": ["j-r0-w0", "j-r0-w1"], "wake_at": None,
                      "conditions": {"WorkersCreated": ("False", "CreateRefused")}},
         snapshot={"refused": {("ns", "j"): Refusal(3, DENIED, NOW - 9)}}),
    Case("refused five times: the job fails and gives its capacity back",
         PLACED_JOB, {"phase": "Failed", "events": ["Failed"], "create": [], "pin": [],
                      "delete": ["j-r0-w0"],
                      "conditions": {"Failed": ("True", "CreateRefused"),
                                     "Running": ("False", "CreateRefused")}},
         pods=[worker(PLACED_JOB, 0)],
         snapshot={"refused": {("ns", "j"): Refusal(5, DENIED, NOW)}}),
    Case("workers created after a refusal: the condition says so",
         job(status={"phase": "Placing", "placement": PLACED_2, "conditions": [
             {"type": "WorkersCreated", "status": "False", "reason": "CreateRefused",
              "message": DENIED, "lastTransitionTime": millis(NOW - 9)}]}),
         {"conditions": {"WorkersCreated": ("True", "Created")}},
         pods=[worker(PLACED_JOB, 0), worker(PLACED_JOB, 1)]),
    Case("a pod carrying a job's labels but not owned by it is not its worker",
         RUNNING, {"phase": "Running", "restarts": None, "probe_first": [], "create": []},
         pods=[*running_pods(RUNNING, "Running", "Running"),
               forged(worker(RUNNING, 0, node_name="us1-n0", phase="Failed", code=74),
                      name="impostor")]),
    Case("a rank label that is no number never makes the pass raise",
         RUNNING, {"phase": "Running", "restarts": None},
         pods=[*running_pods(RUNNING, "Running", "Running"),
               forged(worker(RUNNING, 1), name="odd", uid="uid-j", rank="abc")]),
]


CASES += [
    Case("a shrunk elastic job grows back to its size once it has run growAfterSeconds",
         SHRUNK, {"phase": "Recovering", "restarts": 1, "events": ["Resizing"],
                  "delete": ["j-r0-w0", "j-r0-w1"], "create": [],
                  "ranks": ["us0-n0", "us0-n1", "us0-n2", "us0-n3"],
                  "reserve": [(f"ns/j-r1-w{i}", f"us0-n{i}") for i in range(4)],
                  "conditions": {"Running": ("False", "Resizing"),
                                 "HangDetection": ("False", "NoStepReports")}},
         pods=running_pods(SHRUNK, "Running", "Running")),
    Case("it does not grow before (the hysteresis), and asks for a pass when it may",
         shrunk(610), {"phase": "Running", "restarts": None, "reserve": [], "delete": [],
                       "wake_at": NOW + 10},
         pods=running_pods(SHRUNK, "Running", "Running")),
    Case("when due it waits for the next checkpoint, growAfterSeconds at most",
         shrunk(500, committed=NOW - 200), {"phase": "Running", "restarts": None,
                                             "reserve": [], "wake_at": NOW + 30},
         pods=running_pods(SHRUNK, "Running", "Running")),
    Case("and grows as soon as a checkpoint is committed after it was due",
         shrunk(500, committed=NOW - 50), {"phase": "Recovering", "restarts": 1},
         pods=running_pods(SHRUNK, "Running", "Running")),
    Case("without room for a larger gang it goes on at its size",
         SHRUNK, {"phase": "Running", "restarts": None, "reserve": [], "events": []},
         pods=running_pods(SHRUNK, "Running", "Running"),
         nodes=nodes(1, us0_n2=not_ready(NOW - 900))),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_job_pass(case: Case) -> None:
    snapshot = world(case.nodes, [case.job], case.pods, **case.snapshot)
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    found = outcome(decision)
    assert {k: found[k] for k in case.expect} == case.expect


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_status_decided_is_one_the_crd_accepts(case: Case) -> None:
    snapshot = world(case.nodes, [case.job], case.pods, **case.snapshot)
    for decision in decide(snapshot).jobs:
        merged = {**decision.status, **decision.desired}
        TrainingJobStatus.model_validate({k: v for k, v in merged.items() if v is not None})


def test_jobs_are_placed_in_the_snapshots_order_and_see_each_others_reservations() -> None:
    first, second = job("first", workers=8), job("second", workers=1)
    snapshot = world(None, [first, second])
    plan = decide(snapshot)
    assert [outcome(d)["phase"] for d in plan.jobs] == ["Placing", "Pending"]
    assert "fully used by tj/ns/first" in plan.jobs[1].events[0].message
    assert len(plan.jobs[0].reservations) == 8


@pytest.mark.parametrize(("waiting", "grows"), [
    (job("next", workers=4), False),                 # fits in us-1: it goes first
    (job("low", workers=4, priority=-1), True),      # a lower priority waits its turn
    (job("huge", workers=12), True),                 # fits nowhere even now: no hold
])
def test_a_grow_yields_to_a_gang_of_its_group_that_waits_and_fits(waiting: Obj,
                                                                   grows: bool) -> None:
    """Capacity that comes back goes to waiting gangs of at least the shrunk job's
    priority first, when they fit in it."""
    pods = running_pods(SHRUNK, "Running", "Running")
    [grower, _] = decide(world(None, [SHRUNK, waiting], pods)).jobs
    assert (outcome(grower)["phase"] == "Recovering") is grows


def test_a_grow_is_a_planned_restart_at_the_new_size_paid_from_no_budget() -> None:
    """The incident says Resize with no detection time and no node blamed, no budget is
    charged, and the next attempt's workers all learn the new world size."""
    pods = running_pods(SHRUNK, "Running", "Running")
    [decision] = decide(world(None, [SHRUNK], pods)).jobs
    incident = decision.desired["incidents"][-1]
    assert (incident["cause"], incident["action"], incident["nodes"],
            incident["detectionSeconds"]) == ("Resize", "grow", [], 0)
    assert "restartsByBudget" not in decision.desired
    grown = job(status={**SHRUNK["status"], **decision.desired}, workers=4, elastic=ELASTIC)
    [after] = decide(world(None, [grown], [])).jobs
    assert after.attempt is not None
    env = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]}
           for p in after.attempt.create]
    assert [(e["GOODPUT_RANK"], e["GOODPUT_WORKERS"], e["NNODES"]) for e in env] == [
        (str(i), "4", "4") for i in range(4)]


def test_the_time_before_the_gang_runs_is_queueing_then_launch() -> None:
    """Created 30 s ago and placed in its first pass: 30 s queued, the launch stage opens
    now; once every worker runs, the launch closes into lostSeconds and the stage is
    removed (None: the status's merge patch deletes it)."""
    [first] = decide(world(None, [NEW])).jobs
    goodput = first.desired["goodput"]
    assert goodput["idleSeconds"] == {"queueing": 30}
    assert goodput["stage"] == {"name": "launch", "since": millis(NOW)}
    placed_job = job(status={**first.desired, "goodput": goodput})
    pods = [worker(placed_job, r, node_name=n, phase="Running", ready=True)
            for r, n in enumerate(nodes_of(first.placement))]
    [running] = decide(world(None, [placed_job], pods, clock=NOW + 7)).jobs
    assert running.desired["phase"] == "Running"
    goodput = running.desired["goodput"]
    assert goodput["lostSeconds"] == {"launch": 7} and goodput["stage"] is None
    assert goodput["since"] == millis(NOW + 7)


def paces(slow: bool) -> Pace:
    """Ranks 0 and 1 of RUNNING reporting computeSeconds for 20 steps, rank 1 at 3x."""
    pace = Pace(0)
    for step in range(20):
        for rank in (0, 1):
            pace.record(rank, f"us0-n{rank}", step, float(step),
                        3.0 if slow and rank == 1 else 1.0)
    return pace


@pytest.mark.parametrize(("pace", "found", "policy", "expect"), [
    (None, [], {}, ("False", "NoStepReports", "fewer than 2 ranks reported steps")),
    (paces(False), [], {}, ("False", "NoneFound", "ranks compared by computeSeconds: none "
                                                  "over 1.5 x its peers' median over 16+")),
    (paces(True), stragglers(paces(True), 1.5, 16), {"action": "quarantine"},
     ("True", "SlowRank", "rank 1 on us0-n1: 3.000s per step against its peers' 1.000s (3.0x, "
                          "computeSeconds) (its node is quarantined for a probe)")),
    (paces(True), [], {"enabled": False}, ("False", "Disabled", "enabled is false")),
], ids=["no reports", "none found", "found", "disabled"])
def test_the_straggler_condition_says_which_signal_is_in_force_and_what_it_found(
        pace: Pace | None, found: list[Any], policy: Obj, expect: tuple[str, str, str]
        ) -> None:
    running = job(status=RUNNING_2, failurePolicy={"straggler": policy})
    snapshot = world(None, [running], running_pods(running, "Running", "Running"),
                     paces={("ns", "j"): pace} if pace else {},
                     stragglers={("ns", "j"): found})
    [decision] = decide(snapshot).jobs
    condition = next(c for c in decision.desired["conditions"] if c["type"] == "Straggler")
    assert (condition["status"], condition["reason"]) == expect[:2]
    assert expect[2] in condition["message"]


def test_a_decision_leaves_the_fleet_as_it_found_it() -> None:
    snapshot = world(None, [job("a", workers=3), job("b", workers=4)])
    fleet = snapshot.fleets["trn2"]
    before = fleet.snapshot()
    plan = decide(snapshot)
    assert sum(len(d.reservations) for d in plan.jobs) == 7
    assert fleet.snapshot() == before


def test_a_job_whose_decision_raises_is_handed_back_and_the_others_go_on() -> None:
    broken = job("broken")
    broken["status"] = {"placement": {"slices": [{"firstRank": 0, "nodes": "n[3-0]"}]}}
    plan = decide(world(None, [broken, job("fine")]))
    assert [f.obj["metadata"]["name"] for f in plan.failures] == ["broken"]
    assert [d.job["metadata"]["name"] for d in plan.jobs] == ["fine"]


def test_the_reported_progress_goes_into_the_status() -> None:
    progress = {"step": 1200, "time": millis(NOW - 1)}  # as the report channel keeps it
    snapshot: Snapshot = world(None, [RUNNING], running_pods(RUNNING, "Running", "Running"),
                               progress={("ns", "j"): progress})
    [decision] = decide(snapshot).jobs
    assert decision.desired["progress"] == progress


def test_a_placement_recorded_before_the_domains_column_gets_its_summary() -> None:
    assert "domainSummary" not in RUNNING_2["placement"]  # as an older operator wrote it
    snapshot: Snapshot = world(None, [RUNNING], running_pods(RUNNING, "Running", "Running"))
    [decision] = decide(snapshot).jobs
    assert decision.desired["placement"]["domainSummary"] == "us-0"
    assert decision.desired["placement"]["slices"] == RUNNING_2["placement"]["slices"]
    [placing] = decide(world(None, [job(workers=2, acceleratorsPerWorker=16)])).jobs
    assert placing.desired["placement"]["domainSummary"] == "us-0", "a new placement too"


@pytest.mark.parametrize(("order", "ranks"), [
    ("fabric", ["us0-n3", "us0-n2", "us0-n1", "us0-n0"]),   # the slots the labels give
    ("index", ["us0-n0", "us0-n1", "us0-n2", "us0-n3"]),    # the nodes' names
])
def test_rank_order_fabric_follows_the_slots_index_the_names(order: str,
                                                             ranks: list[str]) -> None:
    spec = group_spec(slotOrder={"by": "label", "label": "example.com/slot"})
    bodies = nodes(**{f"us0_n{i}": {"metadata": {"labels": {"example.com/slot": str(3 - i)}}}
                      for i in range(4)})
    snapshot = world(bodies, [job(workers=4, topology={"rankOrder": order})], spec=spec)
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    found = outcome(decision)
    assert found["ranks"] == ranks
    assert found["reserve"] == [(f"ns/j-r0-w{i}", node) for i, node in enumerate(ranks)]


def test_a_gang_waiting_on_what_its_pod_asks_says_which_nodes_refuse_it() -> None:
    cpu = job(workers=1, template={"spec": {"containers": [
        {"name": "t", "image": "i", "resources": {"requests": {"cpu": "500"}}}]}})
    snapshot = world(None, [cpu])
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    assert "the pod fits only 0 of the group's 8 nodes (8 refuse it: cpu 500 > " \
           "allocatable 0)" in decision.desired["message"]


def refused_by_the_scheduler(owner: Obj, rank: int, node: str, since: float) -> Obj:
    """Worker RANK pinned to NODE (ungated), which kube-scheduler keeps refusing."""
    pod = worker(owner, rank)
    pod["spec"]["schedulingGates"] = []
    pod["metadata"].setdefault("annotations", {})[names.NODE_ANNOTATION] = node
    pod["status"]["conditions"] = [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/8 nodes are available: 1 Insufficient cpu.",
        "lastTransitionTime": millis(since)}]
    return pod


@pytest.mark.parametrize(("refused_for", "restarted"), [(10, False), (31, True)])
def test_a_pinned_worker_the_scheduler_keeps_refusing_is_placed_again_elsewhere(
        refused_for: float, restarted: bool) -> None:
    """Placement cannot see everything the scheduler does (other pods' CPU, say): a pinned
    worker refused for 30 s is re-placed, never waited on forever."""
    placed = job(status={"phase": "Placing", "placement": PLACED_2})
    pods = [worker(placed, 0, node_name="us0-n0", phase="Running", ready=True),
            refused_by_the_scheduler(placed, 1, "us0-n1", NOW - refused_for)]
    snapshot = world(None, [placed], pods)
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    found = outcome(decision)
    if not restarted:
        assert found["restarts"] is None and found["wake_at"] == NOW - refused_for + 30
        return
    assert found["restarts"] == 1 and "us0-n1" not in found["ranks"]
    incident = decision.desired["incidents"][-1]
    assert incident["cause"] == "Unschedulable" and incident["nodes"] == ["us0-n1"]
    assert "Insufficient cpu" in incident["message"]


def test_a_running_job_s_goodput_is_refreshed_and_a_pass_is_asked_for_the_next_refresh(
        ) -> None:
    """Running for 600 s since its goodput was last written: the status says 600 productive
    seconds now, and the pass asks to be woken when the figures are 30 s old again."""
    snapshot = world(None, [RUNNING], running_pods(RUNNING, "Running", "Running"))
    [decision] = decide(snapshot).jobs
    goodput = decision.desired["goodput"]
    assert (goodput["productiveSeconds"], goodput["ratio"], goodput["asOf"]) == (
        600, 1.0, millis(NOW))
    assert decision.wake_at == NOW + 30
    written = {k: v for k, v in {**RUNNING_2, **decision.desired}.items() if v is not None}
    fresh = job(status=written)
    [again] = decide(world(None, [fresh], running_pods(fresh, "Running", "Running"),
                           clock=NOW + 10)).jobs
    assert not {k for k, v in again.desired.items() if written.get(k) != v}, \
        "no write before the refresh is due"
    assert again.wake_at == NOW + 30
    moved = job(status={**written, "message": "an older message"})
    [folded] = decide(world(None, [moved], running_pods(moved, "Running", "Running"),
                            clock=NOW + 10)).jobs
    assert folded.desired["goodput"]["productiveSeconds"] == 610, \
        "a status written anyway carries the figures as of now"
    assert folded.wake_at == NOW + 40


def test_with_thousands_of_jobs_running_their_goodput_refreshes_less_often() -> None:
    """The refresh period grows with the running jobs, so refresh-only writes stay under
    badput.BOOK_WRITES_PER_SECOND in all."""
    running = 3000
    every = badput.refresh_seconds(running)
    assert running / every <= badput.BOOK_WRITES_PER_SECOND
    snapshot = replace(
        world(None, [RUNNING], running_pods(RUNNING, "Running", "Running")),
        refresh_seconds=every)
    [decision] = decide(snapshot).jobs
    assert decision.wake_at == NOW + every


def stepped_until(last: float) -> JobDecision:
    """The pass of a running job whose workers reported steps 1..10, a second apart, the
    last at LAST."""
    steps = StepClock(0)
    for step in range(1, 11):
        steps.advance(step, last - 10 + step)
    snapshot = world(None, [RUNNING], running_pods(RUNNING, "Running", "Running"),
                     steps={("ns", "j"): steps})
    [decision] = decide(snapshot).jobs
    return decision


def test_a_job_whose_steps_stopped_past_the_window_restarts_with_cause_hang() -> None:
    """Every worker Running, the newest step 700 s old (floor 600 s, steps 1 s apart):
    the attempt is hung: an incident (cause Hang, failed at the last step, detected now,
    paid from the application's budget) and the gang restarts."""
    decision = stepped_until(NOW - 700)
    incident = decision.desired["incidents"][-1]
    assert (incident["cause"], incident["detectionSeconds"]) == ("Hang", 700)
    assert "no step for 700s after step 10" in incident["message"]
    assert decision.desired["restartsByBudget"] == {"application": 1}
    assert decision.desired["phase"] == "Recovering" and decision.desired["restarts"] == 1
    TrainingJobStatus.model_validate(decision.desired)


def test_a_job_stepping_is_in_force_and_asks_for_a_pass_at_its_window_s_end() -> None:
    decision = stepped_until(NOW - 10)
    assert decision.desired["phase"] == "Running"
    assert conditions(decision.desired)["HangDetection"] == ("True", "InForce")
    assert decision.attempt is not None
    assert decision.attempt.wake_at == NOW - 10 + 600  # the last step's time + the floor


def test_after_an_operator_restart_a_hung_job_is_judged_from_its_recorded_progress() -> None:
    """No step report reached this leader; the status says the previous one saw step 40
    of this attempt 700 s ago: the floor (600 s) has passed, the job is hung. Progress that
    does not say its attempt (written before it did) says nothing."""
    progress = {"step": 40, "rank": 0, "restart": 0, "time": millis(NOW - 700)}
    hung_job = job(status={**RUNNING_2, "progress": progress})
    [decision] = decide(world(None, [hung_job], running_pods(hung_job, "Running",
                                                             "Running"))).jobs
    assert decision.desired["incidents"][-1]["cause"] == "Hang"
    older = job(status={**RUNNING_2, "progress": {**progress, "restart": None}})
    [decision] = decide(world(None, [older], running_pods(older, "Running", "Running"))).jobs
    assert decision.desired["phase"] == "Running"


def test_blame_the_groups_budget_holds_back_is_said_on_the_job_that_reported_it() -> None:
    from goodput_operator.health.quarantine import SDC, Finding
    body = job(status=RUNNING_2)
    pods = running_pods(body, "Running", "Running")
    held = {"us1-n0": Finding(SDC, "rank 1 diverged", NOW - 5, owner="ns/j"),
            "us1-n1": Finding(SDC, "someone else's", NOW - 5, owner="ns/other")}
    snapshot = world(None, [body], pods, blamed=held)
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    said = next(c for c in decision.desired["conditions"] if c["type"] == "EvidenceHeld")
    assert (said["status"], said["reason"]) == ("True", "BlameBudgetInUse")
    assert "us1-n0" in said["message"] and "us1-n1" not in said["message"]
    body["status"] = {**RUNNING_2, "conditions": decision.desired["conditions"]}
    snapshot = world(None, [body], pods)           # quarantined, or the job gone: settled
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    assert conditions(decision.desired)["EvidenceHeld"] == ("False", "Settled")
