"""The pure half of the TrainingJob reconcile: observed job + pods -> what to do and the
status to write. The controller does the I/O (and the placement against the shared fleet
model) around it. Every pass recomputes everything, so a lost event or an operator
restart loses nothing.

Attempts: a job's pods belong to attempt `status.restarts`; pods of older attempts are
deleted. A placement in the status belongs to the current attempt (it is cleared when a
new attempt starts), so after a restart mid-launch the remaining gated pods are pinned
from it and no pod is created twice (pod names are deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.resources import trainingjob as build

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


@dataclass
class Plan:
    phase: str
    message: str
    create: list[Obj] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # pod names
    pin: list[tuple[str, str, str | None]] = field(default_factory=list)  # pod, node, domain
    needs_placement: bool = False
    restart: bool = False  # start attempt restarts + 1 (placement cleared)
    conditions: list[tuple[str, bool, str, str]] = field(default_factory=list)
    ready: int = 0
    succeeded: int = 0
    failed: int = 0


def attempt_of(pod: Obj) -> int:
    return int(pod["metadata"].get("labels", {}).get(build.RESTART_LABEL, "-1"))


def index_of(pod: Obj) -> int:
    return int(pod["metadata"].get("labels", {}).get(build.RANK_LABEL, "-1"))


def exit_code(pod: Obj) -> int | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return int(terminated["exitCode"])
    return None


def is_ready(pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def action_for(spec: TrainingJobSpec, code: int | None) -> str:
    """The failure policy's action for an exit code (first matching rule; else restart)."""
    for rule in spec.failure_policy.exit_codes:
        if code is not None and code in rule.codes:
            return rule.action
    return "restart"


def plan(job: Obj, pods: list[Obj], resource: str) -> Plan:
    spec = TrainingJobSpec.model_validate(job["spec"])
    status = job.get("status") or {}
    phase = status.get("phase")
    restart = int(status.get("restarts", 0))
    if phase in TERMINAL:
        return Plan(phase, status.get("message", ""),
                    delete=[p["metadata"]["name"] for p in pods if _active(p)])
    if spec.suspend:
        return Plan("Suspended", "suspended: workers stopped; checkpoints kept",
                    delete=[p["metadata"]["name"] for p in pods],
                    conditions=[("Suspended", True, "Suspended", "spec.suspend is true")])

    current = {index_of(p): p for p in pods if attempt_of(p) == restart}
    stale = [p["metadata"]["name"] for p in pods if attempt_of(p) != restart]
    result = Plan("Pending", "", delete=stale,
                  conditions=[("Suspended", False, "Resumed", "")] if phase == "Suspended"
                  else [])
    resume = (status.get("checkpoint") or {}).get("latestVerified") or \
        (status.get("checkpoint") or {}).get("latest")
    resume_from = (resume or {}).get("path")
    for index in range(spec.workers):
        if index not in current:
            result.create.append(build.worker_pod(job, index, restart, resource, resume_from,
                                                  spec))

    failed = [(i, p) for i, p in sorted(current.items()) if p.get("status", {}).get("phase")
              == "Failed"]
    result.failed = len(failed)
    result.succeeded = sum(1 for p in current.values()
                           if p.get("status", {}).get("phase") == "Succeeded")
    result.ready = sum(1 for p in current.values() if is_ready(p))
    for index, pod in failed:
        code = exit_code(pod)
        action = action_for(spec, code)
        if action == "ignore":
            result.succeeded += 1
            continue
        where = f"worker w{index} ({pod['metadata']['name']}) exited with code {code}"
        if action == "fail":
            return _finish(result, "Failed", f"{where}; failurePolicy.exitCodes says fail",
                           "WorkerFailed", pods)
        if restart >= spec.failure_policy.max_restarts:
            return _finish(result, "Failed",
                           f"{where}; restart budget of {spec.failure_policy.max_restarts} "
                           "used up", "RestartBudgetExhausted", pods)
        result.phase, result.restart = "Recovering", True
        result.message = f"{where}; restarting the gang (restart {restart + 1})"
        result.delete = [p["metadata"]["name"] for p in pods]
        result.create = []
        result.conditions.append(("Running", False, "Restarting", result.message))
        return result
    if current and result.succeeded == spec.workers:
        return _finish(result, "Succeeded", f"all {spec.workers} workers succeeded",
                       "AllWorkersSucceeded", [])

    placement = status.get("placement") or {}
    ranks = {r["rank"]: r for r in placement.get("ranks") or []}
    if not ranks:
        # Place as soon as no worker runs ungated, whether or not every pod exists yet:
        # a job's turn (priority, then arrival) must not depend on how fast its pods were
        # created. Missing pods are created gated and pinned from the recorded placement.
        result.needs_placement = all(build.is_gated(p) for p in current.values())
        result.message = "waiting for a placement"
        return result
    for index, pod in current.items():
        if build.is_gated(pod) and index in ranks:
            result.pin.append((pod["metadata"]["name"], ranks[index]["node"],
                               ranks[index].get("domain")))
    if result.ready == spec.workers:
        result.phase = "Running"
        result.message = f"all {spec.workers} workers running"
        result.conditions.append(("Running", True, "AllWorkersRunning", result.message))
    else:
        result.phase = "Placing"
        result.message = (f"placed; {result.ready}/{spec.workers} workers running")
    return result


def _active(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") not in TERMINAL


def _finish(result: Plan, phase: str, message: str, reason: str, pods: list[Obj]) -> Plan:
    result.phase, result.message = phase, message
    result.create = []
    result.pin = []
    result.needs_placement = False
    result.delete = [p["metadata"]["name"] for p in pods if _active(p)]
    result.conditions += [(phase, True, reason, message), ("Running", False, reason, message)]
    return result
