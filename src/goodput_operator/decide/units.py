"""Serving units of a disaggregated endpoint (spec.roles): decode replica groups anchor
them, prefill groups join them, and a unit's groups share one affinity scope (a domain,
or a network block) so that KV-cache transfers stay inside it.

Level-based like the rest of the endpoint: units are read each pass from where the live
groups are (the scope of each decode group's domain), never stored.
- Every unit keeps a prefill replica: the prefill pool is at least as large as the unit
  count, and scaling it down never takes a unit's last one.
- A prefill group in a scope without decode groups (its unit's decode groups are gone)
  is an orphan: it is replaced, and the replacement joins a unit.
- A new or waiting group joins the unit where its role is scarcest beside the other
  role, if one has room; a decode group that opens a new unit is placed together with a
  prefill group (a waiting one, or room held for the one the unit will ask for), all or
  none.
- Scaling a pool down takes groups from the units where its role is most plentiful, so
  units empty last.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from goodput_operator.api.inferenceendpoint import RatioBound
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Placement, Request, domain_capacity, place

DECODE: Final = "decode"
PREFILL: Final = "prefill"
HELD = "scratch/unit-room"  # room held for a new unit's first prefill group while solving
NEW_UNIT_TRIES = 32  # scopes tried for a new unit beyond the decode group's best placement


class Scopes:
    """The group's unit scopes: each domain's (itself, or its network block: the group's
    network path, outermost first), and each scope's domains in fabric order; made once
    per endpoint pass."""

    def __init__(self, fleet: Fleet, affinity: str) -> None:
        self.fleet = fleet
        self.of: dict[str, str] = {}
        self.domains: dict[str, list[str]] = {}
        for domain in fleet.ordered_domains():
            scope = domain.id if affinity == "Domain" else "/".join(domain.path) or "all"
            self.of[domain.id] = scope
            self.domains.setdefault(scope, []).append(domain.id)
        self.noun = fleet.shape.domain_noun if affinity == "Domain" else "network block"

    def scope(self, domain: str) -> str | None:
        """The scope holding DOMAIN; None for a group not placed yet."""
        return self.of.get(domain) if domain else None

    def has_room(self, scope: str, request: Request) -> bool:
        """Whether SCOPE's free room could hold REQUEST's workers (a quick upper bound)."""
        return sum(domain_capacity(self.fleet.domains[d], request.accelerators,
                                   request.eligible)
                   for d in self.domains.get(scope, [])) >= request.workers

    def within(self, request: Request, scope: str) -> Request:
        return replace(request, within=frozenset(self.domains.get(scope, [])))


@dataclass
class Units:
    """Where each role's live groups are: scope -> role -> group indexes."""

    members: dict[str, dict[str, list[int]]]

    @classmethod
    def of(cls, scopes: Mapping[str, Mapping[int, str | None]]) -> Units:
        """SCOPES: role -> group index -> scope (None: not placed)."""
        units = cls({})
        for role, groups in scopes.items():
            for index, scope in sorted(groups.items()):
                if scope is not None:
                    units.join(scope, role, index)
        return units

    def units(self) -> list[str]:
        """Scopes anchored by a decode group, in name order."""
        return sorted(s for s, m in self.members.items() if m[DECODE])

    def count(self, scope: str, role: str) -> int:
        return len(self.members.get(scope, {}).get(role, []))

    def orphaned(self) -> list[str]:
        """Scopes holding prefill groups but no decode group (their unit lost it)."""
        return sorted(s for s, m in self.members.items() if m[PREFILL] and not m[DECODE])

    def join(self, scope: str, role: str, index: int) -> None:
        self.members.setdefault(scope, {DECODE: [], PREFILL: []})[role].append(index)


def prefill_wanted(prefill: int, decode: int, units: int, bound: RatioBound | None
                   ) -> tuple[int, str]:
    """The prefill pool's size: PREFILL (its autoscaler's or its replicas) within BOUND
    of the DECODE pool's size, and at least one per unit; and why, when it moved."""
    wanted, why = prefill, ""
    if bound is not None:
        low, high = math.ceil(bound.min * decode - 1e-9), math.floor(bound.max * decode + 1e-9)
        if wanted < low:
            wanted, why = low, f"at least {bound.min:g} per decode replica ({decode})"
        elif wanted > high:
            wanted, why = max(high, 1), f"at most {bound.max:g} per decode replica ({decode})"
    if wanted < units:
        wanted, why = units, f"one in each of the {units} serving units"
    return wanted, why


def removal_order(role: str, mine: Mapping[int, str | None], units: Units, count: int,
                  orphans_first: bool = True) -> list[int]:
    """COUNT groups of ROLE to remove (MINE: index -> scope): those not placed first,
    then prefill orphans (unless a decode group is on its way, which may anchor them
    again: not ORPHANS_FIRST), then from the unit where ROLE is most plentiful beside
    the other role; each unit keeps its last group of ROLE while it can."""
    other = PREFILL if role == DECODE else DECODE
    left = {i: s for i, s in mine.items()}
    here = Counter(s for s in left.values() if s is not None)
    chosen: list[int] = []
    while len(chosen) < count and left:
        def cost(index: int) -> tuple[int, int, float, str, int]:
            scope = left[index]
            if scope is None:
                return (0, 0, 0.0, "", -index)  # not placed: costs nothing
            if orphans_first and role == PREFILL and not units.count(scope, DECODE):
                return (1, 0, 0.0, scope, -index)  # an orphan
            plenty = here[scope] / max(units.count(scope, other), 1)
            return (2, int(here[scope] == 1), -plenty, scope, -index)
        index = min(left, key=cost)
        scope = left.pop(index)
        if scope is not None:
            here[scope] -= 1
        chosen.append(index)
    return chosen


@dataclass(frozen=True)
class Pending:
    """A group of ROLE to place: gated (its pods exist) or new (created when placed)."""

    role: str
    index: int


def place_units(scopes: Scopes, units: Units, pending: Sequence[Pending],
                requests: Mapping[str, Request],
                bind: Callable[[Pending, Placement], None]) -> dict[Pending, str]:
    """Place PENDING groups (decode first) in units, calling BIND for each placed (it
    reserves the nodes); returns why each group left waiting did."""
    waiting: dict[Pending, str] = {}

    def settle(item: Pending, placed: Placement) -> None:
        bind(item, placed)
        units.join(scopes.of[placed.ranks[0].domain], item.role, item.index)

    prefills = [p for p in pending if p.role == PREFILL]
    for item in [p for p in pending if p.role == DECODE]:
        placed = _into_unit(scopes, units, item, requests)
        if placed.ok:
            settle(item, placed)
            continue
        partner = prefills.pop(0) if prefills else None
        pair = _new_unit(scopes, units, requests, partner is not None)
        if isinstance(pair, str):
            waiting[item] = f"{placed.reason}; {pair}"
            if partner is not None:
                prefills.insert(0, partner)
            continue
        settle(item, pair[0])
        if partner is not None and pair[1] is not None:
            settle(partner, pair[1])
    for item in prefills:
        placed = _into_unit(scopes, units, item, requests)
        if placed.ok:
            settle(item, placed)
        else:
            waiting[item] = placed.reason
    return waiting


def room_in_units(scopes: Scopes, units: Units, requests: Mapping[str, Request], role: str,
                  limit: int) -> int:
    """How many more groups of ROLE the serving units can take now (at most LIMIT): in a
    unit with room, or, for decode, in a new unit with a prefill group's room beside it;
    placed one after another on scratch bindings, released afterwards (the autoscaler's
    capacity check: a unit is one request)."""
    fleet = scopes.fleet
    owner = "scratch/room-in-units"
    units = Units({s: {r: list(m[r]) for r in m} for s, m in units.members.items()})
    count = 0
    try:
        while count < limit:
            placed = _into_unit(scopes, units, Pending(role, -1 - count), requests)
            taken = [(role, placed)]
            if not placed.ok:
                pair = _new_unit(scopes, units, requests, True) if role == DECODE else ""
                if isinstance(pair, str) or pair[1] is None:
                    break
                taken = [(DECODE, pair[0]), (PREFILL, pair[1])]
            for name, where in taken:
                fleet.hold(where.ranks, requests[name].accelerators, owner,
                           f"{owner}#{count}#{name}")
                units.join(scopes.of[where.ranks[0].domain], name, -1 - count)
            count += 1
    finally:
        fleet.release_owner(owner)
    return count


def _into_unit(scopes: Scopes, units: Units, item: Pending, requests: Mapping[str, Request]
               ) -> Placement:
    """The group of ITEM in the unit where its role is scarcest, or why none has room (a
    decode group may also anchor again a scope whose prefill groups lost theirs)."""
    other = PREFILL if item.role == DECODE else DECODE
    request = requests[item.role]
    candidates = units.units() + (units.orphaned() if item.role == DECODE else [])
    order = sorted((s for s in candidates if scopes.has_room(s, request)),
                   key=lambda s: (units.count(s, item.role) / max(units.count(s, other), 1), s))
    for scope in order:
        placed = place(scopes.fleet, scopes.within(request, scope))
        if placed.ok:
            return placed
    return Placement(False, f"no serving unit has room for another {item.role} replica"
                            if candidates else f"no serving unit yet (a unit is one "
                                               f"{scopes.noun})")


def _new_unit(scopes: Scopes, units: Units, requests: Mapping[str, Request], partner: bool
              ) -> tuple[Placement, Placement | None] | str:
    """A decode group and a prefill group placed together in one scope that is not a
    unit yet: the decode group's best placement first, then the other scopes with room
    for both (at most NEW_UNIT_TRIES). With no PARTNER waiting, the prefill group's room
    is checked and left free."""
    fleet = scopes.fleet
    decode, prefill = requests[DECODE], requests[PREFILL]
    taken = set(units.units()) | set(units.orphaned())

    def pair(request: Request) -> tuple[Placement, Placement | None] | None:
        first = place(fleet, request)
        if not first.ok or scopes.of[first.ranks[0].domain] in taken:
            return None
        scope = scopes.of[first.ranks[0].domain]
        try:
            fleet.hold(first.ranks, decode.accelerators, HELD)
            second = place(fleet, scopes.within(prefill, scope)) \
                if scopes.has_room(scope, prefill) else None
        finally:
            fleet.release_owner(HELD)
        return (first, second if partner else None) if second and second.ok else None

    found = pair(decode)
    if found is not None:
        return found
    candidates = [s for s in scopes.domains if s not in taken
                  and scopes.has_room(s, decode) and scopes.has_room(s, prefill)]
    for scope in candidates[:NEW_UNIT_TRIES]:
        found = pair(scopes.within(decode, scope))
        if found is not None:
            return found
    return (f"no free {scopes.noun} holds a decode replica and a prefill replica together "
            f"(a new serving unit)")
