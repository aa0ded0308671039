"""What a running TrainingJob's pass adds: an elastic job's grow back toward its size,
and the Straggler condition (health.straggler's verdict, kept by the report channel)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from goodput_operator import times
from goodput_operator.api.statuses import PlacementDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import Attempt, books_of, strict_checkpoints
from goodput_operator.decide.gang import (
    placement_record,
    recorded_companions,
    request_for,
    reserve,
    restart_of,
)
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import ConditionUpdate, Event, Reservation
from goodput_operator.health import badput, straggler
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import Placement, in_rank_order, place
from goodput_operator.topology.record import ranks_of
from goodput_operator.topology.replacement import Elastic, grow

Obj = dict[str, Any]


@dataclass(frozen=True)
class Grown:
    """An elastic job's grow back toward spec.workers: its new placement, the
    reservations that hold it, and what is said; or only when to look again."""

    placement: PlacementDict | None = None
    reservations: tuple[Reservation, ...] = ()
    events: tuple[Event, ...] = ()
    wake_at: float | None = None
    strict: bool = False  # resume only from verified checkpoints (attempt.strict_checkpoints)


def running_job(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                decided: Attempt, pods: Sequence[str]) -> tuple[Attempt, Grown]:
    """What a running job's pass adds: an elastic job's grow (a restart onto its new
    placement, stopping PODS), or else the Straggler condition."""
    grown = _grow(snapshot, fleet, spec, job) if spec.elastic else Grown()
    if grown.placement is None:
        meta = job["metadata"]
        return decided.said(_stragglers(snapshot, (meta["namespace"], meta["name"]), spec,
                                        restart_of(job))), grown
    return _resizing(decided, job, pods, grown, snapshot.clock), grown


def _resizing(decided: Attempt, job: Obj, pods: Sequence[str], grown: Grown,
              clock: float) -> Attempt:
    """DECIDED turned into the grow's restart: a planned one (incident cause Resize, paid
    from no budget) from the last checkpoint, the old gang's PODS deleted."""
    assert grown.placement is not None
    restart, reason = restart_of(job), grown.placement.get("reason") or ""
    books = badput.open_incident(books_of(job.get("status") or {}), restart + 1, "Resize",
                                 reason, [], clock, clock, strict=grown.strict)
    books = badput.replaced(books, clock, "grow")
    message = f"elastic: {reason} (restart {restart + 1})"
    return decided.but(phase="Recovering", restart=False, message=message,
                   status={"incidents": books["incidents"], "goodput": books["goodput"]},
                   missing=None, pin=[], delete=list(pods),
                   conditions=tuple(c for c in decided.conditions if c.type != "Running")
                   ).said(ConditionUpdate("Running", False, "Resizing", message))


def _stragglers(snapshot: Snapshot, key: tuple[str, str], spec: TrainingJobSpec,
                restart: int) -> ConditionUpdate:
    """The Straggler condition: which signal is in force, and the slow ranks found."""
    policy = spec.failure_policy.straggler
    if not policy.enabled:
        return ConditionUpdate("Straggler", False, "Disabled",
                               "failurePolicy.straggler.enabled is false")
    pace = snapshot.paces.get(key)
    if pace is None or pace.attempt != restart or len(pace.ranks) < 2:
        return ConditionUpdate("Straggler", False, "NoStepReports",
                               "fewer than 2 ranks reported steps in this attempt: "
                               "stragglers are not detected")
    found = snapshot.stragglers.get(key) or []
    if found:
        more = f"; {len(found) - 3} more" if len(found) > 3 else ""
        action = (" (its node is quarantined for a probe)" if policy.action == "quarantine"
                  else "")
        return ConditionUpdate("Straggler", True, "SlowRank", "; ".join(
            s.evidence for s in found[:3]) + more + action)
    ranks = list(pace.ranks.values())  # at once: a report may add a rank meanwhile
    basis = (straggler.METRIC if any(p.measured for p in ranks)
             else "the time between step reports")
    return ConditionUpdate("Straggler", False, "NoneFound",
                           f"ranks compared by {basis}: none over {policy.factor:g} x its "
                           f"peers' median over {policy.min_steps}+ steps")


def _grow(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj) -> Grown:
    """An elastic job running below spec.workers grows back: once it has run
    elastic.growAfterSeconds at its size (the hysteresis), at its next checkpoint, unless a
    gang of its group waits that the capacity should go to first (_gangs_waiting), and when
    a larger gang fits."""
    assert spec.elastic is not None
    status = job.get("status") or {}
    running = len(ranks_of(status.get("placement")))
    since = times.parse((status.get("goodput") or {}).get("since"))
    if not running or running >= spec.workers or since is None:
        return Grown()
    due = _grow_due(status, since, spec.elastic.grow_after_seconds, snapshot.clock)
    if snapshot.clock < due:
        return Grown(wake_at=due)
    if _gangs_waiting(snapshot, fleet, spec, job):
        return Grown()
    meta = job["metadata"]
    request = request_for(snapshot, fleet, spec, job, spec.workers)
    grown = grow(fleet, running, request, trainingjob_owner(meta["namespace"], meta["name"]),
                 Elastic(spec.elastic.min_workers, spec.elastic.step))
    if grown is None:
        return Grown()
    ranks = in_rank_order(grown.ranks, spec.topology.rank_order)
    companions = recorded_companions(status.get("placement"))  # the grow adds domains only
    held = reserve(fleet, job, spec, restart_of(job) + 1, ranks, companions)
    placement = placement_record(Placement(True, grown.reason, ranks), snapshot.clock,
                                 companions)
    message = f"elastic: {grown.reason} (restart {restart_of(job) + 1})"
    return Grown(placement, held, (Event("Normal", "Resizing", message),),
                 strict=strict_checkpoints(spec))


def _grow_due(status: Obj, since: float, after: float, now: float) -> float:
    """When a grow may happen: AFTER seconds into the stretch at this size, at the first
    checkpoint committed from then on (a restart there redoes no work), or AFTER seconds
    later still when the job commits none in that time."""
    due = since + after
    committed = times.parse(((status.get("checkpoint") or {}).get("latest") or {}).get("time"))
    if committed is None or committed >= due or now >= due + after:
        return due
    return due + after


def _gangs_waiting(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj) -> bool:
    """Whether a gang of the group, of at least this job's priority, waits for its first
    placement and fits in what is free now: returning capacity goes to it before a grow
    takes it. A waiting gang that does not fit even now does not hold growth back (it
    would wait for ever, and the grow frees nothing it could use)."""
    for other in snapshot.jobs:
        status = other.get("status") or {}
        if other is job or other["spec"].get("ultraServerGroup") != spec.ultra_server_group \
                or status.get("placement") or status.get("phase") not in (None, "Pending") \
                or other["spec"].get("suspend"):
            continue
        waiting = snapshot.job(other).spec
        if waiting is None:
            continue
        if snapshot.priority(other).at_least(snapshot.priority(job)) and place(
                fleet, request_for(snapshot, fleet, waiting, other, waiting.workers)).ok:
            return True
    return False
