"""Placing an InferenceEndpoint's replica groups: each whole, gated group, then each new
one (its pods by rank, not created yet), inside one domain, on nodes its pods fit (as the
group's fabric dresses them); with roles, inside a serving unit (decide.units). Each is
reserved at once so the next group (and the next endpoint) sees it. A gated group is
pinned; a new one placed now is created pinned, one write per pod instead of a gated
create and a pin a pass later. A gated group that does not fit stays gated, whole; a new
one that does not fit is not created: a group that is not placed costs no pods
(TENANCY.md, rule 4: one namespace's thousands of endpoints made thousands of gated pods
that every pass and every new leader listed), and it is asked for again, whole, in the
next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.api.views import EndpointView
from goodput_operator.decide.roles import RolePlan, role_requests, units_of
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import Event, Reservation
from goodput_operator.decide.units import Pending, Scopes, place_units
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import pinned
from goodput_operator.topology.model import Fleet, endpoint_owner
from goodput_operator.topology.placement import Placement, Request, place

Obj = dict[str, Any]


@dataclass(frozen=True)
class GroupsPlaced:
    """The groups placed this pass: their reservations, the new groups' pods to create
    pinned, the gated groups' pods to pin (pod, node, domain), an event, and why each
    group left waiting did."""

    reservations: list[Reservation] = field(default_factory=list)
    create: list[Obj] = field(default_factory=list)
    pin: list[tuple[Obj, str, str]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


def place_groups(snapshot: Snapshot, view: EndpointView, spec: InferenceEndpointSpec,
                 scopes: Scopes | None, plans: list[RolePlan], fabric: Fabric
                 ) -> GroupsPlaced:
    """Place the PLANS' groups waiting for a place (the longest waiting first), in the
    serving units of SCOPES (None: a single-role endpoint, anywhere)."""
    pending = [Pending(rp.role.name, index) for rp in plans
               for index in [*rp.plan.place, *rp.new]]
    if not pending:
        return GroupsPlaced()
    namespace, name = view.key
    fleet = snapshot.fleets[spec.ultra_server_group]
    owner = endpoint_owner(namespace, name)
    by_role = {rp.role.name: rp for rp in plans}
    requests = role_requests(snapshot.nodes, snapshot.memo, fleet, view.obj, spec, fabric)
    placed = GroupsPlaced()
    done: list[tuple[str, str, str]] = []  # (group, domain, why)

    def bind(item: Pending, where: Placement) -> None:
        rp = by_role[item.role]
        new = item.index in rp.new
        pods = rp.new[item.index] if new else rp.plan.groups[item.index].pods
        accelerators = requests[item.role].accelerators
        done.append((build.group_id(item.role, item.index), where.ranks[0].domain,
                     where.reason))
        for rank in where.ranks:
            pod = pods[rank.rank]
            key = f"{namespace}/{pod['metadata']['name']}"
            fleet.bind(key, rank.node, accelerators, owner)
            placed.reservations.append(Reservation(spec.ultra_server_group, key, rank.node,
                                                   accelerators, owner))
            if new:
                placed.create.append(pinned(pod, rank.node, rank.domain))
            else:
                placed.pin.append((pod, rank.node, rank.domain))

    left = _placed(fleet, scopes, plans, pending, requests, bind)
    placed.waiting.extend(f"group {build.group_id(item.role, item.index)}: {why}"
                          for item, why in left.items())
    if done:  # one event a pass, not one a group: a rollout's 9,000 groups were 9,000 POSTs
        placed.events.append(Event("Normal", "Placed", f"group {done[0][0]}: {done[0][2]}"
                                   if len(done) == 1 else
                                   f"{len(done)} groups placed, each inside one "
                                   f"{fleet.shape.domain_noun}: "
                                   + ", ".join(f"{i} in {d}" for i, d, _ in done)))
    return placed


def _placed(fleet: Fleet, scopes: Scopes | None, plans: list[RolePlan],
            pending: list[Pending], requests: Mapping[str, Request],
            bind: Callable[[Pending, Placement], None]) -> dict[Pending, str]:
    """Each of PENDING placed (BIND called for it), anywhere or in its serving unit;
    why each left waiting did."""
    if scopes is None:
        left = {}
        for item in pending:
            where = place(fleet, requests[item.role])
            if where.ok:
                bind(item, where)
            else:
                left[item] = where.reason
        return left
    return place_units(scopes, units_of(scopes, plans), pending, requests, bind)
