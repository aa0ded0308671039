"""The TrainingJob reconcile decision, state by state."""

from __future__ import annotations

from typing import Any

import pytest

from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import Attempt, Lost, Seen, attempt
from goodput_operator.resources import pods
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric

pytestmark = pytest.mark.unit
NEURON = Fabric("aws.amazon.com/neuron", 16)  # what the pods hold


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


def plan(body: dict[str, Any], pods: list[dict[str, Any]], fabric: Fabric,
         lost: dict[str, Lost] | None = None, **seen: Any) -> Attempt:
    """The attempt as the job's pass decides it: its spec parsed (by its view), what the
    pass saw."""
    return attempt(body, TrainingJobSpec.model_validate(body["spec"]),
                   Seen(pods, fabric, lost or {}, **seen))


PLACED = {"placement": {"slices": [{"firstRank": 0, "domain": "d", "nodes": "n[0-1]"}]}}


def created(result: Attempt) -> list[dict[str, Any]]:
    """The bodies of the pods the attempt lacks (what the pass builds once placed)."""
    return result.missing.bodies() if result.missing is not None else []


def test_a_new_job_says_which_workers_it_lacks_builds_none_and_asks_for_a_placement() -> None:
    result = plan(job(), [], NEURON)
    assert result.create == [] and result.missing is not None
    assert (len(result.missing), result.missing.workers) == (2, (0, 1))
    assert [p["metadata"]["name"] for p in created(result)] == ["j-r0-w0", "j-r0-w1"]
    assert all(pods.is_gated(p) for p in created(result))
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
    assert created(result) == []


def test_running_when_every_worker_is_ready() -> None:
    result = plan(job(PLACED), [pod(i, phase="Running", gated=False, ready=True)
                                for i in range(2)], NEURON)
    assert result.phase == "Running" and result.ready == 2
    assert ("Running", True, "AllWorkersRunning", "all 2 workers running") in result.conditions


def test_succeeded_when_every_worker_succeeded() -> None:
    result = plan(job(PLACED), [pod(i, phase="Succeeded", gated=False) for i in range(2)],
                  NEURON)
    assert result.phase == "Succeeded" and result.message == "all 2 workers succeeded"


NOW = 1_800_000_000.0


def running(restart: int = 0) -> list[dict[str, Any]]:
    return [pod(i, restart, phase="Running", gated=False, ready=True) for i in range(2)]


def failed_worker(code: int, restart: int = 0) -> list[dict[str, Any]]:
    worker = pod(1, restart, phase="Failed", gated=False, code=code)
    worker["spec"]["nodeName"] = "n1"
    return [pod(0, restart, phase="Running", gated=False, ready=True), worker]


@pytest.mark.parametrize(
    ("rules", "code", "phase", "fragment", "restart_now", "probe_first"),
    [
        ([{"codes": [3], "action": "fail"}], 3, "Failed",
         "worker w1 (j-r0-w1) exited with code 3; failurePolicy.exitCodes says fail",
         False, []),
        ([], 137, "Recovering", "ApplicationError: restart 1 in 10s (backoff)", False, []),
        ([{"codes": [137], "action": "restart"}], 137, "Recovering", "restart 1 in 10s",
         False, []),
        ([{"codes": [74], "action": "probe"}], 74, "Recovering",
         "InfrastructureError: restarting the gang (restart 1)", True, ["n1"]),
    ],
)
def test_exit_codes_follow_the_failure_policy(rules: list, code: int, phase: str,
                                              fragment: str, restart_now: bool,
                                              probe_first: list[str]) -> None:
    result = plan(job(PLACED, failurePolicy={"exitCodes": rules}), failed_worker(code), NEURON,
                  now=NOW)
    assert result.phase == phase
    assert fragment in result.message
    assert result.restart is restart_now and result.probe_first == probe_first
    if phase == "Failed":
        assert result.delete == ["j-r0-w0"]      # the still-running worker is stopped
    else:                                        # nothing stops before the restart
        assert result.delete == (["j-r0-w0", "j-r0-w1"] if restart_now else [])
        assert result.status["incidents"][-1]["restart"] == 1


def test_an_application_error_restarts_on_the_same_nodes_once_the_backoff_is_over() -> None:
    opened = plan(job(PLACED), failed_worker(1), NEURON, now=NOW)
    assert opened.wake_at == NOW + 10
    later = plan(job({**PLACED, **opened.status}), failed_worker(1), NEURON, now=NOW + 10)
    assert later.restart and later.failed_nodes == [] and later.probe_first == []
    assert later.delete == ["j-r0-w0", "j-r0-w1"]


def test_consecutive_application_errors_double_the_backoff() -> None:
    earlier = [{"restart": 1, "cause": "ApplicationError", "runningAt": "2027-01-01T00:00:00Z"},
               {"restart": 2, "cause": "ApplicationError", "runningAt": "2027-01-01T00:01:00Z"}]
    status = {**PLACED, "restarts": 2, "incidents": earlier}
    result = plan(job(status), failed_worker(1, restart=2), NEURON, now=NOW)
    assert result.wake_at == NOW + 40            # 10 s, 20 s, 40 s


def test_a_lost_node_restarts_the_gang_at_once_and_names_the_node_to_replace() -> None:
    lost = {"n1": Lost("quarantined (NodeNotReady: Ready=False)", NOW - 6)}
    result = plan(job({**PLACED, "goodput": {"since": "2027-01-15T08:00:00Z"}}), running(),
                  NEURON, lost, now=NOW)
    assert result.restart and result.failed_nodes == ["n1"]
    assert result.delete == ["j-r0-w0", "j-r0-w1"]
    incident = result.status["incidents"][-1]
    assert incident["cause"] == "NodeFailure" and incident["nodes"] == ["n1"]
    assert incident["detectionSeconds"] == 6
    assert ("Warning", "Interrupted", "node n1 lost: quarantined (NodeNotReady: Ready=False)") \
        in result.events


def test_a_suspect_node_is_probed_before_the_restarted_gang_starts_on_it() -> None:
    """An exit code never quarantines a node: the gang restarts on the same nodes at once,
    its workers held until the suspect node passes a probe newer than the placement."""
    rules = {"exitCodes": [{"codes": [74], "action": "probe"}]}
    opened = plan(job(PLACED, failurePolicy=rules), failed_worker(74), NEURON, now=NOW)
    assert opened.restart and opened.failed_nodes == [] and opened.probe_first == ["n1"]
    placed = {"placement": {**PLACED["placement"], "placedAt": "2027-01-15T08:00:00Z",
                            "probeFirst": ["n1"]}, "restarts": 1,
              "incidents": opened.status["incidents"]}
    waiting = plan(job(placed, failurePolicy=rules), [pod(0, 1), pod(1, 1)], NEURON,
                   now=NOW + 1)
    assert waiting.probe == ["n1"] and waiting.hold and waiting.pin == []
    assert "probing 1 placed node(s) before the start: n1" in waiting.message
    cleared = plan(job(placed, failurePolicy=rules), [pod(0, 1), pod(1, 1)], NEURON,
                   now=NOW + 30, probed={"n1": NOW + 20})
    assert cleared.probe == [] and [p for p, _, _ in cleared.pin] == ["j-r1-w0", "j-r1-w1"]


def test_a_job_asks_for_at_most_three_node_probes_then_restarts_in_place() -> None:
    rules = {"exitCodes": [{"codes": [74], "action": "probe"}]}
    earlier = [{"restart": i + 1, "cause": "InfrastructureError", "nodes": [f"n{i}"],
                "runningAt": "2027-01-01T00:00:00Z"} for i in range(3)]
    status = {**PLACED, "restarts": 3, "incidents": earlier}
    result = plan(job(status, failurePolicy=rules), failed_worker(74, restart=3), NEURON,
                  now=NOW)
    assert result.probe_first == [] and not result.restart
    assert result.status["incidents"][-1]["cause"] == "ApplicationError"
    assert "asked for its 3 node probes already" in result.status["incidents"][-1]["message"]


NODE_LOST = {"n0": Lost("NotReady", 0.0, "NodeNotReady")}
POLICY = {"maxRestarts": 2, "maxInfrastructureRestarts": 3}


@pytest.mark.parametrize(("case", "used", "lost", "failed", "budgets"), [
    ("an application error pays from maxRestarts", {"application": 1}, {}, None,
     {"application": 2}),
    ("the application budget used up fails the job, naming the cause", {"application": 2},
     {}, "the application restart budget of 2 is used up (ApplicationError)", None),
    ("a node failure leaves the application budget alone", {"application": 2}, NODE_LOST,
     None, {"application": 2, "infrastructure": 1}),
    ("the infrastructure budget used up fails the job", {"infrastructure": 3}, NODE_LOST,
     "the infrastructure restart budget of 3 is used up (NodeFailure)", None),
])
def test_each_cause_pays_from_its_own_restart_budget(
        case: str, used: dict[str, int], lost: dict[str, Lost], failed: str | None,
        budgets: dict[str, int] | None) -> None:
    """Platform faults do not use up the user's maxRestarts (JobSet and HyperPod separate
    them too); each budget fails the job only when it is its own that runs out."""
    restarts = sum(used.values())
    pods = [pod(0, restart=restarts, phase="Running" if lost else "Failed", gated=False,
                ready=bool(lost), code=None if lost else 1),
            pod(1, restart=restarts, phase="Running", gated=False, ready=True)]
    status = {**PLACED, "restarts": restarts, "restartsByBudget": used}
    result = plan(job(status, failurePolicy=POLICY), pods, NEURON, lost=lost)
    if failed:
        assert (result.phase, failed in result.message) == ("Failed", True), case
    else:
        assert result.phase == "Recovering", case
        assert result.status["restartsByBudget"] == budgets, case


def test_the_new_attempt_resumes_from_the_checkpoint_and_waits_for_the_old_pods() -> None:
    status = {**PLACED, "restarts": 1,
              "checkpoint": {"latest": {"step": 300, "path": "/c/300"},
                             "latestVerified": {"step": 200, "path": "/c/200"}}}
    result = plan(job(status), [pod(0, restart=0, phase="Running", gated=False)], NEURON)
    assert result.delete == ["j-r0-w0"] and result.hold and result.pin == []
    names = [p["metadata"]["name"] for p in created(result)]
    assert names == ["j-r1-w0", "j-r1-w1"]
    env = {e["name"]: e["value"] for e in created(result)[0]["spec"]["containers"][0]["env"]}
    assert env["GOODPUT_RESUME_FROM"] == "/c/200" and env["GOODPUT_RESTART"] == "1"
    assert env["GOODPUT_RESUME_STEP"] == "200"
    gone = plan(job(status), [pod(0, restart=1), pod(1, restart=1)], NEURON)
    assert not gone.hold and [p[0] for p in gone.pin] == ["j-r1-w0", "j-r1-w1"]


def test_running_again_closes_the_incident_with_its_costs() -> None:
    incident = {"restart": 1, "cause": "NodeFailure", "failedAt": "2027-01-15T08:00:00Z",
                "detectedAt": "2027-01-15T08:00:06Z", "detectionSeconds": 6.0,
                "replacedAt": "2027-01-15T08:00:06Z", "replacementSeconds": 0.0,
                "lostWorkSeconds": 100.0}
    status = {**PLACED, "restarts": 1, "incidents": [incident], "phase": "Recovering",
              "goodput": {"productiveSeconds": 900}}
    at = 1_800_000_000.0 + 0  # 2027-01-15T08:00:00Z
    result = plan(job(status), running(restart=1), NEURON, now=at + 9)
    assert result.phase == "Running"
    closed = result.status["incidents"][-1]
    assert closed["restartSeconds"] == 3 and closed["runningAt"] == "2027-01-15T08:00:09.000Z"
    goodput = result.status["goodput"]
    assert goodput["lostSeconds"] == {"detection": 6, "replacement": 0, "restart": 3,
                                      "lostWork": 100}
    assert goodput["lostByCause"] == {"NodeFailure": 109}
    assert goodput["since"] == "2027-01-15T08:00:09.000Z"
    assert result.events[0][1] == "Recovered"


def test_suspend_stops_every_worker() -> None:
    result = plan(job(PLACED, suspend=True), [pod(0), pod(1)], NEURON)
    assert result.phase == "Suspended" and result.delete == ["j-r0-w0", "j-r0-w1"]
    assert created(result) == []


def test_terminal_jobs_stay_terminal() -> None:
    result = plan(job({"phase": "Succeeded", "message": "done"}), [], NEURON)
    assert result.phase == "Succeeded" and not created(result)


def test_a_gang_is_not_restarted_while_another_of_its_nodes_awaits_its_verdict() -> None:
    lost = {"n1": Lost("quarantined", NOW - 5)}
    waiting = plan(job(PLACED), running(), NEURON, lost, now=NOW, suspects={"n0"})
    assert not waiting.restart and "verdict on node(s) n0" in waiting.message
    both = {**lost, "n0": Lost("quarantined", NOW - 4.9)}
    later = plan(job({**PLACED, **waiting.status}), running(), NEURON, both, now=NOW + 0.1,
                 suspects={"n0"})
    assert later.restart and later.failed_nodes == ["n0", "n1"]


def test_probe_on_start_holds_the_workers_until_every_placed_node_passed_a_probe() -> None:
    placed = {"placement": {**PLACED["placement"], "placedAt": "2027-01-15T08:00:00.000Z"}}
    spec = {"sdc": {"probeOnStart": True}}
    waiting = plan(job(placed, **spec), [pod(0), pod(1)], NEURON, now=NOW + 5,
                   probed={"n0": NOW + 1, "n1": NOW - 100})       # n1's probe is too old
    assert waiting.probe == ["n1"] and waiting.pin == [] and waiting.hold
    assert "probing 1 placed node(s)" in waiting.message
    ready = plan(job(placed, **spec), [pod(0), pod(1)], NEURON, now=NOW + 9,
                 probed={"n0": NOW + 1, "n1": NOW + 8})
    assert ready.probe == [] and [p[0] for p in ready.pin] == ["j-r0-w0", "j-r0-w1"]
    off = plan(job(placed), [pod(0), pod(1)], NEURON, now=NOW + 5)
    assert off.probe == [] and len(off.pin) == 2


def test_after_an_elastic_shrink_the_new_workers_learn_the_smaller_world() -> None:
    """A gang shrunk from 4 to 2 workers: the placement has 2 ranks, and the pods of the
    new attempt must not rendezvous for the 4 the spec asked for."""
    shrunk = job({**PLACED, "restarts": 1}, workers=4, elastic={"minWorkers": 2},
                 launcher={"type": "torchrun", "procsPerWorker": 2})
    result = plan(shrunk, [], NEURON)
    assert [p["metadata"]["name"] for p in created(result)] == ["j-r1-w0", "j-r1-w1"]
    env = {e["name"]: e["value"] for e in created(result)[1]["spec"]["containers"][0]["env"]}
    assert (env["NNODES"], env["WORLD_SIZE"], env["GOODPUT_WORKERS"]) == ("2", "4", "2")
