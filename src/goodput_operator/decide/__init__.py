"""The operator's decisions: a snapshot of what it knows in, a plan of what to do out.

    decide(snapshot) -> PassPlan
        groups     decide.group      quarantine, release, node labels, probes, status
        jobs       decide.job        its steps: decide.quota, .attempt, .preemption,
                                     .running, .placing, .replacing, .jobstatus
        endpoints  decide.endpoint   its steps: decide.roles (.replicas), .groupplacing,
                                     .standby; decide.regions: multi-region endpoints
        (both)     decide.turns      the placement searches one namespace's waiting
                                     objects run in a pass

Nothing here does I/O, reads the clock or changes the operator's state: the controllers
take a `Snapshot`, call these, and apply the plan (one status write per object, events
after it). Kinds are decided in that order, objects of a kind in the snapshot's order
(jobs by priority, then arrival), so capacity goes to the first in line. The operator
takes a fresh snapshot between kinds because applying the groups' plan changes what the
jobs see (a node quarantined in this pass is out of the fleet when its job recovers);
`decide` decides all three on one snapshot, for tests and tools.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from goodput_operator import times
from goodput_operator.decide.creates import WriteBudget, allot
from goodput_operator.decide.endpoint import EndpointDecision, decide_endpoint
from goodput_operator.decide.gang import JobDecision
from goodput_operator.decide.group import GroupDecision, decide_group
from goodput_operator.decide.job import decide_job
from goodput_operator.decide.quota import decide_delegated
from goodput_operator.decide.regions import decide_handed_off, decide_regions
from goodput_operator.decide.snapshot import Scaled, Snapshot
from goodput_operator.decide.standby import reclaim_marks
from goodput_operator.decide.types import ConditionUpdate, Event, ProbeStart, Reservation

__all__ = ["ConditionUpdate", "EndpointDecision", "Event", "Failure", "GroupDecision",
           "JobDecision", "PassPlan", "ProbeStart", "Reservation", "Scaled", "Snapshot",
           "decide", "decide_endpoints", "decide_groups", "decide_jobs"]

Obj = dict[str, Any]
D = TypeVar("D")


@dataclass(frozen=True)
class Failure:
    """An object whose decision raised: the others go on; the controller logs it."""

    kind: str
    obj: Obj
    error: Exception


@dataclass
class PassPlan:
    groups: list[GroupDecision] = field(default_factory=list)
    jobs: list[JobDecision] = field(default_factory=list)
    endpoints: list[EndpointDecision] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)


def _each(kind: str, objects: Iterable[Obj], decide_one: Callable[[Obj], D],
          failures: list[Failure]) -> list[D]:
    """One object's bad data must not stop the others: its failure is handed back."""
    decided = []
    for obj in objects:
        try:
            decided.append(decide_one(obj))
        except Exception as err:  # reported by the controller, with its traceback
            failures.append(Failure(kind, obj, err))
    return decided


@contextlib.contextmanager
def trial(snapshot: Snapshot) -> Iterator[None]:
    """Every fleet in a trial: placements see each other's reservations; none is kept."""
    with contextlib.ExitStack() as stack:
        for fleet in snapshot.fleets.values():
            stack.enter_context(fleet.trial())
        yield


def decide_groups(snapshot: Snapshot, failures: list[Failure]) -> list[GroupDecision]:
    return _each("UltraServerGroup", [snapshot.group_objects[name] for name in snapshot.groups],
                 lambda group: decide_group(snapshot, group["metadata"]["name"]), failures)


def decide_jobs(snapshot: Snapshot, failures: list[Failure],
                budget: WriteBudget | None = None) -> list[JobDecision]:
    """Call inside `trial(snapshot)` (the later jobs see the earlier's reservations).
    BUDGET: pod writes left in the pass; the placed gangs' pods are built from it
    (decide.creates.allot), the smallest requests first."""
    reclaim_marks(snapshot)  # standby domains endpoints take back from the jobs
    at = times.seconds(snapshot.clock)
    decided = _each("TrainingJob", snapshot.jobs, lambda job: decide_job(snapshot, job),
                    failures)
    decided, unbuilt = allot(decided, budget or WriteBudget(snapshot.write_budget))
    failures += [Failure("TrainingJob", d.job, err) for d, err in unbuilt]
    decided = [d for d in decided if all(d is not u for u, _ in unbuilt)]
    return decided + _each("TrainingJob", snapshot.delegated,
                           lambda job: decide_delegated(snapshot, job, at), failures)


def decide_endpoints(snapshot: Snapshot, failures: list[Failure],
                     budget: WriteBudget | None = None) -> list[EndpointDecision]:
    """Call inside `trial(snapshot)`. BUDGET: pod writes left in the pass."""
    budget = budget or WriteBudget(snapshot.write_budget)
    at = times.seconds(snapshot.clock)
    return _each("InferenceEndpoint", snapshot.endpoints,
                 lambda ie: decide_regions(snapshot, ie) if ie["spec"].get("multiRegion")
                 else decide_endpoint(snapshot, ie, budget), failures) + \
        _each("InferenceEndpoint", snapshot.delegated_endpoints,
              lambda ie: decide_handed_off(snapshot, ie, at), failures)


def decide(snapshot: Snapshot) -> PassPlan:
    """A whole pass on one snapshot: groups, then jobs, then endpoints, each kind seeing
    the reservations of the kinds before it. The fleets are left as they were."""
    plan = PassPlan()
    plan.groups = decide_groups(snapshot, plan.failures)
    budget = WriteBudget(snapshot.write_budget)  # one for the pass, as the loop has
    with trial(snapshot):
        plan.jobs = decide_jobs(snapshot, plan.failures, budget)
        plan.endpoints = decide_endpoints(snapshot, plan.failures, budget)
    return plan
