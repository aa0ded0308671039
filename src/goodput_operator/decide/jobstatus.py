"""A TrainingJob's status, assembled once at the end of its pass (decide.job): the
fields its policies decided, then what every status carries (placement, conditions,
counts, accelerators, times, goodput books, where it runs).

Each function takes the status being assembled and returns a new one; nothing here
changes what it is given.
"""

from __future__ import annotations

from typing import Any

from goodput_operator import times
from goodput_operator.api.statuses import GoodputDict, PlacementDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import TERMINAL, Attempt, books_of
from goodput_operator.decide.gang import domain_summary
from goodput_operator.decide.types import JobStatus, changed_keys
from goodput_operator.health import badput

Obj = dict[str, Any]


def staged(status: Obj, desired: JobStatus, created: float | None, clock: float
           ) -> JobStatus:
    """DESIRED with the goodput's waiting stage moved to the one the decided phase is in
    (queueing, launch, suspended or none), so that the time spent in each is accounted."""
    books = books_of(status)
    if desired.get("goodput") is not None:
        books["goodput"] = desired["goodput"]
    if desired.get("incidents") is not None:
        books["incidents"] = desired["incidents"]
    recovering = badput.current_incident(books) is not None
    goodput = badput.staged(books, badput.stage_of(desired.get("phase"), recovering), clock,
                            created)
    return {**desired, "goodput": goodput} if goodput != books.get("goodput") else desired


def completed(desired: JobStatus, status: Obj, decided: Attempt, spec: TrainingJobSpec,
              placement: PlacementDict | None, clock: float) -> JobStatus:
    """DESIRED with the rest of the status: placement, counts, accelerators, times."""
    if placement and placement.get("domains") and "domainSummary" not in placement:
        # a new placement, or one an operator recorded before the DOMAINS column
        placement = {**placement, "domainSummary": domain_summary(placement["domains"])}
    found: JobStatus = {**desired, "placement": placement}
    goodput: GoodputDict = found.get("goodput") or status.get("goodput") or GoodputDict()
    counted = badput.with_stalls(goodput, status.get("checkpoint") or {}, clock)
    if counted is not goodput:
        found["goodput"] = counted
    found["workers"] = {"desired": decided.workers, "ready": decided.ready,
                        "succeeded": decided.succeeded, "failed": decided.failed}
    phase = found.get("phase")
    live = placement is not None and phase not in TERMINAL
    companions = sum(s.replicas * s.accelerators_per_pod for s in spec.pod_sets)
    found["accelerators"] = decided.workers * spec.accelerators_per_worker + companions \
        if live else 0
    if phase == "Running" and not status.get("startTime"):
        found["startTime"] = times.seconds(clock)
    if phase in TERMINAL and not status.get("completionTime"):
        found["completionTime"] = times.seconds(clock)
    return found


def booked(desired: JobStatus, status: Obj, clock: float, every: float) -> JobStatus:
    """DESIRED with its goodput figures current: a running job's are refreshed with every
    status write it makes anyway, and on their own once EVERY seconds old
    (Snapshot.refresh_seconds: longer when thousands of jobs run); a changed goodput
    otherwise gets its ratio as of now."""
    goodput: GoodputDict = desired.get("goodput") or status.get("goodput") or GoodputDict()
    due = badput.refresh_due(goodput, clock, every)
    written = bool(changed_keys(status, desired))
    if desired.get("phase") == "Running" and due is not None and (due <= clock or written):
        return {**desired, "goodput": badput.refreshed(goodput, clock)}  # current, not as started
    if "goodput" in desired:
        return {**desired, "goodput": {**desired["goodput"],
                                       "ratio": badput.ratio(desired["goodput"], clock)}}
    return desired


def refresh_due(desired: JobStatus, status: Obj, clock: float, every: float
                ) -> float | None:
    """When a running job's goodput figures are next refreshed on their own."""
    if desired.get("phase") != "Running":
        return None
    goodput: GoodputDict = desired.get("goodput") or status.get("goodput") or GoodputDict()
    return badput.refresh_due(goodput, clock, every)

