"""Goodput accounting: where every second of a job's life went, each incident's cost by
phase, totals by cause, and the ratio.

Pure, on the job status as plain dicts (camelCase, RFC 3339 times). A job's wall time
(creation to now, or to its end) is the sum of:
- idle, holding no accelerators: `queueing` (waiting for a placement: after creation and
  after a suspension ends) and `suspended`;
- productive: every worker running useful steps (a stretch starts when every worker runs,
  `goodput.since`, and ends at a failure; while it runs, `productiveSeconds` counts it up
  to `goodput.asOf`, refreshed with every status write and at least every
  refresh_seconds);
- lost, holding accelerators to no use: `launch` (placed, until every worker runs),
  `checkpoint` (the save stalls the SDK reports), and per incident its `detection`
  (failure -> the operator acts; a hang's window), `replacement` (-> new placement,
  including backoff and waiting for capacity), `restart` (-> every worker running) and
  `lostWork` (the steps since the checkpoint it resumes from: redone, the rollback).
The ratio is productive / (productive + lost). The stage a job waits in (queueing, launch,
suspended) is `goodput.stage`, closed when its phase moves on.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

from goodput_operator import times
from goodput_operator.api.base import MESSAGE_LENGTH
from goodput_operator.api.statuses import (
    CheckpointRefDict,
    CheckpointStatusDict,
    GoodputDict,
    IdleSecondsDict,
    IncidentDict,
    LostSecondsDict,
    TrainingJobStatusDict,
)
from goodput_operator.api.trainingjob import MAX_INCIDENTS, IncidentAction, IncidentCause

Books = TrainingJobStatusDict  # the part of a job's status the accounting reads and writes
Stage = Literal["queueing", "launch", "suspended"]  # StageDict's names
IdleBucket = Literal["queueing", "suspended"]  # IdleSecondsDict's keys
LostBucket = Literal["detection", "replacement", "restart", "lostWork", "launch",
                     "checkpoint"]  # LostSecondsDict's keys
PHASES = ("detection", "replacement", "restart")
IDLE: tuple[IdleBucket, ...] = get_args(IdleBucket)  # no accelerators held: not in the ratio
STAGE_LOST = {"launch"}  # stages that hold accelerators
REFRESH_SECONDS = 30.0  # a running job's productiveSeconds and ratio are at most this old
BOOK_WRITES_PER_SECOND = 2.0  # ... unless refreshing every running job that often needs more


def settled(goodput: GoodputDict) -> float:
    """The productive seconds of the stretches already closed: productiveSeconds counts
    the open stretch too, up to asOf (the last refresh), which is taken back out. Below
    zero while the open stretch's checkpoint stalls outweigh the closed stretches."""
    productive = float(goodput.get("productiveSeconds", 0))
    since, as_of = times.parse(goodput.get("since")), times.parse(goodput.get("asOf"))
    if since is not None and as_of is not None:
        productive -= max(0.0, as_of - since)
    return productive


def refreshed(goodput: GoodputDict, now: float) -> GoodputDict:
    """GOODPUT as of NOW: productiveSeconds with the open stretch counted, the ratio, and
    asOf = NOW, so that a user reading the status sees the job's goodput, not the value
    from when it last started."""
    fresh: GoodputDict = {
        **goodput, "productiveSeconds": round(settled(goodput) + _open(goodput, now), 3),
        "asOf": times.millis(now)}
    fresh["ratio"] = ratio(fresh, now)
    return fresh


def refresh_seconds(running: int) -> float:
    """How old a running job's figures may grow when RUNNING jobs run: REFRESH_SECONDS,
    or longer once refreshing each that often would take more than BOOK_WRITES_PER_SECOND
    status writes (a refresh is a write of its own when nothing else changed; 200 jobs at
    30 s were 6.7 writes a second on an idle cluster, each a pass's API call)."""
    return max(REFRESH_SECONDS, running / BOOK_WRITES_PER_SECOND)


def refresh_due(goodput: GoodputDict, now: float, every: float = REFRESH_SECONDS) -> float | None:
    """When a running job's goodput is next refreshed, EVERY seconds after the last (None:
    nothing runs); a time not after NOW means now."""
    if not goodput.get("since"):
        return None
    as_of = times.parse(goodput.get("asOf"))
    return now if as_of is None else as_of + every


def _open(goodput: GoodputDict, now: float) -> float:
    since = times.parse(goodput.get("since"))
    return 0.0 if since is None else max(0.0, now - since)


def stage_of(phase: str | None, recovering: bool) -> Stage | None:
    """The waiting stage a job in PHASE is in: none while running (productive), while an
    incident is open (its phases count) or once finished."""
    if recovering:
        return None
    stages: dict[str | None, Stage] = {"Pending": "queueing", "Placing": "launch",
                                       "Suspended": "suspended"}
    return stages.get(phase)


def staged(status: Books, stage: Stage | None, now: float, created: float | None = None
           ) -> GoodputDict:
    """STATUS's goodput with its stage moved to STAGE at NOW: the stage it was in closes
    (at the open incident's failure, when one opened while it ran) and its seconds go to
    their bucket. A job's first stage starts at its creation (CREATED)."""
    goodput: GoodputDict = {**(status.get("goodput") or {})}
    current = goodput.get("stage") or {}
    if not goodput and created is not None:  # the first pass: queued since creation
        current = {"name": "queueing", "since": times.millis(min(now, created))}
    if current.get("name") == stage:
        return {**goodput, "stage": current} if stage and not goodput else goodput
    began = times.parse(current.get("since"))
    if began is not None and "name" in current:
        end = now
        incident = current_incident(status)
        failed = times.parse((incident or {}).get("failedAt"))
        if stage is None and failed is not None:
            end = min(now, max(began, failed))
        _add(goodput, current["name"], max(0.0, end - began))
    if stage is None:
        goodput["stage"] = None  # None: removed by the status's merge patch
        return goodput
    goodput["stage"] = {"name": stage, "since": times.millis(now)}
    return goodput


def _add(goodput: GoodputDict, bucket: IdleBucket | LostBucket, seconds: float) -> None:
    """SECONDS more in BUCKET (idle or lost, by its name). The buckets are the schema's
    keys (Literal types a unit test matches to the status types), so the one cast here
    writes no key the CRD lacks."""
    key: Literal["idleSeconds", "lostSeconds"] = "idleSeconds" if bucket in IDLE \
        else "lostSeconds"
    spent = dict(_seconds(goodput.get(key)))
    spent[bucket] = round(spent.get(bucket, 0) + seconds, 3)
    goodput[key] = cast(Any, spent)


def _seconds(buckets: IdleSecondsDict | LostSecondsDict | None) -> Mapping[str, float]:
    """BUCKETS as a map from bucket to seconds (every value of both types is a float)."""
    return cast(Mapping[str, float], buckets or {})


def stalled(goodput: GoodputDict, seconds: float, now: float) -> GoodputDict:
    """GOODPUT at NOW after a checkpoint save that stalled training SECONDS (the SDK's
    timing of the save): taken from the productive time, so only while a stretch runs."""
    if not goodput.get("since") or seconds <= 0:
        return goodput
    goodput = refreshed(goodput, now)
    productive = float(goodput.get("productiveSeconds", 0))
    seconds = min(seconds, productive)
    goodput["productiveSeconds"] = round(productive - seconds, 3)
    _add(goodput, "checkpoint", seconds)
    goodput["ratio"] = ratio(goodput, now)
    return goodput


def with_stalls(goodput: GoodputDict, checkpoint: CheckpointStatusDict, now: float
                ) -> GoodputDict:
    """GOODPUT with the save stalls of the checkpoints committed in the running stretch
    and not yet counted (checkpoint.history's saveSeconds): the operator's pass counts
    them, so that one writer keeps the books (the report channel records only the
    checkpoint). `stallsCountedTo` is the newest commit counted."""
    since = times.parse(goodput.get("since"))
    if since is None:
        return goodput
    counted = max(since, times.parse(goodput.get("stallsCountedTo")) or since)
    fresh = sorted((at, float(saved)) for h in checkpoint.get("history") or []
                   if (saved := h.get("saveSeconds"))
                   and (at := times.parse(h.get("time"))) is not None
                   and counted < at <= now)
    if not fresh:
        return goodput
    for at, seconds in fresh:  # a save lies inside the stretch, after the one before it
        goodput = stalled(goodput, min(seconds, at - counted), now)
        counted = at
    return {**goodput, "stallsCountedTo": times.millis(counted)}


def attributed(status: Books, now: float) -> dict[str, float]:
    """Every second of the job's life up to NOW, by where it went: productive, the idle
    and lost buckets, the open stage and the open incident's phases counted up to NOW.
    Their sum is the job's wall time (tests/unit/test_health_badput.py proves it)."""
    goodput = status.get("goodput") or {}
    spent: dict[str, float] = {"productive": settled(goodput) + _open(goodput, now)}
    for buckets in (goodput.get("idleSeconds"), goodput.get("lostSeconds")):
        for bucket, seconds in _seconds(buckets).items():
            spent[bucket] = spent.get(bucket, 0.0) + float(seconds)
    stage = goodput.get("stage") or {}
    began = times.parse(stage.get("since"))
    if began is not None and "name" in stage:
        spent[stage["name"]] = spent.get(stage["name"], 0.0) + max(0.0, now - began)
    incident = current_incident(status)
    if incident is not None:
        detected = times.parse(incident.get("detectedAt")) or now
        replaced_at = times.parse(incident.get("replacedAt"))
        opened = {"detection": float(incident.get("detectionSeconds") or 0),
                  "lostWork": float(incident.get("lostWorkSeconds") or 0),
                  "replacement": max(0.0, (replaced_at or now) - detected),
                  "restart": max(0.0, now - replaced_at) if replaced_at else 0.0}
        for bucket, seconds in opened.items():
            spent[bucket] = spent.get(bucket, 0.0) + seconds
    return spent


def resume_point(checkpoint: CheckpointStatusDict | Mapping[str, Any], strict: bool
                 ) -> CheckpointRefDict | None:
    """The checkpoint a restart resumes from: the newest verified one; when the job does
    not verify (STRICT false), the newest committed one if none is verified."""
    verified = checkpoint.get("latestVerified")
    return verified if strict else (verified or checkpoint.get("latest"))


def open_incident(status: Books, restart: int, cause: IncidentCause, message: str,
                  nodes: list[str], failed_at: float, detected_at: float,
                  restart_at: float | None = None, strict: bool = False) -> Books:
    """STATUS with a new incident appended (the oldest dropped beyond MAX_INCIDENTS) and
    the productive stretch closed at FAILED_AT, minus the work since the checkpoint it
    resumes from."""
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    since = times.parse(goodput.get("since"))
    resume = resume_point(status.get("checkpoint") or {}, strict)
    lost_work = 0.0
    if since is not None:
        saved = times.parse((resume or {}).get("time"))
        start = since if saved is None else min(max(saved, since), failed_at)
        lost_work = max(0.0, failed_at - start)
        # saves stalled in the redone stretch are in lostWork: not counted twice
        counted = times.parse(goodput.get("stallsCountedTo")) or 0.0
        redone = sum(float(h.get("saveSeconds") or 0)
                     for h in (status.get("checkpoint") or {}).get("history") or []
                     if start < (times.parse(h.get("time")) or 0.0) <= min(failed_at, counted))
        redone = min(redone, float((goodput.get("lostSeconds") or {}).get("checkpoint", 0)))
        if redone:
            _add(goodput, "checkpoint", -redone)
        goodput["productiveSeconds"] = round(max(
            0.0, settled(goodput) + redone + max(0.0, failed_at - since - lost_work)), 3)
        goodput["since"] = goodput["asOf"] = None
    incident: IncidentDict = {
        "restart": restart, "cause": cause, "message": message[:MESSAGE_LENGTH],
        "nodes": nodes, "failedAt": times.millis(failed_at),
        "detectedAt": times.millis(detected_at),
        "detectionSeconds": round(max(0.0, detected_at - failed_at), 3),
        "lostWorkSeconds": round(lost_work, 3)}
    if resume:
        incident["resumeFrom"] = resume
    if restart_at is not None:
        incident["restartAt"] = times.millis(restart_at)
    status["incidents"] = ([*(status.get("incidents") or []), incident])[-MAX_INCIDENTS:]
    return status


def current_incident(status: Books) -> IncidentDict | None:
    """The incident the job is recovering from, if any (the newest, until it runs again)."""
    incidents = status.get("incidents") or []
    if incidents and not incidents[-1].get("runningAt"):
        return {**incidents[-1]}
    return None


def update_incident(status: Books, **fields: Any) -> Books:
    """STATUS with the newest incident's fields updated (None values removed). FIELDS
    are IncidentDict's keys (checked here: keyword arguments cannot be typed by name)."""
    unknown = fields.keys() - IncidentDict.__annotations__.keys()
    if unknown:
        raise TypeError(f"an incident has no field(s) {sorted(unknown)}")
    status = copy.deepcopy(status)
    newest: dict[str, Any] = cast(Any, status["incidents"][-1])
    for key, value in fields.items():
        if value is None:
            newest.pop(key, None)
        else:
            newest[key] = value
    return status


def replaced(status: Books, at: float, action: IncidentAction) -> Books:
    incident = current_incident(status) or {}
    detected = times.parse(incident.get("detectedAt")) or at
    return update_incident(status, replacedAt=times.millis(at), action=action,
                           replacementSeconds=round(max(0.0, at - detected), 3))


def running_again(status: Books, at: float) -> Books:
    """Close the open incident at AT (every worker running): its costs go to the totals."""
    incident = current_incident(status)
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    goodput["productiveSeconds"] = round(settled(goodput), 3)
    goodput["since"] = goodput["asOf"] = times.millis(at)
    if incident is None:
        return status
    replaced_at = times.parse(incident.get("replacedAt")) or at
    restart = round(max(0.0, at - replaced_at), 3)
    status = update_incident(status, runningAt=times.millis(at), restartSeconds=restart)
    goodput = status["goodput"]
    costs: dict[LostBucket, float] = {
        "detection": incident.get("detectionSeconds") or 0.0,
        "replacement": incident.get("replacementSeconds") or 0.0,
        "restart": restart, "lostWork": incident.get("lostWorkSeconds") or 0.0}
    for bucket, value in costs.items():
        _add(goodput, bucket, value)
    by_cause = goodput.setdefault("lostByCause", {})
    cause = incident["cause"]
    by_cause[cause] = round(by_cause.get(cause, 0) + sum(costs.values()), 3)
    return status


def stopped(status: Books, at: float) -> Books:
    """The productive stretch ends without loss (the job finished or was suspended)."""
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    if goodput.get("since"):
        goodput["productiveSeconds"] = round(settled(goodput) + _open(goodput, at), 3)
        goodput["since"] = goodput["asOf"] = None
    return status


def ratio(goodput: GoodputDict, now: float) -> float | None:
    """productive / (productive + lost), counting the running stretch and a launch under
    way up to NOW."""
    productive = settled(goodput) + _open(goodput, now)
    lost = sum(float(v) for v in _seconds(goodput.get("lostSeconds")).values())
    stage = goodput.get("stage") or {}
    began = times.parse(stage.get("since"))
    if stage.get("name") in STAGE_LOST and began is not None:
        lost += max(0.0, now - began)
    total = productive + lost
    return round(productive / total, 4) if total > 0 else None


def backoff_seconds(initial: float, maximum: float, application_restarts: int) -> float:
    """Delay before restarting after the N-th consecutive application error: initial,
    doubling, capped. Node failures restart at once: the bad node is already gone."""
    if application_restarts <= 0:
        return 0.0
    return float(min(maximum, initial * 2 ** (application_restarts - 1)))
