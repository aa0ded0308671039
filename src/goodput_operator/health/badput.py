"""Goodput accounting: each incident's cost by phase, totals by cause, and the ratio.

Pure, on the job status as plain dicts (camelCase, RFC 3339 times). A productive stretch
starts when every worker runs (`goodput.since`) and ends at a failure; while it runs,
`productiveSeconds` counts it up to `goodput.asOf`, refreshed every REFRESH_SECONDS. The
work since the checkpoint the restart resumes from is not productive, it is lost and redone.
An incident costs detection (failure -> the operator acts), replacement (-> new placement,
including backoff and waiting for capacity), restart (-> every worker running) and that
lost work.
"""

from __future__ import annotations

import copy
from typing import Any

from goodput_operator.health.quarantine import iso, parse_time

Obj = dict[str, Any]
MAX_INCIDENTS = 32
PHASES = ("detection", "replacement", "restart")
REFRESH_SECONDS = 30.0  # a running job's productiveSeconds and ratio are at most this old


def settled(goodput: Obj) -> float:
    """The productive seconds of the stretches already closed: productiveSeconds counts
    the open stretch too, up to asOf (the last refresh), which is taken back out."""
    productive = float(goodput.get("productiveSeconds", 0))
    since, as_of = parse_time(goodput.get("since")), parse_time(goodput.get("asOf"))
    if since is not None and as_of is not None:
        productive -= max(0.0, as_of - since)
    return max(0.0, productive)


def refreshed(goodput: Obj, now: float) -> Obj:
    """GOODPUT as of NOW: productiveSeconds with the open stretch counted, the ratio, and
    asOf = NOW, so that a user reading the status sees the job's goodput, not the value
    from when it last started."""
    fresh = {**goodput, "productiveSeconds": round(settled(goodput) + _open(goodput, now), 3),
             "asOf": iso(now)}
    fresh["ratio"] = ratio(fresh, now)
    return fresh


def refresh_due(goodput: Obj, now: float) -> float | None:
    """When a running job's goodput is next refreshed (None: nothing runs); a time not
    after NOW means now."""
    if not goodput.get("since"):
        return None
    as_of = parse_time(goodput.get("asOf"))
    return now if as_of is None else as_of + REFRESH_SECONDS


def _open(goodput: Obj, now: float) -> float:
    since = parse_time(goodput.get("since"))
    return 0.0 if since is None else max(0.0, now - since)


def resume_point(checkpoint: Obj, strict: bool) -> Obj | None:
    """The checkpoint a restart resumes from: the newest verified one; when the job does
    not verify (STRICT false), the newest committed one if none is verified."""
    verified = checkpoint.get("latestVerified")
    return verified if strict else (verified or checkpoint.get("latest"))


def open_incident(status: Obj, restart: int, cause: str, message: str, nodes: list[str],
                  failed_at: float, detected_at: float, restart_at: float | None = None,
                  strict: bool = False) -> Obj:
    """STATUS with a new incident appended (the oldest dropped beyond MAX_INCIDENTS) and
    the productive stretch closed at FAILED_AT, minus the work since the checkpoint it
    resumes from."""
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    since = parse_time(goodput.get("since"))
    resume = resume_point(status.get("checkpoint") or {}, strict)
    lost_work = 0.0
    if since is not None:
        saved = parse_time((resume or {}).get("time"))
        start = since if saved is None else min(max(saved, since), failed_at)
        lost_work = max(0.0, failed_at - start)
        goodput["productiveSeconds"] = round(
            settled(goodput) + max(0.0, failed_at - since - lost_work), 3)
        goodput["since"] = goodput["asOf"] = None
    incident: Obj = {"restart": restart, "cause": cause, "message": message[:1024],
                     "nodes": nodes, "failedAt": iso(failed_at), "detectedAt": iso(detected_at),
                     "detectionSeconds": round(max(0.0, detected_at - failed_at), 3),
                     "lostWorkSeconds": round(lost_work, 3)}
    if resume:
        incident["resumeFrom"] = resume
    if restart_at is not None:
        incident["restartAt"] = iso(restart_at)
    status["incidents"] = ([*(status.get("incidents") or []), incident])[-MAX_INCIDENTS:]
    return status


def current_incident(status: Obj) -> Obj | None:
    """The incident the job is recovering from, if any (the newest, until it runs again)."""
    incidents = status.get("incidents") or []
    if incidents and not incidents[-1].get("runningAt"):
        return dict(incidents[-1])
    return None


def update_incident(status: Obj, **fields: Any) -> Obj:
    """STATUS with the newest incident's fields updated (None values removed)."""
    status = copy.deepcopy(status)
    newest = status["incidents"][-1]
    for key, value in fields.items():
        if value is None:
            newest.pop(key, None)
        else:
            newest[key] = value
    return status


def replaced(status: Obj, at: float, action: str) -> Obj:
    incident = current_incident(status) or {}
    detected = parse_time(incident.get("detectedAt")) or at
    return update_incident(status, replacedAt=iso(at), action=action,
                           replacementSeconds=round(max(0.0, at - detected), 3))


def running_again(status: Obj, at: float) -> Obj:
    """Close the open incident at AT (every worker running): its costs go to the totals."""
    incident = current_incident(status)
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    goodput["productiveSeconds"] = round(settled(goodput), 3)
    goodput["since"] = goodput["asOf"] = iso(at)
    if incident is None:
        return status
    replaced_at = parse_time(incident.get("replacedAt")) or at
    restart = round(max(0.0, at - replaced_at), 3)
    status = update_incident(status, runningAt=iso(at), restartSeconds=restart)
    goodput = status["goodput"]
    costs = {"detection": incident.get("detectionSeconds") or 0.0,
             "replacement": incident.get("replacementSeconds") or 0.0,
             "restart": restart, "lostWork": incident.get("lostWorkSeconds") or 0.0}
    lost = goodput.setdefault("lostSeconds", {})
    for key, value in costs.items():
        lost[key] = round(lost.get(key, 0) + value, 3)
    by_cause = goodput.setdefault("lostByCause", {})
    by_cause[incident["cause"]] = round(by_cause.get(incident["cause"], 0) + sum(costs.values()),
                                        3)
    return status


def stopped(status: Obj, at: float) -> Obj:
    """The productive stretch ends without loss (the job finished or was suspended)."""
    status = copy.deepcopy(status)
    goodput = status.setdefault("goodput", {})
    if goodput.get("since"):
        goodput["productiveSeconds"] = round(settled(goodput) + _open(goodput, at), 3)
        goodput["since"] = goodput["asOf"] = None
    return status


def ratio(goodput: Obj, now: float) -> float | None:
    """productive / (productive + lost), counting the running stretch up to NOW."""
    productive = settled(goodput) + _open(goodput, now)
    lost = sum(float(v) for v in (goodput.get("lostSeconds") or {}).values())
    total = productive + lost
    return round(productive / total, 4) if total > 0 else None


def backoff_seconds(initial: float, maximum: float, application_restarts: int) -> float:
    """Delay before restarting after the N-th consecutive application error: initial,
    doubling, capped. Node failures restart at once: the bad node is already gone."""
    if application_restarts <= 0:
        return 0.0
    return float(min(maximum, initial * 2 ** (application_restarts - 1)))
