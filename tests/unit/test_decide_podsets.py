"""A TrainingJob with pod sets (spec.podSets) through decide_job: its companions are
created, placed, pinned, waited for and replaced with the gang, all or none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from goodput_operator import names
from goodput_operator.api.trainingjob import PodSet, TrainingJobStatus
from goodput_operator.decide import JobDecision, decide_jobs, trial
from goodput_operator.resources import trainingjob as build
from goodput_operator.times import millis
from goodput_operator.topology.record import companions_of, nodes_of
from tests.unit.world import (
    NEURON,
    NOW,
    TRN2,
    as_returned,
    job,
    nodes,
    placed,
    quarantined,
    worker,
    world,
)

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
LEADER = {"name": "leader"}  # one CPU-only pod, near the workers' UltraServer
ONE_CHIP = {"name": "leader", "acceleratorsPerPod": 1}


def decided(owner: Obj, pods: Sequence[Obj] = (), node_bodies: Obj | None = None
            ) -> JobDecision:
    snapshot = world(node_bodies, [owner], pods)
    with trial(snapshot):
        [decision] = decide_jobs(snapshot, [])
    merged = {**decision.status, **decision.desired}
    TrainingJobStatus.model_validate({k: v for k, v in merged.items() if v is not None})
    return decision


def companion(owner: Obj, node_name: str | None = None, phase: str = "Pending",
              ready: bool = False, restart: int = 0) -> Obj:
    pod_set = PodSet.model_validate(owner["spec"]["podSets"][0])
    return as_returned(build.companion_pod(owner, pod_set, 0, restart, TRN2), node_name,
                       phase, ready)


def with_leader(node: str, domain: str = "us-0") -> Obj:
    return {**placed("us0-n0", "us0-n1"),
            "podSets": [{"set": "leader", "index": 0, "node": node, "domain": domain}]}


def test_a_new_job_creates_and_places_its_leader_with_the_workers() -> None:
    decision = decided(job(podSets=[LEADER]))
    plan = decision.attempt
    assert plan is not None
    assert [p["metadata"]["name"] for p in plan.create] == ["j-r0-w0", "j-r0-w1",
                                                           "j-r0-leader-0"]
    leader = plan.create[2]
    assert leader["metadata"]["labels"][names.POD_SET_LABEL] == "leader"
    assert names.RANK_LABEL not in leader["metadata"]["labels"]
    env = {e["name"]: e["value"] for e in leader["spec"]["containers"][0]["env"]}
    assert env[names.ENV_POD_SET] == "leader" and "RANK" not in env
    assert env["MASTER_ADDR"].startswith("w0.")
    assert NEURON not in leader["spec"]["containers"][0].get("resources", {}).get(
        "requests", {})
    assert nodes_of(decision.placement) == ["us0-n0", "us0-n1"]
    assert companions_of(decision.placement)[("leader", 0)]["node"] == "us0-n0"
    assert "leader on us0-n0" in decision.desired["message"]


def test_a_leader_with_a_chip_is_reserved_on_a_node_of_the_workers_ultraserver() -> None:
    decision = decided(job(podSets=[ONE_CHIP]))
    assert [(r.pod_key, r.node, r.accelerators) for r in decision.reservations] == [
        ("ns/j-r0-w0", "us0-n0", 16), ("ns/j-r0-w1", "us0-n1", 16),
        ("ns/j-r0-leader-0", "us0-n2", 1)]


def test_gated_companions_are_pinned_where_the_placement_put_them() -> None:
    owner = job(podSets=[LEADER], status={"phase": "Placing",
                                          "placement": with_leader("us0-n1")})
    pods = [worker(owner, 0), worker(owner, 1), companion(owner)]
    plan = decided(owner, pods).attempt
    assert plan is not None
    assert [(pod, node) for pod, node, _ in plan.pin] == [
        ("j-r0-w0", "us0-n0"), ("j-r0-w1", "us0-n1"), ("j-r0-leader-0", "us0-n1")]


def test_the_job_runs_only_once_its_companions_run_too() -> None:
    owner = job(podSets=[LEADER], status={"phase": "Placing",
                                          "placement": with_leader("us0-n0")})
    workers = [worker(owner, r, node_name=f"us0-n{r}", phase="Running", ready=True)
               for r in (0, 1)]
    waiting = decided(owner, [*workers, companion(owner, "us0-n0")])
    assert waiting.desired["phase"] == "Placing"
    running = decided(owner, [*workers, companion(owner, "us0-n0", "Running", ready=True)])
    assert running.desired["phase"] == "Running"


def test_a_failed_companion_restarts_the_gang() -> None:
    owner = job(podSets=[LEADER], status={
        "phase": "Running", "placement": with_leader("us0-n0"), "startTime": millis(NOW - 600),
        "goodput": {"since": millis(NOW - 600)}})
    workers = [worker(owner, r, node_name=f"us0-n{r}", phase="Running", ready=True)
               for r in (0, 1)]
    decision = decided(owner, [*workers, companion(owner, "us0-n0", "Failed")])
    assert decision.desired["phase"] == "Recovering"
    assert decision.desired["incidents"][-1]["cause"] == "ApplicationError"


def test_a_lost_leader_node_moves_the_leader_beside_the_workers_that_stay() -> None:
    owner = job(podSets=[ONE_CHIP], status={
        "phase": "Running", "placement": with_leader("us0-n2"), "startTime": millis(NOW - 600),
        "goodput": {"since": millis(NOW - 600)}, "restarts": 0})
    workers = [worker(owner, r, node_name=f"us0-n{r}", phase="Running", ready=True)
               for r in (0, 1)]
    bodies = nodes(us0_n2=quarantined(nodes()["us0-n2"], "NodeNotReady", NOW - 20))
    decision = decided(owner, [*workers, companion(owner, "us0-n2", "Running", ready=True)],
                       bodies)
    assert decision.desired["incidents"][-1]["cause"] == "NodeFailure"
    assert decision.desired["restarts"] == 1
    assert nodes_of(decision.placement) == ["us0-n0", "us0-n1"]
    moved = companions_of(decision.placement)[("leader", 0)]
    assert moved["node"] == "us0-n3" and moved["domain"] == "us-0"
    assert ("ns/j-r1-leader-0", "us0-n3") in [(r.pod_key, r.node)
                                               for r in decision.reservations]


def test_a_gang_whose_leader_fits_nowhere_near_it_is_not_placed_at_all() -> None:
    decision = decided(job(workers=8, podSets=[ONE_CHIP]))  # 2 whole UltraServers
    assert decision.placement is None and decision.reservations == []
    assert "pod set leader" in decision.desired["message"]


RESERVED = {"key": "example.com/launchers", "value": "x", "effect": "NoSchedule"}


def test_each_pod_set_is_placed_by_its_own_selector_and_tolerations() -> None:
    """us0-n3 is tainted for launchers: the workers (no toleration) stay off it, the
    launcher (its own template tolerates it, its node selector asks for it) lands there."""
    launcher = {"name": "launcher", "nodeSelector": {"kubernetes.io/hostname": "us0-n3"},
                "template": {"spec": {
                    "containers": [{"name": "l", "image": "example.com/launch:1"}],
                    "tolerations": [{"key": "example.com/launchers", "operator": "Exists"}]}}}
    bodies = nodes(us0_n3={"spec": {"taints": [RESERVED]},
                           "metadata": {"labels": {"kubernetes.io/hostname": "us0-n3"}}})
    decision = decided(job(workers=3, podSets=[launcher]), node_bodies=bodies)
    assert nodes_of(decision.placement) == ["us0-n0", "us0-n1", "us0-n2"]
    assert companions_of(decision.placement)[("launcher", 0)]["node"] == "us0-n3"
    plan = decision.attempt
    assert plan is not None
    pod = plan.create[3]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "us0-n3"}
    assert pod["spec"]["containers"][0]["image"] == "example.com/launch:1"


def test_a_pod_set_whose_selector_fits_no_node_near_the_workers_keeps_the_gang_waiting() -> None:
    launcher = {"name": "launcher", "nodeSelector": {"kubernetes.io/hostname": "elsewhere"}}
    decision = decided(job(podSets=[launcher]))
    assert decision.placement is None and decision.reservations == []
    assert "pod set launcher" in decision.desired["message"]
    assert "refuse it: nodeSelector kubernetes.io/hostname=elsewhere" in \
        decision.desired["message"]
