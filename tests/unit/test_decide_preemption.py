"""Preemption through decide_jobs: the gang that needs room marks the fewest victims, a
victim saves then stops and is requeued, and nothing happens that the policy forbids."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.api.trainingjob import TrainingJobStatus
from goodput_operator.decide import JobDecision, decide_jobs, trial
from goodput_operator.times import millis
from tests.unit.world import NOW, conditions, job, placed, worker, world

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
CHECKPOINTS = {"dir": "/fsx/ckpt"}


def running_job(name: str, *nodes: str, status: Obj | None = None, **spec: Any
                ) -> tuple[Obj, list[Obj]]:
    domain = f"us-{nodes[0][2]}"
    body = job(name, workers=len(nodes), **{"checkpoint": CHECKPOINTS, **spec}, status={
        "phase": "Running", "placement": placed(*nodes, domain=domain),
        "startTime": millis(NOW - 600), "goodput": {"since": millis(NOW - 600)}, **(status or {})})
    pods = [worker(body, rank, node_name=node, phase="Running", ready=True)
            for rank, node in enumerate(nodes)]
    return body, pods


def passed(jobs: list[Obj], pods: list[Obj]) -> dict[str, JobDecision]:
    snapshot = world(None, jobs, pods)
    with trial(snapshot):
        decisions = decide_jobs(snapshot, [])
    for decision in decisions:
        merged = {**decision.status, **decision.desired}
        TrainingJobStatus.model_validate({k: v for k, v in merged.items() if v is not None})
    return {d.job["metadata"]["name"]: d for d in decisions}


WHOLE_0 = [f"us0-n{s}" for s in range(4)]
HIGH = job("high", workers=4, priority=10, preemptionPolicy="LowerPriority")


def fleet_of_three(**low: Any) -> tuple[list[Obj], list[Obj]]:
    """low-a holds us-0 whole; low-b (2 workers) and low-c (1) share us-1."""
    a, a_pods = running_job("low-a", *WHOLE_0, **low)
    b, b_pods = running_job("low-b", "us1-n0", "us1-n1")
    c, c_pods = running_job("low-c", "us1-n2")
    return [HIGH, a, b, c], [*a_pods, *b_pods, *c_pods]


def test_the_gang_preempts_the_one_job_that_frees_a_whole_ultraserver() -> None:
    jobs, pods = fleet_of_three()
    found = passed(jobs, pods)
    high = found["high"]
    assert high.placement is None
    assert conditions(high.desired)["Placed"] == ("False", "Preempting")
    assert high.desired["message"].startswith("preempting ns/low-a (below priority 10 within ns)")
    assert [e.reason for e in high.events] == ["Preempting"]
    victim = found["low-a"]
    assert victim.desired["preemption"]["by"] == "ns/high"
    assert victim.desired["preemption"]["deadline"] == millis(NOW + 120)
    assert conditions(victim.desired)["Preempted"] == ("True", "Checkpointing")
    assert victim.desired["phase"] == "Running" and victim.attempt is not None
    assert victim.attempt.delete == []
    for bystander in ("low-b", "low-c"):
        assert "preemption" not in found[bystander].desired


def test_without_a_preemption_policy_the_gang_waits() -> None:
    jobs, pods = fleet_of_three()
    jobs[0] = job("high", workers=4, priority=10)
    found = passed(jobs, pods)
    assert conditions(found["high"].desired)["Placed"] == ("False", "WaitingForCapacity")
    assert "preemption" not in found["low-a"].desired


def test_jobs_of_the_same_or_a_higher_priority_are_never_preempted() -> None:
    jobs, pods = fleet_of_three(priority=10)
    jobs[2]["spec"]["priority"] = 10  # low-b as important as the gang: us-1 stays held
    found = passed(jobs, pods)
    assert conditions(found["high"].desired)["Placed"] == ("False", "WaitingForCapacity")


@pytest.mark.parametrize(("case", "status", "clock_past_deadline"), [
    ("the checkpoint asked for is committed", {"checkpoint": {"latest": {
        "step": 40, "path": "/fsx/ckpt/step-40", "time": millis(NOW - 5)}}}, False),
    ("the grace period is over, saved or not", {}, True),
])
def test_a_victim_stops_once_saved_or_out_of_time_and_is_requeued(
        case: str, status: Obj, clock_past_deadline: bool) -> None:
    at = NOW - (200 if clock_past_deadline else 30)
    preemption = {"by": "ns/high", "at": millis(at), "deadline": millis(at + 120)}
    jobs, pods = fleet_of_three(status={"preemption": preemption, **status})
    victim = passed(jobs, pods)["low-a"]
    assert victim.attempt is not None
    assert sorted(victim.attempt.delete) == [f"low-a-r0-w{i}" for i in range(4)], case
    assert victim.desired["phase"] == "Recovering"
    assert victim.placement is None and victim.desired["placement"] is None
    assert victim.desired["restarts"] == 1
    assert victim.desired["preemption"] is None
    incident = victim.desired["incidents"][-1]
    assert (incident["cause"], incident["action"]) == ("Preemption", "requeue")
    assert conditions(victim.desired)["Preempted"] == ("True", "Requeued")
    if status:
        assert incident["resumeFrom"]["step"] == 40
        assert "resumes from step 40" in victim.desired["message"]


def test_a_victim_without_checkpoints_is_stopped_at_once() -> None:
    jobs, pods = fleet_of_three(checkpoint={})
    victim = passed(jobs, pods)["low-a"]
    assert victim.desired["phase"] == "Recovering" and victim.placement is None


def test_a_victim_no_longer_needed_runs_on() -> None:
    preemption = {"by": "ns/high", "at": millis(NOW - 30), "deadline": millis(NOW + 90)}
    jobs, pods = fleet_of_three(status={"preemption": preemption})
    found = passed(jobs[1:], pods)  # the gang is gone
    victim = found["low-a"]
    assert victim.desired["preemption"] is None and victim.desired["phase"] == "Running"
    assert conditions(victim.desired)["Preempted"] == ("False", "Cancelled")


def test_the_next_passes_keep_the_same_victim_and_its_deadline() -> None:
    preemption = {"by": "ns/high", "at": millis(NOW - 30), "deadline": millis(NOW + 90)}
    jobs, pods = fleet_of_three(status={"preemption": preemption})
    found = passed(jobs, pods)
    assert found["low-a"].desired["preemption"]["deadline"] == millis(NOW + 90)
    assert found["low-a"].events == []


def test_a_requeued_victim_is_not_placed_back_on_the_room_freed_for_the_gang() -> None:
    """low-b stopped (its room free), low-a still saving: the gang still waits for low-a,
    and low-b, requeued, must not take low-b's old nodes back (it would be preempted again,
    over and over)."""
    preemption = {"by": "ns/high", "at": millis(NOW - 30), "deadline": millis(NOW + 90)}
    a, a_pods = running_job("low-a", *WHOLE_0, status={"preemption": preemption})
    b = job("low-b", workers=4, status={"phase": "Recovering", "restarts": 1, "incidents": [
        {"restart": 1, "cause": "Preemption", "action": "requeue", "message": "preempted",
         "failedAt": millis(NOW - 5), "detectedAt": millis(NOW - 5)}]})
    high = job("high", workers=8, priority=10, preemptionPolicy="LowerPriority")
    found = passed([high, a, b], a_pods)
    assert conditions(found["high"].desired)["Placed"] == ("False", "Preempting")
    assert found["low-a"].desired["preemption"]["by"] == "ns/high"
    assert found["low-b"].placement is None
    assert found["low-b"].desired["phase"] == "Recovering"


def test_victims_not_proven_the_fewest_are_said_to_be_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """low-b and low-c share us-1 (two victims); low-d alone leaves a foreign-free node
    short on us-0: proving no one victim does needs placements, none allowed here."""
    from goodput_operator.topology import preemption
    monkeypatch.setattr(preemption, "TRIALS", 0)
    b, b_pods = running_job("low-b", "us1-n0", "us1-n1")
    c, c_pods = running_job("low-c", "us1-n2")
    d, d_pods = running_job("low-d", "us0-n0")
    e, e_pods = running_job("e", "us0-n1", priority=20)  # not a victim: higher
    found = passed([HIGH, b, c, d, e], [*b_pods, *c_pods, *d_pods, *e_pods])
    message = found["high"].desired["message"]
    assert message.startswith("preempting ns/low-b, ns/low-c") or \
        message.startswith("preempting ns/low-c, ns/low-b"), message
    assert "fewer might do, beyond the search's budget" in message
