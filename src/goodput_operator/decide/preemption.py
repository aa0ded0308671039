"""A TrainingJob's two parts in preemption (spec.preemptionPolicy: LowerPriority).

As the gang that needs room: when it does not fit, it finds the smallest set of
jobs of its group it may preempt (decide.priority: lower, and of its own namespace unless
the admin granted its class more) whose removal lets it be placed as its topology asks
(topology.preemption) and marks them for this pass; it is placed once their pods are
gone, first in line by its priority. Level-based: the marks are worked out afresh every
pass, so a gang that no longer needs the room (placed elsewhere, deleted) preempts no one.

As a victim: marked, it asks its workers to save a checkpoint now (status.preemption; the
report channel answers their step reports with a save request, sdk.save_requested),
and once that checkpoint is committed, or preemptionGraceSeconds have passed, its
workers are stopped and it is requeued: an incident of cause Preemption (action
requeue, paid from no restart budget) that closes when it runs again, resumed from the
checkpoint it saved. A victim no longer marked before it stopped goes on running.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import times
from goodput_operator.api.base import MESSAGE_LENGTH
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import TERMINAL, Attempt, books_of, strict_checkpoints
from goodput_operator.decide.gang import restart_of
from goodput_operator.decide.snapshot import Mark, Snapshot
from goodput_operator.decide.types import ConditionUpdate, Event, JobStatus
from goodput_operator.health import badput
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import Request
from goodput_operator.topology.preemption import Candidate, kept, preempt

Obj = dict[str, Any]
# the most a victim's preemptionGraceSeconds holds a preemptor of another namespace
FOREIGN_GRACE_SECONDS = 300


def preempt_for(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                request: Request, again: str | None = None) -> str | None:
    """Mark the victims that make room for JOB's gang of REQUEST; what is said on its
    Placed condition, or None when no preemption makes room.

    AGAIN: what the job said when it last searched, for a job without a turn at the
    search this pass (decide.turns): the victims of that search are marked again while
    they still make room, without a search, and AGAIN stands; None when they no longer do."""
    meta = job["metadata"]
    me = f"{meta['namespace']}/{meta['name']}"
    mine = snapshot.priority(job)
    keys: dict[str, tuple[str, str]] = {}
    candidates = []
    for other in snapshot.jobs:
        other_meta, other_spec = other["metadata"], other.get("spec") or {}
        status = other.get("status") or {}
        theirs = snapshot.priority(other)
        if other is job or other_spec.get("ultraServerGroup") != spec.ultra_server_group or \
                not mine.may_preempt(theirs) or status.get("phase") in TERMINAL:
            continue
        owner = trainingjob_owner(other_meta["namespace"], other_meta["name"])
        keys[owner] = (other_meta["namespace"], other_meta["name"])
        candidates.append(Candidate(owner, theirs.rank_for(mine.namespace),
                                    (status.get("preemption") or {}).get("by") == me))
    found = kept(fleet, request, candidates) if again is not None else \
        preempt(fleet, request, candidates)
    if found is None:
        return None
    victims = ", ".join("/".join(keys[v]) for v in found.victims)
    bound = "" if found.exact else (" (each needed; fewer might do, beyond the "
                                    "search's budget)")
    message = again or (f"preempting {victims} (below {mine.describe()}){bound}; without "
                        f"them: {found.placement.reason}")
    for victim in found.victims:
        snapshot.mark(keys[victim], Mark(me, mine, message[:MESSAGE_LENGTH]))
    # hold the room for the rest of the pass (a trial binding, never a reservation): the
    # jobs decided after this one have lower priorities and must not take what is freed
    # for it, a requeued victim least of all (it would be placed back and preempted again)
    owner = trainingjob_owner(meta["namespace"], meta["name"])
    fleet.hold(found.placement.ranks, request.accelerators, owner, f"{owner}#preempting")
    return message


@dataclass(frozen=True)
class Yielded:
    """What being (or no longer being) a victim changes in a job's pass."""

    fields: JobStatus = field(default_factory=JobStatus)  # status keys to write
    stopped: bool = False  # the workers stop now: requeued, placement cleared
    marked: bool = False  # chosen as a victim in this pass
    events: tuple[Event, ...] = ()
    wake_at: float | None = None  # the checkpoint's deadline


def yield_to(snapshot: Snapshot, spec: TrainingJobSpec, job: Obj, decided: Attempt,
             pods: Sequence[str]) -> tuple[Attempt, Yielded]:
    """JOB as a victim of this pass's preemptions: ask for a checkpoint, then stop its
    PODS (by name). The attempt as that leaves it, and what else it changes."""
    meta, status = job["metadata"], job.get("status") or {}
    mark = snapshot.preempting.get((meta["namespace"], meta["name"]))
    if mark is None or decided.phase in TERMINAL or decided.phase == "Suspended" or \
            not status.get("placement"):
        return _unmarked(decided, status)
    current = status.get("preemption")
    same = current is not None and current.get("by") == mark.by
    clock = snapshot.clock
    at = (times.parse(current.get("at")) if same and current else None) or clock
    # only running workers can save: without a checkpoint dir, or not running, at once
    grace = spec.preemption_grace_seconds \
        if spec.checkpoint.dir and decided.phase == "Running" else 0
    if mark.priority is not None and mark.priority.namespace != meta["namespace"]:
        grace = min(grace, FOREIGN_GRACE_SECONDS)  # this job's words hold only its own team
    deadline = at + grace
    saved = times.parse(((status.get("checkpoint") or {}).get("latest") or {}).get("time"))
    if clock < deadline and (saved is None or saved < at):
        message = (f"{_said_by(snapshot, job, mark)}: the workers are asked to save a "
                   f"checkpoint, stopped at {times.millis(deadline)} at the latest")
        return decided.said(ConditionUpdate("Preempted", True, "Checkpointing", message)), \
            Yielded({"preemption": {"by": mark.by, "at": times.millis(at),
                                    "deadline": times.millis(deadline),
                                    "message": mark.message}}, marked=True,
                    events=() if same else (Event("Warning", "Preempting", message),),
                    wake_at=deadline)
    return _requeued(snapshot, spec, job, decided, pods, mark)


def _unmarked(decided: Attempt, status: Obj) -> tuple[Attempt, Yielded]:
    """Not (or no longer) a victim: a preemption asked for is cancelled; one that stopped
    the job is over once it runs again."""
    current = status.get("preemption")
    if current:
        return decided.said(ConditionUpdate(
            "Preempted", False, "Cancelled", f"{current.get('by')} no longer needs the "
            "room: running on")), Yielded({"preemption": None})
    if decided.phase == "Running" and any(
            c.get("type") == "Preempted" and c.get("status") == "True"
            for c in status.get("conditions") or []):
        return decided.said(ConditionUpdate("Preempted", False, "Resumed",
                                            decided.message)), Yielded()
    return decided, Yielded()


def _said_by(snapshot: Snapshot, job: Obj, mark: Mark) -> str:
    if mark.priority is None:
        return f"{mark.verb} by {mark.by} ({mark.message})"
    return (f"preempted by {mark.by} ({mark.priority.describe()}, above "
            f"{snapshot.priority(job).describe()})")


def _requeued(snapshot: Snapshot, spec: TrainingJobSpec, job: Obj, decided: Attempt,
              pods: Sequence[str], mark: Mark) -> tuple[Attempt, Yielded]:
    """The checkpoint is saved or the grace is over: the workers stop, and the job is
    requeued (an incident of cause Preemption, resumed from its newest checkpoint)."""
    status, clock = job.get("status") or {}, snapshot.clock
    restart = restart_of(job)
    books: JobStatus = {**books_of(status), **decided.status}
    books = badput.open_incident(books, restart + 1, "Preemption", mark.message, [], clock,
                                 clock, strict=strict_checkpoints(spec))
    books = badput.update_incident(books, action="requeue")
    resume = (books["incidents"][-1].get("resumeFrom") or {})
    why = (f"{_said_by(snapshot, job, mark)}: workers stopped and requeued; resumes from "
           f"{'step ' + str(resume['step']) if 'step' in resume else 'the start'}")
    stopped = decided.but(delete=list(pods), missing=None, pin=[], probe=[],
                      phase="Recovering", message=why,
                      status={"incidents": books["incidents"], "goodput": books["goodput"]})
    return stopped.said(ConditionUpdate("Preempted", True, "Requeued", why),
                        ConditionUpdate("Running", False, "Preempted", why)), \
        Yielded({"preemption": None, "restarts": restart + 1}, stopped=True, marked=True,
                events=(Event("Warning", "Preempted", why),))
