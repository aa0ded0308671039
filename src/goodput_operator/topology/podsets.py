"""Pod sets placed together with a gang: a leader or launcher beside its workers, in one
decision, all or none, within a required level of the workers' placement.

A companion set is COUNT pods of ACCELERATORS each (0: CPU only) that must land `near`
the workers: in one of the workers' domains (`domain`), in one of their network blocks
(`block`), or anywhere in the group (`any`). The workers are placed as usual
(placement.place: fewest domains, least fragmentation); the companions then take the
nodes near them, best fit first, on nodes the gang already uses before fresh ones, so
that a leader never breaks a whole domain. When the workers' best placement leaves no
room near them for companions that need accelerators, the gang is placed once more with
that room held inside it (one extra worker slot per such companion, at the end of the
fabric order) — still within the gang's own required domain count — and the companions
take the held slots. When that cannot be (balance or slices on, a companion larger than a
worker) or does not help, the workers are placed again away from the domains tried, a
few times, until a placement holds the companions too. Nothing is reserved here: the
caller reserves what it gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from goodput_operator.topology.model import Domain, Fleet, Node
from goodput_operator.topology.placement import (
    Companion,
    CompanionSlot,
    Near,
    Placement,
    Request,
    place_gang,
)

__all__ = ["Companion", "Near", "companions_near", "place_together"]
SCRATCH = "scratch/pod-sets"  # the trial bindings made while solving, released after
ELSEWHERE = 8  # other placements of the workers tried for room for their companions


def place_together(fleet: Fleet, request: Request) -> Placement:
    """Place the gang of REQUEST and every pod of its companions, or explain why not."""
    companions = request.companions
    request = dataclasses.replace(request, companions=())
    placed = place_gang(fleet, request)
    if not companions or not placed.ok:
        return placed
    slots = companions_near(fleet, placed, request, companions)
    if isinstance(slots, list):
        return _with(placed, slots)
    why = slots
    held = sum(c.count for c in companions if c.accelerators)
    if held and request.slice == 1 and not request.balance and \
            all(c.accelerators <= request.accelerators for c in companions):
        roomy = _room_held(fleet, request, companions, placed, slots, held)
        if roomy.ok:
            return roomy
        why = roomy.reason
    moved = _elsewhere(fleet, request, companions, placed)
    return moved if moved is not None else Placement(False, why,
                                                     min_domains=placed.min_domains)


def _room_held(fleet: Fleet, request: Request, companions: Sequence[Companion],
               placed: Placement, slots: str, held: int) -> Placement:
    """The gang placed once more with a worker's slot HELD for each companion pod that
    needs accelerators (at the end of the fabric order), the companions in those slots."""
    roomy = place_gang(fleet, dataclasses.replace(request, workers=request.workers + held))
    if not roomy.ok:
        return Placement(False, slots, min_domains=placed.min_domains)
    workers = roomy.ranks[:request.workers]
    domains = tuple(dict.fromkeys(r.domain for r in workers))
    if request.policy == "required" and request.unit == "domain" and \
            len(domains) > placed.min_domains:
        return Placement(False, f"{slots}; with room for them the workers would span "
                                f"{len(domains)} {fleet.shape.domain_noun}s, more than "
                                f"the {placed.min_domains} they need",
                         min_domains=placed.min_domains)
    reason = roomy.reason.replace(f"{request.workers + held} workers",
                                  f"{request.workers} workers", 1)
    narrowed = dataclasses.replace(roomy, ranks=workers, domains=domains,
                                   min_domains=placed.min_domains,
                                   reason=f"{reason} (room held beside them)")
    again = companions_near(fleet, narrowed, request, companions)
    if isinstance(again, str):
        return Placement(False, again, min_domains=placed.min_domains)
    return _with(narrowed, again)


def _elsewhere(fleet: Fleet, request: Request, companions: Sequence[Companion],
               placed: Placement) -> Placement | None:
    """The workers placed again away from the domains whose neighbourhood could not take
    the companions, up to ELSEWHERE times, within the gang's required domain count: the
    tightest fit for the workers alone may be the one place a leader does not fit, and
    with balance, slices or a companion larger than a worker no slot can be held for it
    inside the gang. None when no such placement holds them all. The tried domains are
    left out by domain (`within`), not node by node: an eligible set of every other node
    made each try count the whole fleet again (a whole-UltraServer gang with a leader on
    Trn3 Gen2's 36-node domains took 130 ms at 10k chips, where every try fails alike)."""
    allowed = request.within if request.within is not None else frozenset(fleet.domains)
    tried = set(placed.domains)
    for _ in range(ELSEWHERE):
        again = place_gang(fleet, dataclasses.replace(request, within=allowed - tried))
        if not again.ok or (request.policy == "required" and request.unit == "domain"
                            and len(again.domains) > placed.min_domains):
            return None
        slots = companions_near(fleet, again, request, companions)
        if isinstance(slots, list):
            noun = fleet.shape.domain_noun
            return _with(dataclasses.replace(
                again, min_domains=placed.min_domains,
                reason=f"{again.reason} (no room for them near the workers in "
                       f"{', '.join(sorted(tried))}: another {noun} chosen)"), slots)
        tried |= set(again.domains)
    return None


def _with(placed: Placement, slots: list[CompanionSlot]) -> Placement:
    sets: dict[str, list[str]] = {}
    for slot in slots:
        sets.setdefault(slot.name, []).append(slot.node)
    said = "; ".join(f"{name} on {', '.join(dict.fromkeys(nodes))}"
                     for name, nodes in sets.items())
    return dataclasses.replace(placed, companions=tuple(slots),
                               reason=f"{placed.reason}; {said}")


def companions_near(fleet: Fleet, placed: Placement, request: Request,
                    companions: Sequence[Companion]) -> list[CompanionSlot] | str:
    """The companions' nodes near the placed workers (trial bindings, released before
    returning), or why they do not fit there."""
    try:
        fleet.hold(placed.ranks, request.accelerators, SCRATCH)
        gang_nodes = {rank.node for rank in placed.ranks}
        slots: list[CompanionSlot] = []
        for companion in companions:
            scope = _scope(fleet, placed, companion.near)
            for index in range(companion.count):
                node = _best_node(scope, companion, gang_nodes)
                if node is None:
                    return _explain(fleet, companion, placed)
                fleet.bind(f"{SCRATCH}#{companion.name}#{index}", node.name,
                           companion.accelerators, SCRATCH)
                slots.append(CompanionSlot(companion.name, index, node.name, node.domain))
        return slots
    finally:
        fleet.release_owner(SCRATCH)


def _scope(fleet: Fleet, placed: Placement, near: Near) -> list[Domain]:
    """The domains a companion may use, the workers' own first (in fabric order)."""
    used = [fleet.domains[d] for d in placed.domains if d in fleet.domains]
    if near == "domain":
        return used
    paths = {d.path for d in used}
    others = [d for d in fleet.ordered_domains() if d.id not in placed.domains
              and (near == "any" or d.path in paths)]
    return used + others


def _best_node(scope: list[Domain], companion: Companion, gang_nodes: set[str]
               ) -> Node | None:
    """The node in SCOPE that takes one pod of COMPANION best: one the gang already uses,
    then one already in use, the tightest fit, the cleanest history, the earliest in the
    scope's order."""
    best: tuple[tuple[bool, bool, int, float, int], Node] | None = None
    position = 0
    for domain in scope:
        for node in domain.nodes:
            position += 1
            if not node.usable or node.free < companion.accelerators or (
                    companion.eligible is not None and node.name not in companion.eligible):
                continue
            key = (node.name not in gang_nodes, node.used == 0,
                   node.free - companion.accelerators, node.lemon, position)
            if best is None or key < best[0]:
                best = (key, node)
    return best[1] if best is not None else None


def _explain(fleet: Fleet, companion: Companion, placed: Placement) -> str:
    noun = fleet.shape.domain_noun
    where = {"domain": f"the workers' {noun}s ({', '.join(placed.domains)})",
             "block": "the workers' network blocks", "any": "the group"}[companion.near]
    what = (f"{companion.accelerators} {fleet.shape.accelerator_resource}"
            if companion.accelerators else "a healthy node")
    limits = (f"; its pod fits only {len(companion.eligible)} of the group's "
              f"{len(fleet.nodes)} nodes" + (f" ({companion.ineligible})"
                                             if companion.ineligible else "")
              ) if companion.eligible is not None else ""
    return (f"pod set {companion.name} ({companion.count} x {what}) finds no room in "
            f"{where} beside the workers{limits}")
