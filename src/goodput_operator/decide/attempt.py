"""A TrainingJob's current attempt: observed job + pods + lost nodes -> what the attempt
needs (pods to create, pin, delete; an incident to open; a restart) and its phase.
`decide.job` wraps it with placement and the status. Every pass recomputes everything, so a
lost event or an operator restart loses nothing.

Attempts: a job's pods belong to attempt `status.restarts`; pods of older attempts are
deleted, and the new attempt's pods stay gated until they are gone (a pod pinned to a node
still held by its predecessor would wait in the scheduler's backoff). A gang has pods only
once it is placed (decide.creates): an attempt says which are missing, not their bodies.
A placement in the status belongs to the current attempt, so after an operator restart
mid-launch the remaining pods are created (or pinned) from it and none is created twice.

Incidents: a failure of the current attempt (a rank's node lost, a worker failed) opens an
incident for the next attempt; the restart happens once its backoff has passed, and a node
an exit code made suspect is probed before the gang starts on it again (a bad probe
quarantines it and the rank moves); the incident closes when every worker runs again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import times
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.creates import Missing, missing
from goodput_operator.decide.types import ConditionUpdate, Event, Refusal
from goodput_operator.health import badput
from goodput_operator.health.failures import Classified, classify
from goodput_operator.health.hang import StepClock, deadline, hung, judged
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import (
    FINISHED,
    attempt_of,
    companion_key,
    index_of,
    is_active,
    is_gated,
    is_ready,
    pod_set_of,
)
from goodput_operator.topology.record import companions_of, ranks_of

Obj = dict[str, Any]
TERMINAL = FINISHED  # a job ends as its pods do


@dataclass(frozen=True)
class Lost:
    """A node the job may no longer use (quarantined or gone): why, and since when."""

    evidence: str
    since: float
    reason: str = ""  # the quarantine's reason (SilentDataCorruption, NodeNotReady, ...)


@dataclass
class Attempt:
    """What the current attempt needs this pass, and where it stands."""

    phase: str
    message: str
    create: list[Obj] = field(default_factory=list)  # built by decide.creates.allot
    missing: Missing | None = None  # the pods still to create, not yet built
    delete: list[str] = field(default_factory=list)  # pod names
    pin: list[tuple[str, str, str | None]] = field(default_factory=list)  # pod, node, domain
    needs_placement: bool = False
    hold: bool = False  # older attempt's pods still exist: create gated, pin nothing yet
    restart: bool = False  # start attempt restarts + 1 now
    failed_nodes: list[str] = field(default_factory=list)  # to replace in that restart
    probe: list[str] = field(default_factory=list)  # nodes to probe before the start
    probe_first: list[str] = field(default_factory=list)  # suspects the restart probes first
    status: Obj = field(default_factory=dict)  # incidents and goodput to write
    events: list[Event] = field(default_factory=list)
    wake_at: float | None = None
    conditions: list[ConditionUpdate] = field(default_factory=list)
    workers: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    companions_ready: bool = True  # every companion pod (spec.podSets) runs


def books_of(status: Obj) -> Obj:
    """The part of the status the badput accounting reads and writes."""
    return {"incidents": status.get("incidents") or [], "goodput": status.get("goodput") or {},
            "checkpoint": status.get("checkpoint") or {}, "sdc": status.get("sdc") or {},
            "restartsByBudget": status.get("restartsByBudget") or {}}


def attempt(job: Obj, pods: list[Obj], fabric: Fabric, lost: Mapping[str, Lost] | None = None,
            now: float = 0.0, report_url: str = "", suspects: Collection[str] = (),
            probed: Mapping[str, float] | None = None, spec: TrainingJobSpec | None = None,
            steps: StepClock | None = None) -> Attempt:
    """SUSPECTS: nodes that are failing but not yet judged (NotReady within the grace
    period): a gang is not restarted onto them, the verdict is only seconds away.
    PROBED: when each node last passed the SDC probe (for sdc.probeOnStart). SPEC: the
    job's spec already parsed, when the caller has it (one parse per job per pass).
    STEPS: the newest step the job's workers reported, and when (hang detection)."""
    spec = spec or TrainingJobSpec.model_validate(job["spec"])
    status = job.get("status") or {}
    lost = lost or {}
    phase = status.get("phase")
    restart = int(status.get("restarts", 0))
    books = books_of(status)
    if phase in TERMINAL:
        return Attempt(phase, status.get("message", ""),
                       delete=[p["metadata"]["name"] for p in pods if is_active(p)])
    if spec.suspend:
        return Attempt("Suspended", "suspended: workers stopped; checkpoints kept",
                       delete=[p["metadata"]["name"] for p in pods],
                       status=_goodput_only(badput.stopped(books, now)),
                       conditions=[ConditionUpdate("Suspended", True, "Suspended",
                                                   "spec.suspend is true")])

    placement = status.get("placement") or {}
    spots = Spots(placement)
    ranks = spots.ranks
    current: dict[int, Obj] = {}  # this attempt's workers by rank
    companions: dict[tuple[str, int], Obj] = {}  # and its companions by (set, index)
    stale: list[str] = []  # pods of an earlier attempt
    for p in pods:  # one look at each pod's labels: a pass sees every worker of every job
        if attempt_of(p) != restart:
            stale.append(p["metadata"]["name"])
        elif pod_set_of(p):
            companions[companion_key(p)] = p
        else:
            current[index_of(p)] = p
    held = spots.nodes()  # every node the placed gang holds: its ranks' and companions'
    resumed = [ConditionUpdate("Suspended", False, "Resumed", "")] if phase == "Suspended" else []
    result = Attempt("Pending", "", delete=stale, hold=bool(stale),
                     workers=len(ranks) or spec.workers, conditions=resumed)
    result.succeeded = sum(1 for p in current.values()
                           if p.get("status", {}).get("phase") == "Succeeded")
    result.ready = sum(1 for p in current.values() if is_ready(p))
    failed = [(i, p) for i, p in sorted(current.items())
              if p.get("status", {}).get("phase") == "Failed"]
    failed += [(-1, p) for _, p in sorted(companions.items())
               if p.get("status", {}).get("phase") == "Failed"]  # a companion fails the gang
    result.failed = len(failed)
    result.companions_ready = all(is_ready(p) or p.get("status", {}).get("phase") == "Succeeded"
                                  for p in companions.values()) and \
        len(companions) == sum(s.replicas for s in spec.pod_sets)

    incident = badput.current_incident(books)
    hang = _hang(result, spec, steps, restart, now)
    if incident is None or incident["restart"] != restart + 1:
        opened = _detect(result, spec, books, held, failed, lost, restart, now, hang)
        if result.phase == "Failed":
            result.delete = [p["metadata"]["name"] for p in pods if is_active(p)]
            result.status = _goodput_only(badput.stopped(books, now))
            return result
        if opened is not None:
            books, incident = opened, badput.current_incident(opened)
    if incident is not None and incident["restart"] == restart + 1:
        return _recover(result, spec, books, incident, pods, held, lost, suspects, restart,
                        now)

    if current and result.succeeded == result.workers:
        result.status = _goodput_only(badput.stopped(books, now))
        return _finish(result, "Succeeded", f"all {result.workers} workers succeeded",
                       "AllWorkersSucceeded", [])
    resume = badput.resume_point(books["checkpoint"], strict_checkpoints(spec))
    result.missing = missing(job, spec, list(current), list(companions), restart, fabric,
                             resume, report_url, result.workers)
    recovering = incident is not None and incident["restart"] == restart
    if not ranks:
        # Place as soon as no worker runs ungated: a gang that is not placed has no pods
        # (decide.creates), and one whose pods exist gated (an operator from before that)
        # is placed as it is. Missing pods are created pinned once the placement is made.
        result.needs_placement = not stale and all(
            is_gated(p) for p in (*current.values(), *companions.values()))
        result.phase = "Recovering" if recovering else "Pending"
        result.message = "waiting for a placement"
        return result
    unprobed = _unprobed(spec, placement, ranks, current, probed or {})
    if unprobed:
        result.hold, result.probe = True, unprobed
        result.phase = "Recovering" if recovering else "Placing"
        result.message = (f"probing {len(unprobed)} placed node(s) before the start: "
                          f"{', '.join(unprobed[:8])}")
        return result
    if not stale:
        result.pin = pins(spots, pods, restart)
    return _progress(result, books, recovering, restart, now)


def pins(spots: Spots, pods: list[Obj], restart: int) -> list[tuple[str, str, str | None]]:
    """The gated pods of attempt RESTART with where SPOTS (a placement) puts them: a worker
    on its rank's node, a companion on its recorded node."""
    found = []
    for pod in pods:
        if not is_gated(pod) or attempt_of(pod) != restart:
            continue
        spot = spots.of(pod)
        if spot is not None:
            found.append((pod["metadata"]["name"], spot["node"], spot.get("domain")))
    return found


class Spots:
    """Where a recorded placement puts each pod of the gang: a worker on its rank's node,
    a companion on its recorded node ({node, domain}; None: nowhere yet)."""

    def __init__(self, placement: Obj | None) -> None:
        self.ranks = {r["rank"]: r for r in ranks_of(placement)}
        self.companions = companions_of(placement)

    def of(self, pod: Obj) -> Obj | None:
        if pod_set_of(pod):
            return self.companions.get(companion_key(pod))
        return self.ranks.get(index_of(pod))

    def nodes(self) -> list[str]:
        """Every node the placed gang holds: its ranks' and its companions'."""
        return [*(r["node"] for r in self.ranks.values()),
                *(c["node"] for c in self.companions.values())]


def _progress(result: Attempt, books: Obj, recovering: bool, restart: int, now: float
              ) -> Attempt:
    """A placed attempt: Running once every worker is ready (closing the incident it
    recovers from), else Placing or Recovering with the count."""
    if result.ready == result.workers and result.companions_ready:
        result.phase = "Running"
        result.message = f"all {result.workers} workers running"
        result.conditions.append(ConditionUpdate("Running", True, "AllWorkersRunning",
                                                 result.message))
        if recovering or not books["goodput"].get("since"):
            result.status = _incidents_only(badput.running_again(books, now))
            if recovering:
                done = result.status["incidents"][-1]
                result.events.append(Event("Normal", "Recovered", _recovered(done)))
    elif recovering:
        result.phase = "Recovering"
        result.message = f"restart {restart}: {result.ready}/{result.workers} workers running"
    else:
        result.phase = "Placing"
        result.message = f"placed; {result.ready}/{result.workers} workers running"
    return result


def _unprobed(spec: TrainingJobSpec, placement: Obj, ranks: dict[int, Obj],
              current: dict[int, Obj], probed: Mapping[str, float]) -> list[str]:
    """Placed nodes still to pass the probe before a start: every node with
    sdc.probeOnStart, else the nodes an exit code made suspect (placement.probeFirst);
    only while no worker of this attempt has been let go."""
    if any(not is_gated(p) for p in current.values()):
        return []
    nodes = {r["node"] for r in ranks.values()}
    if not spec.sdc.probe_on_start:
        nodes &= set(placement.get("probeFirst") or [])
    since = times.parse(placement.get("placedAt")) or 0.0
    return sorted(n for n in nodes if probed.get(n, -1.0) < since)


def _hang(result: Attempt, spec: TrainingJobSpec, steps: StepClock | None, restart: int,
          now: float) -> tuple[str, float] | None:
    """Whether the attempt, every worker running, is hung (why, and its last step's
    time); else when it would be (a wake), and the HangDetection condition."""
    policy = spec.failure_policy.hang
    if result.ready != result.workers or result.workers == 0:
        return None  # judged (and said) only while every worker runs
    if not policy.enabled:
        result.conditions.append(ConditionUpdate("HangDetection", False, "Disabled",
                                                 "failurePolicy.hang.enabled is false"))
        return None
    reported = judged(steps, restart)
    result.conditions.append(ConditionUpdate(
        "HangDetection", reported, "InForce" if reported else "NoStepReports",
        f"no new step for max({policy.step_time_multiple} x the median step time, "
        f"{policy.min_seconds}s) restarts the gang" if reported else
        "no step reported in this attempt: hangs are not detected (workers report steps "
        "with goodput_operator.sdk.report_step)"))
    if not reported:
        return None
    why = hung(steps, restart, policy.step_time_multiple, policy.min_seconds, now)
    if why is None:
        result.wake_at = deadline(steps, restart, policy.step_time_multiple,
                                  policy.min_seconds)
        return None
    assert steps is not None
    return why, steps.at


def _detect(result: Attempt, spec: TrainingJobSpec, books: Obj, held: list[str],
            failed: list[tuple[int, Obj]], lost: Mapping[str, Lost], restart: int,
            now: float, hang: tuple[str, float] | None = None) -> Obj | None:
    """Open an incident when the current attempt was hit (a node, a worker, a hang);
    None when it was not."""
    down = sorted({node for node in held if node in lost})
    infra: list[str] = []
    application: list[str] = []
    blamed: dict[str, str] = {}
    failed_at: list[float] = [lost[n].since for n in down]
    suspected = sum(len(i.get("nodes") or []) for i in books["incidents"]
                    if i.get("cause") == "InfrastructureError")
    for _, pod in failed:
        node = pod.get("spec", {}).get("nodeName")
        verdict = classify(pod, spec.failure_policy.exit_codes, node in lost)
        if verdict.blame_node and suspected + len(blamed) >= MAX_SUSPECTS:
            verdict = Classified("application", False, f"{verdict.detail}; the job has "
                                 f"asked for its {MAX_SUSPECTS} node probes already: "
                                 "restarting in place", verdict.finished_at)
        if verdict.kind == "ignore":
            result.succeeded += 1
            continue
        if verdict.kind == "fail":
            _finish(result, "Failed", verdict.detail, "WorkerFailed", [])
            return None
        finished = times.parse(verdict.finished_at)
        if finished is not None:
            failed_at.append(finished)
        if verdict.kind == "application":
            application.append(verdict.detail)
        else:
            infra.append(verdict.detail)
            if verdict.blame_node and node:
                blamed[node] = verdict.detail
    if not (down or infra or application or hang):
        return None
    cause, message = _cause(books, spec, down, lost, infra, application)
    if hang is not None and not (down or infra or application):
        cause, message = "Hang", hang[0]
        failed_at.append(hang[1])  # failed at its last step; detected now
    paid = charged(books, cause, spec)
    if paid is None:
        budget, limit = budget_of(cause, spec)
        _finish(result, "Failed", f"{message}; the {budget} restart budget of {limit} is used "
                f"up ({cause})", "RestartBudgetExhausted", [])
        return None
    books = paid
    restart_at = backoff_until(books, spec, now) if cause == "ApplicationError" else None
    if badput.current_incident(books) is not None:  # hit again while recovering
        books = badput.running_again(books, min(failed_at or [now]))
    result.events.append(Event("Warning", "Interrupted", message))
    return badput.open_incident(books, restart + 1, cause, message, sorted({*down, *blamed}),
                                min(failed_at or [now]), now, restart_at, strict_checkpoints(spec))


def charged(books: Obj, cause: str, spec: TrainingJobSpec) -> Obj | None:
    """BOOKS with an incident of CAUSE paid from its restart budget; None when that budget
    is used up (the job fails)."""
    budget, limit = budget_of(cause, spec)
    used = dict(books.get("restartsByBudget") or {})
    if used.get(budget, 0) >= limit:
        return None
    used[budget] = used.get(budget, 0) + 1
    return {**books, "restartsByBudget": used}


def budget_of(cause: str, spec: TrainingJobSpec) -> tuple[str, int]:
    """Which restart budget an incident of CAUSE pays from, and its size: the
    application's own failures from maxRestarts; the platform's faults (nodes lost,
    quarantined or refusing the workers, corruption, infrastructure exit codes) from
    maxInfrastructureRestarts."""
    if cause in ("ApplicationError", "Hang"):  # a hang blames no node: the job's own
        return "application", spec.failure_policy.max_restarts
    return "infrastructure", spec.failure_policy.max_infrastructure_restarts


def _cause(books: Obj, spec: TrainingJobSpec, down: list[str], lost: Mapping[str, Lost],
           infra: list[str], application: list[str]) -> tuple[str, str]:
    """The incident's cause and message: lost nodes first, then infrastructure errors."""
    if down:
        sdc = any(lost[n].reason == "SilentDataCorruption" for n in down)
        if all(lost[n].reason == "Unschedulable" for n in down):
            return "Unschedulable", "; ".join(f"node {n}: {lost[n].evidence}" for n in down)
        message = "; ".join(f"node {n} lost: {lost[n].evidence}" for n in down)
        if sdc:
            return "SilentDataCorruption", message + _rollback(books, spec)
        return "NodeFailure", message
    if infra:
        return "InfrastructureError", "; ".join(infra)
    return "ApplicationError", "; ".join(application)


def backoff_until(books: Obj, spec: TrainingJobSpec, now: float) -> float | None:
    """When an application error's restart may happen: the backoff grows with the
    streak of application errors in a row."""
    streak = 1
    for earlier in reversed(books["incidents"]):
        if earlier.get("cause") != "ApplicationError":
            break
        streak += 1
    backoff = spec.failure_policy.backoff
    delay = badput.backoff_seconds(backoff.initial_seconds, backoff.max_seconds, streak)
    return now + delay if delay > 0 else None


def strict_checkpoints(spec: TrainingJobSpec) -> bool:
    """Resume only from checkpoints the replicas' votes verified."""
    return spec.checkpoint.verify and spec.sdc.cross_replica_check


def _rollback(books: Obj, spec: TrainingJobSpec) -> str:
    """Why the restart resumes from the checkpoint it does, after corruption."""
    resume = badput.resume_point(books["checkpoint"], strict_checkpoints(spec))
    latest = books["checkpoint"].get("latest") or {}
    diverged = (books.get("sdc") or {}).get("divergedStep")
    where = f"step {resume['step']} ({resume.get('path')})" if resume else "the start"
    first = f" before the first divergent step {diverged}" if diverged is not None else ""
    newer = f"; not the latest, step {latest['step']}" if latest and resume != latest else ""
    return f"; rolling back to {where}, the newest verified checkpoint{first}{newer}"


def _recover(result: Attempt, spec: TrainingJobSpec, books: Obj, incident: Obj,
             pods: list[Obj], held: list[str], lost: Mapping[str, Lost],
             suspects: Collection[str], restart: int, now: float) -> Attempt:
    """The incident is open for the next attempt: wait out backoff and quarantine, then
    restart the gang (the controller finds the replacement placement)."""
    result.phase, result.status = "Recovering", _incidents_only(books)
    result.conditions.append(ConditionUpdate("Running", False, "Recovering",
                                             incident["message"]))
    restart_at = times.parse(incident.get("restartAt"))
    suspects_first = incident.get("cause") == "InfrastructureError"  # an exit code's
    unresolved = [n for n in incident.get("nodes") or [] if n not in lost] \
        if suspects_first else []
    pending = sorted({node for node in held if node in suspects and node not in lost})
    if restart_at is not None and now < restart_at:
        result.wake_at = restart_at
        result.message = (f"{incident['cause']}: restart {restart + 1} in "
                          f"{restart_at - now:.0f}s (backoff)")
    elif pending:  # failures arriving together are recovered from together
        result.message = (f"waiting for the verdict on node(s) {', '.join(pending)} "
                          "(failing, not yet judged: grace period or storm guard)")
    else:
        result.restart = True
        result.status["sdc"] = None  # the next attempt's votes start afresh
        result.failed_nodes = sorted({node for node in held if node in lost})
        result.probe_first = unresolved  # suspect, not lost: probed before the gang starts
        result.message = f"{incident['cause']}: restarting the gang (restart {restart + 1})"
        result.delete = [p["metadata"]["name"] for p in pods]
        result.events.append(Event("Warning", "Restarting", result.message))
    result.missing, result.pin = None, []
    return result


def _recovered(incident: Obj) -> str:
    return (f"restart {incident['restart']} running again after {incident['cause']}: "
            f"detection {incident.get('detectionSeconds', 0):.1f}s, replacement "
            f"{incident.get('replacementSeconds', 0):.1f}s, restart "
            f"{incident.get('restartSeconds', 0):.1f}s, lost work "
            f"{incident.get('lostWorkSeconds', 0):.1f}s")


def _incidents_only(books: Obj) -> Obj:
    return {"incidents": books["incidents"], "goodput": books["goodput"],
            "restartsByBudget": books.get("restartsByBudget") or None}


MAX_SUSPECTS = 3  # nodes a job's exit codes may have probed (then: application errors)
MAX_REFUSALS = 5  # refused creates in a row before the job fails and frees its capacity


def refuse(result: Attempt, refusal: Refusal, pods: list[Obj], books: Obj, now: float) -> None:
    """The API server refused to create the workers REFUSAL.times passes in a row: say so
    on a condition and retry with backoff; after MAX_REFUSALS, fail the job and give its
    capacity back. A refusal (an invalid pod, a PodSecurity denial) does not pass by
    waiting, and a gang that cannot start must not hold nodes others could use."""
    message = (f"the API server refused to create the workers ({refusal.times} time(s)): "
               f"{refusal.message}")
    if refusal.times >= MAX_REFUSALS:
        result.status = _goodput_only(badput.stopped(books, now))
        _finish(result, "Failed", message, "CreateRefused", pods)
        return
    result.message = message
    result.conditions.append(ConditionUpdate("WorkersCreated", False, "CreateRefused", message))
    retry = refusal.retry_at()
    if now < retry:  # the backoff runs: no creates until then, whatever wakes the pass
        result.missing = None
        result.wake_at = retry if result.wake_at is None else min(result.wake_at, retry)


def _goodput_only(books: Obj) -> Obj:
    return {"goodput": books["goodput"]}


def _finish(result: Attempt, phase: str, message: str, reason: str, pods: list[Obj]
            ) -> Attempt:
    result.phase, result.message = phase, message
    result.missing = None
    result.pin = []
    result.needs_placement = False
    result.delete = [p["metadata"]["name"] for p in pods if is_active(p)]
    result.conditions += [ConditionUpdate(phase, True, reason, message),
                          ConditionUpdate("Running", False, reason, message)]
    return result
