"""The TrainingJob reconcile decision, state by state."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.jobplan import plan

pytestmark = pytest.mark.unit
NEURON = "aws.amazon.com/neuron"


def job(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {"ultraServerGroup": "g", "workers": 2, "acceleratorsPerWorker": 16,
                     "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
                     **spec},
            "status": status or {}}


def pod(index: int, restart: int = 0, phase: str = "Pending", gated: bool = True,
        ready: bool = False, code: int | None = None) -> dict[str, Any]:
    body = build.worker_pod(job(), index, restart, NEURON)
    if not gated:
        body["spec"]["schedulingGates"] = []
    body["status"] = {"phase": phase,
                      "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if code is not None:
        body["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return body


PLACED = {"placement": {"ranks": [{"rank": 0, "node": "n0", "domain": "d"},
                                  {"rank": 1, "node": "n1", "domain": "d"}]}}


def test_a_new_job_creates_all_workers_gated_and_asks_for_a_placement() -> None:
    result = plan(job(), [], NEURON)
    assert [p["metadata"]["name"] for p in result.create] == ["j-r0-w0", "j-r0-w1"]
    assert all(build.is_gated(p) for p in result.create)
    assert result.needs_placement and result.phase == "Pending"


def test_placement_is_asked_for_while_no_worker_runs_ungated() -> None:
    assert plan(job(), [pod(0)], NEURON).needs_placement is True
    assert plan(job(), [pod(0), pod(1)], NEURON).needs_placement is True
    assert plan(job(), [pod(0), pod(1, gated=False)], NEURON).needs_placement is False


def test_a_placement_pins_the_gated_workers_to_their_ranks() -> None:
    result = plan(job(PLACED), [pod(0), pod(1)], NEURON)
    assert result.pin == [("j-r0-w0", "n0", "d"), ("j-r0-w1", "n1", "d")]
    assert result.phase == "Placing"


def test_after_a_restart_mid_launch_only_the_remaining_gated_pods_are_pinned() -> None:
    result = plan(job(PLACED), [pod(0, gated=False), pod(1)], NEURON)
    assert result.pin == [("j-r0-w1", "n1", "d")]
    assert result.create == []


def test_running_when_every_worker_is_ready() -> None:
    result = plan(job(PLACED), [pod(i, phase="Running", gated=False, ready=True)
                                for i in range(2)], NEURON)
    assert result.phase == "Running" and result.ready == 2
    assert ("Running", True, "AllWorkersRunning", "all 2 workers running") in result.conditions


def test_succeeded_when_every_worker_succeeded() -> None:
    result = plan(job(PLACED), [pod(i, phase="Succeeded", gated=False) for i in range(2)],
                  NEURON)
    assert result.phase == "Succeeded" and result.message == "all 2 workers succeeded"


@pytest.mark.parametrize(
    ("rules", "code", "phase", "fragment"),
    [
        ([{"codes": [3], "action": "fail"}], 3, "Failed",
         "worker w1 (j-r0-w1) exited with code 3; failurePolicy.exitCodes says fail"),
        ([], 137, "Recovering", "exited with code 137; restarting the gang (restart 1)"),
        ([{"codes": [137], "action": "restart"}], 137, "Recovering", "restart 1"),
    ],
)
def test_exit_codes_follow_the_failure_policy(rules: list, code: int, phase: str,
                                              fragment: str) -> None:
    pods = [pod(0, phase="Running", gated=False, ready=True),
            pod(1, phase="Failed", gated=False, code=code)]
    result = plan(job(PLACED, failurePolicy={"exitCodes": rules}), pods, NEURON)
    assert result.phase == phase
    assert fragment in result.message
    if phase == "Failed":
        assert result.delete == ["j-r0-w0"]      # the still-running worker is stopped
    else:
        assert result.restart and result.delete == ["j-r0-w0", "j-r0-w1"]


def test_an_ignored_exit_code_counts_as_done() -> None:
    pods = [pod(0, phase="Succeeded", gated=False), pod(1, phase="Failed", gated=False, code=9)]
    result = plan(job(PLACED, failurePolicy={"exitCodes": [{"codes": [9],
                                                            "action": "ignore"}]}), pods, NEURON)
    assert result.phase == "Succeeded"


def test_the_restart_budget_ends_in_failure() -> None:
    pods = [pod(0, restart=2, phase="Failed", gated=False, code=1), pod(1, restart=2)]
    result = plan(job({**PLACED, "restarts": 2}, failurePolicy={"maxRestarts": 2}), pods, NEURON)
    assert result.phase == "Failed" and "restart budget of 2 used up" in result.message


def test_pods_of_older_attempts_are_deleted_and_new_ones_resume_from_the_checkpoint() -> None:
    status = {"restarts": 1, "checkpoint": {"latest": {"step": 300, "path": "/c/300"},
                                            "latestVerified": {"step": 200, "path": "/c/200"}}}
    result = plan(job(status), [pod(0, restart=0, phase="Failed", code=137)], NEURON)
    assert result.delete == ["j-r0-w0"]
    names = [p["metadata"]["name"] for p in result.create]
    assert names == ["j-r1-w0", "j-r1-w1"]
    env = {e["name"]: e["value"] for e in result.create[0]["spec"]["containers"][0]["env"]}
    assert env["GOODPUT_RESUME_FROM"] == "/c/200" and env["GOODPUT_RESTART"] == "1"


def test_suspend_stops_every_worker() -> None:
    result = plan(job(PLACED, suspend=True), [pod(0), pod(1)], NEURON)
    assert result.phase == "Suspended" and result.delete == ["j-r0-w0", "j-r0-w1"]
    assert result.create == []


def test_terminal_jobs_stay_terminal() -> None:
    result = plan(job({"phase": "Succeeded", "message": "done"}), [], NEURON)
    assert result.phase == "Succeeded" and not result.create
