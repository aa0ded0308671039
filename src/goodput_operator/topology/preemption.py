"""Preemption that keeps topology: the smallest set of lower-priority workloads whose
removal lets a gang be placed as it asks (whole domains, aligned slices, one block).

Schedulers that preempt pod by pod (kube-scheduler) or by quota (Kueue) pick victims
without asking whether what they free forms a valid topology placement; a 4-UltraServer
gang may then evict four jobs scattered over four UltraServers and still not fit. Here
the test of "enough" is the placement engine itself: a set of victims is enough when
`place()` succeeds with their pods gone.

The search is greedy and then minimal, as Kueue's is, but run in two orders and the
better result kept: (1) lowest priority first, smallest first (Kueue's order); (2) whole
domain by whole domain, each next domain the one that adds the fewest new victims (only
domains no other workload uses: they can come free whole), so that a job spanning two
UltraServers is preferred to four small ones scattered over four. Each greedy pass
removes candidates in its order until the gang fits, then gives back every victim the
gang can do without (the most important first): every victim left is needed. Between
the two results: the lower highest priority preempted (as Kubernetes and Kueue, a job is
never preempted while lower-priority ones would do), then fewer victims, then fewer
accelerators.
Workloads already being preempted for this gang come first in both orders (their room
is being freed anyway), and are given back like the others when no longer needed.

Greedy-then-minimal is not always the fewest: on random 6-UltraServer fleets it took one
victim more than needed in 2 of 159 cases (tests/unit/test_preemption.py, against a brute
force; a whole-domain gang took 5 where 4 did in another project's count). So the
greedy result bounds an exact search: every set of fewer candidates, none of a higher
priority than the greedy set's highest, those that free too few accelerators skipped
unplaced, tried until one fits (the fewest, then the cheapest of that size). The search
has a budget (`TRIALS` placements, `COMBINATIONS` sets looked at); when it runs out the
result is the best found so far, minimal but not proven fewest, and says so (`exact`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Placement, Request, place

TRIALS = 64  # placements the exact search may try for one gang (a pass each)
COMBINATIONS = 20_000  # sets of candidates it may look at (most skipped unplaced)


@dataclass(frozen=True)
class Candidate:
    """A workload the gang may preempt (strictly lower priority, pods in the fleet)."""

    owner: str  # the fleet owner of its pods ("namespace/TrainingJob/name")
    priority: int
    preempting: bool = False  # already being preempted for this gang


@dataclass(frozen=True)
class Preemption:
    """The victims (owners, in the order given) and where the gang goes without them."""

    victims: tuple[str, ...]
    placement: Placement
    exact: bool = True  # proven the fewest; False: the search's budget ran out first


def preempt(fleet: Fleet, request: Request, candidates: Sequence[Candidate]
            ) -> Preemption | None:
    """The smallest set of CANDIDATES whose removal lets REQUEST be placed; None when
    even all of them would not make room (or the gang fits without any)."""
    present = [c for c in candidates if fleet.by_owner.get(c.owner)]
    if not present:
        return None
    with fleet.without(c.owner for c in present):
        if not place(fleet, request).ok:
            return None
    best: tuple[tuple[int, int, int, int], Preemption] | None = None
    for order in (_by_priority(fleet, present), _by_domain(fleet, present)):
        found = _greedy(fleet, request, order)
        if found is None:
            continue
        score = _cost(fleet, present, found.victims)
        if best is None or score < best[0]:
            best = (score, found)
    if best is None:
        return None
    return _fewer(fleet, request, present, best[1])


def kept(fleet: Fleet, request: Request, candidates: Sequence[Candidate]
         ) -> Preemption | None:
    """The CANDIDATES already being preempted for this gang, while their removal still
    lets REQUEST be placed (one placement, not a search): what a gang without a turn at
    the search marks again (decide.turns). None when they no longer make room."""
    owners = tuple(c.owner for c in candidates if c.preempting and fleet.by_owner.get(c.owner))
    if not owners:
        return None
    placed = _fits(fleet, request, owners)
    return Preemption(owners, placed) if placed.ok else None


def _fits(fleet: Fleet, request: Request, owners: Iterable[str]) -> Placement:
    with fleet.without(owners):
        return place(fleet, request)


def _greedy(fleet: Fleet, request: Request, order: list[Candidate]) -> Preemption | None:
    removed: list[Candidate] = []
    for candidate in order:
        removed.append(candidate)
        if _fits(fleet, request, (c.owner for c in removed)).ok:
            break
    else:
        return None
    # give back each victim the gang can do without, the most important first
    for candidate in sorted(removed, key=lambda c: (-c.priority, c.preempting, c.owner)):
        rest = [c for c in removed if c is not candidate]
        if rest and _fits(fleet, request, (c.owner for c in rest)).ok:
            removed = rest
    victims = tuple(c.owner for c in removed)
    return Preemption(victims, _fits(fleet, request, victims))


def _fewer(fleet: Fleet, request: Request, candidates: Sequence[Candidate],
           greedy: Preemption) -> Preemption:
    """The fewest victims: GREEDY, or a smaller set of CANDIDATES (none of a higher
    priority than GREEDY's highest) that lets REQUEST be placed; of the smallest size
    that does, the cheapest (`_cost`). Within the budget, or GREEDY marked not exact."""
    if len(greedy.victims) <= 1:
        return greedy
    ceiling = max(c.priority for c in candidates if c.owner in greedy.victims)
    pool = sorted((c for c in candidates if c.priority <= ceiling),
                  key=lambda c: (not c.preempting, c.priority, -_held(fleet, c.owner),
                                 c.owner))
    held = {c.owner: _held(fleet, c.owner) for c in pool}
    short = _shortfall(fleet, request)
    largest = sorted(held.values(), reverse=True)
    trials = looked = 0
    for size in range(1, len(greedy.victims)):
        if sum(largest[:size]) < short:
            continue  # no SIZE of them free enough
        found: list[tuple[tuple[int, int, int, int], Preemption]] = []
        for combo in itertools.combinations(pool, size):
            looked += 1
            if looked > COMBINATIONS or trials >= TRIALS:
                return replace(greedy, exact=False)
            owners = [c.owner for c in combo]
            if sum(held[o] for o in owners) < short:
                continue  # frees too little to be worth a placement
            trials += 1
            placed = _fits(fleet, request, owners)
            if placed.ok:
                found.append((_cost(fleet, candidates, owners),
                              Preemption(tuple(owners), placed)))
        if found:
            return min(found, key=lambda f: f[0])[1]
    return greedy


def _shortfall(fleet: Fleet, request: Request) -> int:
    """Accelerators the gang needs beyond what is free in the whole fleet: a set of
    victims holding fewer cannot make room (a cheap test before a placement)."""
    free = sum(node.free for node in fleet.nodes.values() if node.healthy)
    return request.workers * request.accelerators - free


def _held(fleet: Fleet, owner: str) -> int:
    return sum(fleet.pods[key][1] for key in fleet.by_owner.get(owner, ()))


def _cost(fleet: Fleet, candidates: Sequence[Candidate], victims: Sequence[str]
          ) -> tuple[int, int, int, int]:
    """The highest priority preempted (never a higher one than needed: the priority
    order finds the lowest possible), then fewer victims, fewer accelerators, lower
    priorities in all."""
    priority = {c.owner: c.priority for c in candidates}
    return (max(priority[v] for v in victims), len(victims),
            sum(_held(fleet, v) for v in victims), sum(priority[v] for v in victims))


def _by_priority(fleet: Fleet, candidates: Sequence[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (not c.preempting, c.priority,
                                             _held(fleet, c.owner), c.owner))


def _by_domain(fleet: Fleet, candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates whole domain by whole domain: among the domains only candidates use,
    the next is the one that adds the fewest new victims (a job spanning two domains
    clears both for one), then the lowest priority among them, the fewest accelerators,
    fabric order; the candidates in no such domain come last, lowest priority first."""
    by_owner = {c.owner: c for c in candidates}
    clearable: list[tuple[set[str], int, tuple[object, ...]]] = []
    for domain in fleet.ordered_domains():
        users = {owner for node in domain.nodes for _, _, owner in node.pods.values()}
        if users and users <= by_owner.keys():  # held only by what may be preempted
            held = sum(count for node in domain.nodes for _, count, _ in node.pods.values())
            clearable.append((users, held, domain.order))
    chosen: dict[str, None] = {}
    while clearable:
        def cost(entry: tuple[set[str], int, tuple[object, ...]]) -> tuple[object, ...]:
            new = entry[0] - chosen.keys()
            return (len(new), max((by_owner[u].priority for u in new), default=0),
                    entry[1], entry[2])
        best = min(clearable, key=cost)
        clearable.remove(best)
        for user in sorted(best[0] - chosen.keys(),
                           key=lambda u: (not by_owner[u].preempting, by_owner[u].priority, u)):
            chosen[user] = None
    rest = sorted((c for c in candidates if c.owner not in chosen),
                  key=lambda c: (not c.preempting, c.priority, c.owner))
    return [by_owner[owner] for owner in chosen] + rest
