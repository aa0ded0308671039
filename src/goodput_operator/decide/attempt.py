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
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Literal, NamedTuple

from goodput_operator import times
from goodput_operator.api.statuses import IncidentDict, RestartsByBudgetDict
from goodput_operator.api.trainingjob import IncidentCause, Phase, TrainingJobSpec
from goodput_operator.decide.creates import Missing, missing
from goodput_operator.decide.types import ConditionUpdate, Event, JobStatus, Refusal
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


@dataclass(frozen=True)
class Attempt:
    """What the current attempt needs this pass, and where it stands. Frozen: each step
    of the job's pass returns a changed copy (`dataclasses.replace`)."""

    phase: Phase
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
    status: JobStatus = field(default_factory=JobStatus)  # incidents and goodput to write
    events: tuple[Event, ...] = ()
    wake_at: float | None = None
    conditions: tuple[ConditionUpdate, ...] = ()
    workers: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    companions_ready: bool = True  # every companion pod (spec.podSets) runs

    def but(self, **changes: Any) -> Attempt:
        """This attempt with CHANGES (fields by name). As `dataclasses.replace`, at a
        tenth of its cost: a pass takes a dozen steps for each of thousands of jobs."""
        unknown = changes.keys() - ATTEMPT_FIELDS
        if unknown:
            raise TypeError(f"Attempt has no field(s) {sorted(unknown)}")
        found = object.__new__(Attempt)
        found.__dict__.update(self.__dict__)
        found.__dict__.update(changes)
        return found

    def said(self, *conditions: ConditionUpdate) -> Attempt:
        """This attempt with CONDITIONS added."""
        return self.but(conditions=(*self.conditions, *conditions))

    def told(self, *events: Event) -> Attempt:
        """This attempt with EVENTS added."""
        return self.but(events=(*self.events, *events))

    def woken_by(self, at: float | None) -> Attempt:
        """This attempt woken at AT too (the earlier wake wins)."""
        if at is None or (self.wake_at is not None and self.wake_at <= at):
            return self
        return self.but(wake_at=at)


ATTEMPT_FIELDS = frozenset(f.name for f in fields(Attempt))


@dataclass(frozen=True)
class Seen:
    """What the pass saw of a job beside the job itself: its pods and its group's fabric;
    the nodes it may no longer use (LOST) and those failing but not yet judged (SUSPECTS:
    NotReady within the grace period, a verdict seconds away, so no gang restarts onto
    them); when each node last passed the SDC probe (PROBED, for sdc.probeOnStart); the
    newest step its workers reported (STEPS, hang detection); where workers report; and
    the pass's clock."""

    pods: list[Obj]
    fabric: Fabric
    lost: Mapping[str, Lost] = field(default_factory=dict)
    now: float = 0.0
    report_url: str = ""
    suspects: Collection[str] = ()
    probed: Mapping[str, float] = field(default_factory=dict)
    steps: StepClock | None = None


@dataclass(frozen=True)
class Gang:
    """The current attempt's pods as one look at their labels sorts them (a pass sees
    every worker of every job): its workers by rank, its companions by (set, index), the
    pods of earlier attempts, and the placement they are held to."""

    restart: int
    spots: Spots
    current: dict[int, Obj]
    companions: dict[tuple[str, int], Obj]
    stale: list[str]

    @cached_property
    def failed(self) -> list[tuple[int, Obj]]:
        """Failed workers by rank, then failed companions (rank -1: a companion fails the
        gang)."""
        return [*((i, p) for i, p in sorted(self.current.items()) if _phase(p) == "Failed"),
                *((-1, p) for _, p in sorted(self.companions.items())
                  if _phase(p) == "Failed")]


def _phase(pod: Obj) -> str | None:
    found = pod.get("status", {}).get("phase")
    return str(found) if found is not None else None


def gang_of(pods: list[Obj], restart: int, placement: Obj | None) -> Gang:
    current: dict[int, Obj] = {}
    companions: dict[tuple[str, int], Obj] = {}
    stale: list[str] = []
    for p in pods:
        if attempt_of(p) != restart:
            stale.append(p["metadata"]["name"])
        elif pod_set_of(p):
            companions[companion_key(p)] = p
        else:
            current[index_of(p)] = p
    return Gang(restart, Spots(placement), current, companions, stale)


def books_of(status: Obj) -> JobStatus:
    """The part of the status the badput accounting reads and writes."""
    books: JobStatus = {
        "incidents": status.get("incidents") or [], "goodput": status.get("goodput") or {},
        "checkpoint": status.get("checkpoint") or {}, "sdc": status.get("sdc") or {},
        "restartsByBudget": status.get("restartsByBudget") or {}}
    return books


def _active(pods: list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods if is_active(p)]


def attempt(job: Obj, spec: TrainingJobSpec, seen: Seen) -> Attempt:
    """The current attempt of JOB (its SPEC parsed by its view) as SEEN this pass."""
    status = job.get("status") or {}
    books = books_of(status)
    if status.get("phase") in TERMINAL:
        return Attempt(status["phase"], status.get("message", ""), delete=_active(seen.pods))
    if spec.suspend:
        return Attempt("Suspended", "suspended: workers stopped; checkpoints kept",
                       delete=[p["metadata"]["name"] for p in seen.pods],
                       status=_goodput_only(badput.stopped(books, seen.now)),
                       conditions=(ConditionUpdate("Suspended", True, "Suspended",
                                                   "spec.suspend is true"),))
    gang = gang_of(seen.pods, int(status.get("restarts", 0)), status.get("placement"))
    result = _counted(spec, gang, status.get("phase"))
    incident = badput.current_incident(books)
    result, hang = _hang(result, spec, seen.steps, gang.restart, seen.now)
    if incident is None or incident["restart"] != gang.restart + 1:
        result, opened = _detect(result, spec, books, gang, seen, hang)
        if result.phase == "Failed":
            return result.but(delete=_active(seen.pods),
                           status=_goodput_only(badput.stopped(books, seen.now)))
        if opened is not None:
            books, incident = opened, badput.current_incident(opened)
    if incident is not None and incident["restart"] == gang.restart + 1:
        return _recover(result, books, incident, gang, seen)
    return _running(result, job, spec, books, gang, seen)


def _counted(spec: TrainingJobSpec, gang: Gang, phase: str | None) -> Attempt:
    """The attempt's counts: workers, ready, succeeded, failed, companions ready."""
    current = gang.current.values()
    resumed = (ConditionUpdate("Suspended", False, "Resumed", ""),) \
        if phase == "Suspended" else ()
    return Attempt(
        "Pending", "", delete=gang.stale, hold=bool(gang.stale),
        workers=len(gang.spots.ranks) or spec.workers, conditions=resumed,
        succeeded=sum(1 for p in current if _phase(p) == "Succeeded"),
        ready=sum(1 for p in current if is_ready(p)), failed=len(gang.failed),
        companions_ready=all(is_ready(p) or _phase(p) == "Succeeded"
                             for p in gang.companions.values())
        and len(gang.companions) == sum(s.replicas for s in spec.pod_sets))


def _running(result: Attempt, job: Obj, spec: TrainingJobSpec, books: JobStatus, gang: Gang,
             seen: Seen) -> Attempt:
    """No restart due: the attempt succeeded, waits for its placement or its probes, or
    is placed (pinned, running)."""
    if gang.current and result.succeeded == result.workers:
        return _finish(result.but(status=_goodput_only(badput.stopped(books, seen.now))),
                       "Succeeded", f"all {result.workers} workers succeeded",
                       "AllWorkersSucceeded", [])
    incident = badput.current_incident(books)
    resume = badput.resume_point(books["checkpoint"], strict_checkpoints(spec))
    recipe = Missing(job, spec, gang.restart, seen.fabric, resume, seen.report_url,
                     result.workers)
    result = result.but(missing=missing(recipe, list(gang.current),
                                             list(gang.companions)))
    recovering = incident is not None and incident["restart"] == gang.restart
    if not gang.spots.ranks:
        # Place as soon as no worker runs ungated: a gang that is not placed has no pods
        # (decide.creates), and one whose pods exist gated (an operator from before that)
        # is placed as it is. Missing pods are created pinned once the placement is made.
        return result.but(needs_placement=not gang.stale and all(
            is_gated(p) for p in (*gang.current.values(), *gang.companions.values())),
            phase="Recovering" if recovering else "Pending",
            message="waiting for a placement")
    placement = (job.get("status") or {}).get("placement") or {}
    unprobed = _unprobed(spec, placement, gang, seen.probed)
    if unprobed:
        return result.but(hold=True, probe=unprobed,
                       phase="Recovering" if recovering else "Placing",
                       message=f"probing {len(unprobed)} placed node(s) before the start: "
                               f"{', '.join(unprobed[:8])}")
    if not gang.stale:
        result = result.but(pin=pins(gang.spots, seen.pods, gang.restart))
    return _progress(result, books, recovering, gang.restart, seen.now)


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

    def __init__(self, placement: Mapping[str, Any] | None) -> None:
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


def _progress(result: Attempt, books: JobStatus, recovering: bool, restart: int, now: float
              ) -> Attempt:
    """A placed attempt: Running once every worker is ready (closing the incident it
    recovers from), else Placing or Recovering with the count."""
    if result.ready == result.workers and result.companions_ready:
        message = f"all {result.workers} workers running"
        result = result.but(phase="Running", message=message).said(
            ConditionUpdate("Running", True, "AllWorkersRunning", message))
        if recovering or not books["goodput"].get("since"):
            result = result.but(status=_incidents_only(badput.running_again(books, now)))
            if recovering:
                done = result.status["incidents"][-1]
                result = result.told(Event("Normal", "Recovered", _recovered(done)))
        return result
    if recovering:
        return result.but(phase="Recovering", message=f"restart {restart}: "
                       f"{result.ready}/{result.workers} workers running")
    return result.but(phase="Placing",
                   message=f"placed; {result.ready}/{result.workers} workers running")


def _unprobed(spec: TrainingJobSpec, placement: Obj, gang: Gang,
              probed: Mapping[str, float]) -> list[str]:
    """Placed nodes still to pass the probe before a start: every node with
    sdc.probeOnStart, else the nodes an exit code made suspect (placement.probeFirst);
    only while no worker of this attempt has been let go."""
    if any(not is_gated(p) for p in gang.current.values()):
        return []
    nodes = {r["node"] for r in gang.spots.ranks.values()}
    if not spec.sdc.probe_on_start:
        nodes &= set(placement.get("probeFirst") or [])
    since = times.parse(placement.get("placedAt")) or 0.0
    return sorted(n for n in nodes if probed.get(n, -1.0) < since)


def _hang(result: Attempt, spec: TrainingJobSpec, steps: StepClock | None, restart: int,
          now: float) -> tuple[Attempt, tuple[str, float] | None]:
    """Whether the attempt, every worker running, is hung (why, and its last step's
    time); else when it would be (a wake), and the HangDetection condition."""
    policy = spec.failure_policy.hang
    if result.ready != result.workers or result.workers == 0:
        return result, None  # judged (and said) only while every worker runs
    if not policy.enabled:
        return result.said(ConditionUpdate("HangDetection", False, "Disabled",
                                           "failurePolicy.hang.enabled is false")), None
    reported = judged(steps, restart)
    result = result.said(ConditionUpdate(
        "HangDetection", reported, "InForce" if reported else "NoStepReports",
        f"no new step for max({policy.step_time_multiple} x the median step time, "
        f"{policy.min_seconds}s) restarts the gang" if reported else
        "no step reported in this attempt: hangs are not detected (workers report steps "
        "with goodput_operator.sdk.report_step)"))
    if not reported:
        return result, None
    why = hung(steps, restart, policy.step_time_multiple, policy.min_seconds, now)
    if why is None:
        return result.but(wake_at=deadline(steps, restart, policy.step_time_multiple,
                                                policy.min_seconds)), None
    assert steps is not None
    return result, (why, steps.at)


@dataclass(frozen=True)
class Hits:
    """What hit the current attempt: its nodes lost, and its failed pods' verdicts."""

    down: list[str]  # nodes of the gang it may no longer use
    infra: list[str]  # infrastructure errors' details
    application: list[str]  # application errors' details
    blamed: dict[str, str]  # node -> the exit code's detail that made it suspect
    failed_at: list[float]  # when each hit came
    ignored: int = 0  # failed pods the exit-code rules ignore (counted as succeeded)
    fatal: str | None = None  # a rule's FailJob verdict: why


def hits_of(spec: TrainingJobSpec, books: JobStatus, gang: Gang, lost: Mapping[str, Lost]) -> Hits:
    """Each failed pod's verdict (health.failures), after MAX_SUSPECTS node probes asked
    for a job's exit codes only restart it in place."""
    down = sorted({node for node in gang.spots.nodes() if node in lost})
    hits = Hits(down, [], [], {}, [lost[n].since for n in down])
    suspected = sum(len(i.get("nodes") or []) for i in books["incidents"]
                    if i.get("cause") == "InfrastructureError")
    for _, pod in gang.failed:
        node = pod.get("spec", {}).get("nodeName")
        verdict = classify(pod, spec.failure_policy.exit_codes, node in lost)
        if verdict.blame_node and suspected + len(hits.blamed) >= MAX_SUSPECTS:
            verdict = Classified("application", False, f"{verdict.detail}; the job has "
                                 f"asked for its {MAX_SUSPECTS} node probes already: "
                                 "restarting in place", verdict.finished_at)
        if verdict.kind == "ignore":
            hits = replace(hits, ignored=hits.ignored + 1)
            continue
        if verdict.kind == "fail":
            return replace(hits, fatal=verdict.detail)
        finished = times.parse(verdict.finished_at)
        if finished is not None:
            hits.failed_at.append(finished)
        if verdict.kind == "application":
            hits.application.append(verdict.detail)
            continue
        hits.infra.append(verdict.detail)
        if verdict.blame_node and node:
            hits.blamed[node] = verdict.detail
    return hits


def _detect(result: Attempt, spec: TrainingJobSpec, books: JobStatus, gang: Gang, seen: Seen,
            hang: tuple[str, float] | None = None) -> tuple[Attempt, JobStatus | None]:
    """Open an incident when the current attempt was hit (a node, a worker, a hang): the
    attempt, and the books with the incident (None when it was not hit)."""
    hits = hits_of(spec, books, gang, seen.lost)
    if hits.ignored:
        result = result.but(succeeded=result.succeeded + hits.ignored)
    if hits.fatal is not None:
        return _finish(result, "Failed", hits.fatal, "WorkerFailed", []), None
    if not (hits.down or hits.infra or hits.application or hang):
        return result, None
    cause, message = _cause(books, spec, hits.down, seen.lost, hits.infra, hits.application)
    failed_at = list(hits.failed_at)
    if hang is not None and not (hits.down or hits.infra or hits.application):
        cause, message = "Hang", hang[0]
        failed_at.append(hang[1])  # failed at its last step; detected now
    opened = interrupted(books, spec, gang.restart, Hit(
        cause, message, sorted({*hits.down, *hits.blamed}), min(failed_at or [seen.now])),
        seen.now, strict_checkpoints(spec))
    if opened is None:
        budget, limit = budget_of(cause, spec)
        return _finish(result, "Failed", f"{message}; the {budget} restart budget of {limit} "
                       f"is used up ({cause})", "RestartBudgetExhausted", []), None
    return result.told(Event("Warning", "Interrupted", message)), opened.books


@dataclass(frozen=True)
class Hit:
    """An interruption of a gang: its cause and what happened, the nodes blamed (to be
    replaced or probed), and when it began."""

    cause: IncidentCause
    message: str
    nodes: list[str]
    at: float


class Opened(NamedTuple):
    books: JobStatus  # with the incident open
    restart_at: float | None  # when its restart may happen (backoff), None: at once


def interrupted(books: JobStatus, spec: TrainingJobSpec | None, restart: int, hit: Hit,
                now: float, strict: bool) -> Opened | None:
    """BOOKS with HIT's incident open for attempt RESTART + 1, the recovery rules the
    operator and the goodput simulator (simulate.engine) both apply: paid from SPEC's
    restart budget (None: that budget is used up, the job fails), its restart backed off
    after application errors, and a recovery it hit closed first (hit again while
    recovering). SPEC None: no budgets and no backoff (the simulator's other policies).
    STRICT: resume only from verified checkpoints."""
    paid = books if spec is None else charged(books, hit.cause, spec)
    if paid is None:
        return None
    restart_at = backoff_until(paid, spec, now) \
        if spec is not None and hit.cause == "ApplicationError" else None
    if badput.current_incident(paid) is not None:  # hit again while recovering
        paid = badput.running_again(paid, hit.at)
    return Opened(badput.open_incident(paid, restart + 1, hit.cause, hit.message, hit.nodes,
                                       hit.at, now, restart_at, strict), restart_at)


def charged(books: JobStatus, cause: IncidentCause, spec: TrainingJobSpec
            ) -> JobStatus | None:
    """BOOKS with an incident of CAUSE paid from its restart budget; None when that budget
    is used up (the job fails)."""
    budget, limit = budget_of(cause, spec)
    used: RestartsByBudgetDict = {**(books.get("restartsByBudget") or {})}
    if used.get(budget, 0) >= limit:
        return None
    used[budget] = used.get(budget, 0) + 1
    return {**books, "restartsByBudget": used}


Budget = Literal["application", "infrastructure"]  # RestartsByBudgetDict's keys


def budget_of(cause: str, spec: TrainingJobSpec) -> tuple[Budget, int]:
    """Which restart budget an incident of CAUSE pays from, and its size: the
    application's own failures from maxRestarts; the platform's faults (nodes lost,
    quarantined or refusing the workers, corruption, infrastructure exit codes) from
    maxInfrastructureRestarts."""
    if cause in ("ApplicationError", "Hang"):  # a hang blames no node: the job's own
        return "application", spec.failure_policy.max_restarts
    return "infrastructure", spec.failure_policy.max_infrastructure_restarts


def _cause(books: JobStatus, spec: TrainingJobSpec, down: list[str], lost: Mapping[str, Lost],
           infra: list[str], application: list[str]) -> tuple[IncidentCause, str]:
    """The incident's cause and message: lost nodes first, then infrastructure errors."""
    if down:
        sdc = any(lost[n].reason == "SilentDataCorruption" for n in down)
        for planned in ("Unschedulable", "Notice"):  # every node refused, or noticed
            if all(lost[n].reason == planned for n in down):
                return planned, "; ".join(f"node {n}: {lost[n].evidence}" for n in down)
        message = "; ".join(f"node {n} lost: {lost[n].evidence}" for n in down)
        if sdc:
            return "SilentDataCorruption", message + _rollback(books, spec)
        return "NodeFailure", message
    if infra:
        return "InfrastructureError", "; ".join(infra)
    return "ApplicationError", "; ".join(application)


def backoff_until(books: JobStatus, spec: TrainingJobSpec, now: float) -> float | None:
    """When an application error's restart may happen: the backoff grows with the
    streak of application errors in a row."""
    streak = 1
    for earlier in reversed(books.get("incidents") or []):
        if earlier.get("cause") != "ApplicationError":
            break
        streak += 1
    backoff = spec.failure_policy.backoff
    delay = badput.backoff_seconds(backoff.initial_seconds, backoff.max_seconds, streak)
    return now + delay if delay > 0 else None


def strict_checkpoints(spec: TrainingJobSpec) -> bool:
    """Resume only from checkpoints the replicas' votes verified."""
    return spec.checkpoint.verify and spec.sdc.cross_replica_check


def _rollback(books: JobStatus, spec: TrainingJobSpec) -> str:
    """Why the restart resumes from the checkpoint it does, after corruption."""
    resume = badput.resume_point(books["checkpoint"], strict_checkpoints(spec))
    latest = books["checkpoint"].get("latest") or {}
    diverged = (books.get("sdc") or {}).get("divergedStep")
    where = f"step {resume['step']} ({resume.get('path')})" if resume else "the start"
    first = f" before the first divergent step {diverged}" if diverged is not None else ""
    newer = f"; not the latest, step {latest['step']}" if latest and resume != latest else ""
    return f"; rolling back to {where}, the newest verified checkpoint{first}{newer}"


def _recover(result: Attempt, books: JobStatus, incident: IncidentDict, gang: Gang,
             seen: Seen) -> Attempt:
    """The incident is open for the next attempt: wait out backoff and quarantine, then
    restart the gang (the controller finds the replacement placement)."""
    restart, now, lost = gang.restart, seen.now, seen.lost
    result = result.but(phase="Recovering", status=_incidents_only(books),
                     missing=None, pin=[]).said(
        ConditionUpdate("Running", False, "Recovering", incident["message"]))
    restart_at = times.parse(incident.get("restartAt"))
    held = gang.spots.nodes()
    pending = sorted({node for node in held if node in seen.suspects and node not in lost})
    if restart_at is not None and now < restart_at:
        return result.but(wake_at=restart_at,
                       message=f"{incident['cause']}: restart {restart + 1} in "
                               f"{restart_at - now:.0f}s (backoff)")
    if pending:  # failures arriving together are recovered from together
        return result.but(message=f"waiting for the verdict on node(s) "
                       f"{', '.join(pending)} (failing, not yet judged: grace period or "
                       "storm guard)")
    suspects_first = incident.get("cause") == "InfrastructureError"  # an exit code's
    message = f"{incident['cause']}: restarting the gang (restart {restart + 1})"
    return replace(
        result, restart=True, message=message,
        status={**result.status, "sdc": None},  # the next attempt's votes start afresh
        failed_nodes=sorted({node for node in held if node in lost}),
        # suspect, not lost: probed before the gang starts
        probe_first=[n for n in incident.get("nodes") or [] if n not in lost]
        if suspects_first else [],
        delete=[p["metadata"]["name"] for p in seen.pods]).told(
        Event("Warning", "Restarting", message))


def _recovered(incident: IncidentDict) -> str:
    return (f"restart {incident['restart']} running again after {incident['cause']}: "
            f"detection {incident.get('detectionSeconds', 0):.1f}s, replacement "
            f"{incident.get('replacementSeconds', 0):.1f}s, restart "
            f"{incident.get('restartSeconds', 0):.1f}s, lost work "
            f"{incident.get('lostWorkSeconds', 0):.1f}s")


def _incidents_only(books: JobStatus) -> JobStatus:
    return {"incidents": books["incidents"], "goodput": books["goodput"],
            "restartsByBudget": books.get("restartsByBudget") or None}


MAX_SUSPECTS = 3  # nodes a job's exit codes may have probed (then: application errors)
MAX_REFUSALS = 5  # refused creates in a row before the job fails and frees its capacity


def refuse(result: Attempt, refusal: Refusal, pods: list[Obj], books: JobStatus, now: float
           ) -> Attempt:
    """The API server refused to create the workers REFUSAL.times passes in a row: say so
    on a condition and retry with backoff; after MAX_REFUSALS, fail the job and give its
    capacity back. A refusal (an invalid pod, a PodSecurity denial) does not pass by
    waiting, and a gang that cannot start must not hold nodes others could use."""
    message = (f"the API server refused to create the workers ({refusal.times} time(s)): "
               f"{refusal.message}")
    if refusal.times >= MAX_REFUSALS:
        return _finish(result.but(status=_goodput_only(badput.stopped(books, now))),
                       "Failed", message, "CreateRefused", pods)
    result = result.but(message=message).said(
        ConditionUpdate("WorkersCreated", False, "CreateRefused", message))
    retry = refusal.retry_at()
    if now < retry:  # the backoff runs: no creates until then, whatever wakes the pass
        return result.but(missing=None).woken_by(retry)
    return result


def _goodput_only(books: JobStatus) -> JobStatus:
    return {"goodput": books["goodput"]}


def _finish(result: Attempt, phase: Phase, message: str, reason: str, pods: list[Obj]
            ) -> Attempt:
    return result.but(phase=phase, message=message, missing=None, pin=[],
                   needs_placement=False, delete=_active(pods)).said(
        ConditionUpdate(phase, True, reason, message),
        ConditionUpdate("Running", False, reason, message))
