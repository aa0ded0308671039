"""Keeping a placement's topology when nodes fail, and freeing whole domains on scale-down.

Replacement (any number of failed nodes): each failed rank keeps its rank number and gets,
in order of preference, a spare in the same domain, a free node in the same domain, then
(unless the job requires its domains) a spare or free node in the same network block, then
anywhere. When the topology cannot be kept, the whole gang moves to domains that hold it (spares
count there: recovery is what they are held for);
failing that it shrinks within its elastic bounds, or waits — and the result says why.
An elastic gang running below its size grows back (`grow`) once a larger gang fits again.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from goodput_operator.topology.model import Domain, Fleet, Node
from goodput_operator.topology.placement import (
    Placement,
    RankSlot,
    Request,
    domain_capacity,
    place,
)

Action = Literal["replace", "move", "shrink", "grow", "wait"]


@dataclass(frozen=True)
class Elastic:
    min_workers: int
    step: int = 1


@dataclass(frozen=True)
class Replacement:
    action: Action
    reason: str
    ranks: tuple[RankSlot, ...] = ()  # the gang's new ranks (replace/move/shrink)
    moved: dict[int, str] | None = None  # rank -> new node, for `replace`


def replace(fleet: Fleet, current: Placement, failed: Iterable[str], request: Request,
            owner: str, elastic: Elastic | None = None, spares_only: bool = False
            ) -> Replacement:
    """New positions for a gang whose nodes in `failed` are lost.

    The fleet must already show the failed nodes as unhealthy; the gang's own usage (pods
    of `owner`) is still recorded and is treated as released where it moves. SPARES_ONLY
    (failurePolicy.nodeReplacement: spare): a failed rank goes to a spare or nowhere; free
    nodes are left to new gangs, and the gang moves whole instead.
    """
    failed_set = set(failed)
    lost = [r for r in current.ranks if r.node in failed_set]
    if not lost:
        return Replacement("replace", "no rank is on a failed node", current.ranks, {})
    # a balanced or sliced gang keeps its per-domain counts, and a whole-domain one (a TPU
    # slice) its domains: a rank moves only inside its domain (else the gang is placed
    # again)
    keep_domains = request.balance or request.slice > 1 or fleet.shape.whole_domains or (
        request.unit == "domain" and request.policy == "required")
    keep_block = request.unit == "block" and request.policy == "required"
    # accelerators held beyond what the fleet counts: the kept ranks' and the replacements'
    reserved = _held_elsewhere(fleet, current, failed_set, request, owner)
    moved: dict[int, str] = {}
    for rank in lost:
        node = _candidate(fleet, rank, request, reserved, keep_domains, keep_block,
                          spares_only)
        if node is None:
            break
        reserved[node.name] += request.accelerators
        moved[rank.rank] = node.name
    if len(moved) == len(lost):
        ranks = tuple(
            RankSlot(r.rank, moved[r.rank], fleet.nodes[moved[r.rank]].domain,
                     fleet.nodes[moved[r.rank]].slot) if r.rank in moved else r
            for r in current.ranks)
        where = ", ".join(f"rank {k} -> {v}" for k, v in sorted(moved.items()))
        return Replacement("replace", f"replaced {len(moved)} failed rank(s) keeping the "
                                      f"topology: {where}", ranks, moved)
    return _move_or_shrink(fleet, request, owner, lost, elastic)


def _held_elsewhere(fleet: Fleet, current: Placement, failed: set[str], request: Request,
                    owner: str) -> Counter[str]:
    """Accelerators the gang's kept ranks hold that the fleet no longer counts, by node: a
    worker that exited when its peer's node failed has released its node in the fleet,
    but its rank stays there through the restart, and no lost rank may take its place."""
    kept = Counter(r.node for r in current.ranks if r.node not in failed)
    held: Counter[str] = Counter()
    for name, ranks in kept.items():
        node = fleet.nodes.get(name)
        if node is None:
            continue
        counted = sum(use[1] for use in node.pods.values() if use[2] == owner)
        if ranks * request.accelerators > counted:
            held[name] = ranks * request.accelerators - counted
    return held


def _candidate(fleet: Fleet, rank: RankSlot, request: Request, reserved: Counter[str],
               keep_domains: bool, keep_block: bool, spares_only: bool) -> Node | None:
    home = fleet.domains.get(rank.domain)
    home_path = home.path if home else ()

    def room(node: Node) -> bool:
        free = node.free - reserved[node.name]
        return node.healthy and free >= request.accelerators and (
            request.eligible is None or node.name in request.eligible)

    def places() -> Iterator[list[Domain]]:  # nearest first: the home domain, its block,
        if home is not None:                  # the rest (listed only when nearer has none)
            yield [home]
        if keep_domains:
            return
        ordered = fleet.ordered_domains()
        yield [d for d in ordered if d.path == home_path and d is not home]
        if not keep_block:
            yield [d for d in ordered if d.path != home_path]

    def nearest(node: Node) -> tuple[float, int]:
        # nearest slot first (a replacement next to the failed node keeps rings short),
        # repeat offenders last; among equals, the first in fabric order
        return node.lemon, abs(node.slot - rank.slot)

    def fitting(domains: list[Domain], spare: bool) -> Iterator[Node]:
        for domain in domains:
            if not spare and domain_capacity(domain, request.accelerators) == 0:
                continue  # no usable node of it has room (a count cached per domain)
            yield from (n for n in domain.nodes if n.spare == spare and room(n))

    for domains in places():
        # in each place its spares first, then (unless SPARES_ONLY) its other nodes
        for spare in (True,) if spares_only else (True, False):
            found = min(fitting(domains, spare), key=nearest, default=None)
            if found is not None:
                return found
    return None


def _move_or_shrink(fleet: Fleet, request: Request, owner: str, lost: Sequence[RankSlot],
                    elastic: Elastic | None) -> Replacement:
    with _released(fleet, owner), fleet.spares_released():  # what spares are held for
        return _relocate(fleet, request, lost, elastic)


@contextlib.contextmanager
def _released(fleet: Fleet, owner: str) -> Iterator[None]:
    """The fleet without OWNER's own usage: the gang's nodes count as free where it
    is placed anew (its pods are all replaced by the next attempt's)."""
    saved = {k: fleet.pods[k] for k in fleet.by_owner.get(owner, ())}
    fleet.release_owner(owner)
    try:
        yield
    finally:
        for key, use in saved.items():
            fleet.bind(key, *use)


def grow(fleet: Fleet, running: int, request: Request, owner: str, elastic: Elastic
         ) -> Replacement | None:
    """A larger placement for an elastic gang of RUNNING workers below its size
    (REQUEST.workers): the largest size, in ELASTIC.step units above RUNNING, that fits
    now on its own nodes and free ones; None when none does. Spares are left alone: they
    are held for recovery, and a gang that grew onto them would shrink again at the next
    failure."""
    with _released(fleet, owner):
        size = request.workers
        while size > running:
            larger = place(fleet, dataclasses.replace(request, workers=size))
            if larger.ok:
                return Replacement("grow", f"growing from {running} to {size} workers: "
                                           f"{larger.reason}", larger.ranks)
            size -= elastic.step
    return None


def _relocate(fleet: Fleet, request: Request, lost: Sequence[RankSlot],
              elastic: Elastic | None) -> Replacement:
    moved = place(fleet, request)
    if moved.ok:
        return Replacement("move", f"no spare keeps the topology for {len(lost)} failed "
                                   f"rank(s); moving the gang: {moved.reason}", moved.ranks)
    if elastic is not None:
        size = request.workers - elastic.step
        while size >= elastic.min_workers:
            smaller = place(fleet, dataclasses.replace(request, workers=size))
            if smaller.ok:
                return Replacement("shrink", f"shrinking to {size} workers: "
                                             f"{smaller.reason}", smaller.ranks)
            size -= elastic.step
    return Replacement("wait", f"cannot replace {len(lost)} failed rank(s): {moved.reason}")


@dataclass(frozen=True)
class ReplicaGroup:
    """One multi-node inference replica: its id and the domain it sits in."""

    id: str
    domain: str


def choose_scale_down(groups: Sequence[ReplicaGroup], remove: int) -> list[str]:
    """Which replica groups to remove so that whole domains free up: empty the domains
    holding the fewest groups first; among equals, the newest groups (last listed)."""
    if remove <= 0:
        return []
    per_domain = Counter(g.domain for g in groups)
    position = {g.id: i for i, g in enumerate(groups)}
    ordered = sorted(groups, key=lambda g: (per_domain[g.domain], g.domain, -position[g.id]))
    return [g.id for g in ordered[:remove]]
