"""The pods a job's attempt still needs, described and not built until they are created.

A pod body costs about half a millisecond to build and a gang may have 8,192 workers: a
dozen such jobs that fit nowhere made each pass build ~98,000 bodies (+833 MiB) and create
them all as gated pods that every new leader listed again. So a job's missing pods are only
described (`Missing`) while its attempt is decided; bodies are built once the gang has a
placement, and only as many as the pass's write budget lets it create (`allot`). An
unplaced gang owns no pods at all: it waits as a status, not as thousands of objects.

The budget is shared fairly: the smallest requests are served first, so the one pod that
replaces another team's failed rank is created in the pass that decided it, while a gang of
thousands is created over several short passes (the loop asks for the next one at once).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from goodput_operator.api.statuses import CheckpointRefDict
from goodput_operator.api.trainingjob import PodSet, TrainingJobSpec
from goodput_operator.decide.priority import with_pod_class
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.topology.record import ranks_of

if TYPE_CHECKING:
    from goodput_operator.decide.gang import JobDecision

Obj = dict[str, Any]


@dataclass
class WriteBudget:
    """Pod writes left in this pass; what does not fit is counted and waits for the next."""

    left: int
    deferred: int = 0

    def spend(self, count: int) -> bool:
        """All of COUNT (it may overdraw what is left) or none of it: an endpoint's
        group is created whole or not at all."""
        if self.left <= 0:
            self.deferred += count
            return False
        self.left -= count
        return True

    def give_back(self, granted: int, wanted: int) -> None:
        """GRANTED of WANTED (from `take`) were not used after all."""
        self.left += granted
        self.deferred -= wanted - granted

    def take(self, count: int) -> int:
        """As many of COUNT as are left (a gang's pods may come in chunks)."""
        granted = max(0, min(count, self.left))
        self.left -= granted
        self.deferred += count - granted
        return granted


@dataclass(frozen=True)
class Missing:
    """The pods of attempt RESTART still to create: workers by index, then companions."""

    job: Obj
    spec: TrainingJobSpec
    restart: int
    fabric: Fabric
    resume: CheckpointRefDict | None  # the checkpoint the attempt resumes from
    report_url: str
    size: int  # the gang's workers (its WORLD_SIZE)
    workers: tuple[int, ...] = ()
    companions: tuple[tuple[PodSet, int], ...] = ()
    priority_class: str | None = None  # a PriorityClass the pods carry (decide.priority)

    def __len__(self) -> int:
        return len(self.workers) + len(self.companions)

    def bodies(self, limit: int | None = None) -> list[Obj]:
        """The first LIMIT (default: all) pods' bodies, workers first."""
        limit = len(self) if limit is None else limit
        args = (self.restart, self.fabric, self.resume, self.spec, self.report_url, self.size)
        made = [build.worker_pod(self.job, index, *args) for index in self.workers[:limit]]
        made += [build.companion_pod(self.job, pod_set, index, *args)
                 for pod_set, index in self.companions[:max(0, limit - len(made))]]
        with_pod_class(made, self.priority_class)
        return made


def missing(gang: Missing, current: Sequence[int], companions: Sequence[tuple[str, int]]
            ) -> Missing | None:
    """What the attempt of GANG (its pods' recipe, none listed yet) lacks, given the
    worker indices and companion keys it has."""
    have, had = set(current), set(companions)
    workers = tuple(i for i in range(gang.size) if i not in have)
    extra = tuple((pod_set, index) for pod_set in gang.spec.pod_sets
                  for index in range(pod_set.replicas) if (pod_set.name, index) not in had)
    if not workers and not extra:
        return None
    return replace(gang, workers=workers, companions=extra)


def with_class(found: Missing | None, priority_class: str | None) -> Missing | None:
    return replace(found, priority_class=priority_class) if found and priority_class \
        else found


def allot(decisions: Sequence[JobDecision], budget: WriteBudget
          ) -> tuple[list[JobDecision], list[tuple[JobDecision, Exception]]]:
    """Build the pods each placed gang may create this pass (`Attempt.create`), the
    smallest requests first; a gang that is not placed gets none. A gang given only part
    of what it lacks says so in its message. Returns the decisions, those given pods
    replaced by ones that create them; and the decisions whose pods could not be built
    (bad data of one job), with why: the caller hands them back, as a decision that
    raised, and the budget they took is given back."""
    built: dict[int, JobDecision] = {}
    failed = []
    wanting = [d for d in decisions if d.attempt is not None and d.attempt.missing
               and ranks_of(d.placement)]
    for decision in sorted(wanting, key=lambda d: len(d.attempt.missing)):  # type: ignore
        decided = decision.attempt
        assert decided is not None and decided.missing is not None
        wanted = len(decided.missing)
        granted = budget.take(wanted)
        try:
            bodies = decided.missing.bodies(granted)
        except Exception as err:  # reported by the controller, with its traceback
            budget.give_back(granted, wanted)
            failed.append((decision, err))
            continue
        desired = decision.desired if granted == wanted else {
            **decision.desired, "message": (
                f"{decision.desired.get('message') or ''}; creating pods: {granted} of "
                f"{wanted} missing this pass, the rest in the next").lstrip("; ")}
        built[id(decision)] = dataclasses.replace(
            decision, attempt=decided.but(create=bodies), desired=desired)
    return [built.get(id(d), d) for d in decisions], failed
