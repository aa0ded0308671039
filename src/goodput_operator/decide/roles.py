"""How many replica groups each role of an InferenceEndpoint has, and which: the role's
size (its autoscaler's latest decision within its bounds, decide.endpoint.desired_replicas;
for prefill, bounded by the decode pool and the serving units, decide.units), capped at 0
while Kueue has not admitted it; then its groups planned toward it (decide.replicas). And
the most groups a role could have now (`scaling_ceiling`): the figure the autoscaler
scales within.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import names
from goodput_operator.api.inferenceendpoint import (
    InferenceEndpointSpec,
    ReplicaShape,
    ServingRole,
)
from goodput_operator.api.statuses import UnitStatusDict
from goodput_operator.decide.fit import pod_fit
from goodput_operator.decide.replicas import (
    EndpointPlan,
    Group,
    Trouble,
    Wanted,
    groups_of,
    plan_groups,
)
from goodput_operator.decide.snapshot import Scaled, Snapshot
from goodput_operator.decide.standby import borrowers
from goodput_operator.decide.types import Memo
from goodput_operator.decide.units import (
    DECODE,
    PREFILL,
    Scopes,
    Units,
    prefill_wanted,
    removal_order,
    room_in_units,
)
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import FINISHED
from goodput_operator.topology.model import Fleet
from goodput_operator.topology.placement import Request, room_for

Obj = dict[str, Any]


@dataclass(frozen=True)
class RolePlan:
    """One role's pass: its groups' plan and the decisions behind it."""

    role: ServingRole
    plan: EndpointPlan
    desired: int
    scaled: Scaled | None  # its autoscaler's latest decision (None: no scaling)
    held: str = ""  # why its size is not its own decision (prefillPerDecode, units)
    new: dict[int, dict[int, Obj]] = field(default_factory=dict)  # index -> member -> pod

    @property
    def size(self) -> int:
        return self.role.shape.workers


def placed_groups(pods: Iterable[Obj], size: int) -> int:
    """Groups whose every member holds a node (bound, or pinned and reserved)."""
    groups = groups_of([p for p in pods if p.get("status", {}).get("phase") not in FINISHED])
    return sum(1 for g in groups.values() if len(g.pods) == size and all(g.nodes()))


def request_of(shape: ReplicaShape, eligible: frozenset[str] | None = None,
               why: str = "") -> Request:
    """A replica group: multi-node groups must stay inside one domain; ELIGIBLE: the nodes
    its pods fit (decide.fit), None for all."""
    return Request(shape.workers, shape.accelerators_per_worker, "domain",
                   "required" if shape.workers > 1 else "preferred", eligible, why)


def role_requests(nodes: Mapping[str, Obj], memo: Memo, fleet: Fleet, ie: Obj,
                  spec: InferenceEndpointSpec, fabric: Fabric) -> dict[str, Request]:
    """Each role's replica group as a placement request ("": the one role), on the nodes
    its pods fit as FABRIC dresses them (decide.fit); remembered in MEMO for the pass, by
    the endpoint's UID and resourceVersion (its placement and its standby both ask)."""
    meta = ie["metadata"]

    def work() -> dict[str, Request]:
        found = {}
        for role in spec.serving_roles():
            [leader] = build.group_pods(ie, spec, 0, "0", fabric, role, members=1)
            found[role.name] = request_of(role.shape, *pod_fit(
                nodes, memo, fleet, spec.ultra_server_group, leader["spec"]))
        return found

    if not meta.get("uid"):
        return work()
    return memo.recall(("role_requests", meta["uid"], meta.get("resourceVersion"),
                        spec.ultra_server_group), work)


def room_for_role(fleet: Fleet, spec: InferenceEndpointSpec, role: ServingRole,
                  pods: list[Obj], requests: Mapping[str, Request], limit: int) -> int:
    """How many more groups of ROLE the group can host now (at most LIMIT): anywhere, or
    for a disaggregated endpoint, in its serving units (decide.units)."""
    if spec.roles is None:
        return room_for(fleet, requests[role.name], limit)
    scopes = Scopes(fleet, spec.roles.affinity)
    units = Units.of({name: {i: scopes.scope(g.domain())
                             for i, g in groups_of(role_pods(pods, name)).items()}
                      for name in (DECODE, PREFILL)})
    return room_in_units(scopes, units, requests, role.name, limit)


def scaling_ceiling(fleet: Fleet, ie: Obj, spec: InferenceEndpointSpec, role: ServingRole,
                    pods: list[Obj], requests: Mapping[str, Request]) -> int:
    """The most groups ROLE could have now: those holding nodes, plus what the free space
    can host, up to its maxReplicas. Its standby domains count as room even while
    training jobs borrow them: a replica group that needs one takes it back
    (decide.standby). The autoscaler scales within it (autoscaling.algorithm)."""
    assert role.scaling is not None
    placed = placed_groups(role_pods(pods, role.name), role.shape.workers)
    standby = ((ie.get("status") or {}).get("standby") or {}).get("domains") or []
    lent = [o for owners in borrowers(fleet, standby).values() for o in owners]
    with fleet.without(lent):
        return placed + room_for_role(fleet, spec, role, pods, requests,
                                      max(0, role.scaling.max_replicas - placed))


def role_pods(pods: Iterable[Obj], role: str) -> list[Obj]:
    """The pods of ROLE ("": every pod of a single-role endpoint)."""
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(
        names.SERVING_ROLE_LABEL, "") == role]


def desired_replicas(scaled: Scaled | None, ie: Obj, role: ServingRole) -> int:
    """ROLE's size: its autoscaler's latest decision, else (after a restart) what the
    status last said, within its bounds; without scaling, its replicas."""
    if role.scaling is None:
        return role.desired_default()
    if scaled is not None:
        return int(scaled.decision.desired)
    status = ie.get("status") or {}
    if role.name:
        status = next((r for r in status.get("roles") or [] if r.get("name") == role.name), {})
    start = status.get("desiredReplicas") or role.replicas or role.scaling.min_replicas
    return max(role.scaling.min_replicas, min(role.scaling.max_replicas, int(start)))


@dataclass(frozen=True)
class Sight:
    """What an endpoint's pass sees of its replicas: its pods, the nodes it may no longer
    use, its serving units (None: a single-role endpoint), the pods the scheduler refuses
    where they were pinned, and the cap on every role's size (0 while Kueue has not
    admitted it; None: none)."""

    pods: list[Obj]
    lost: set[str]
    scopes: Scopes | None
    stuck: Mapping[str, str]
    cap: int | None = None


def plan_roles(snapshot: Snapshot, ie: Obj, spec: InferenceEndpointSpec, sight: Sight
               ) -> list[RolePlan]:
    """Each role's groups planned: its size, what to create, place and delete (a group
    with a member the scheduler refuses placed again)."""
    if spec.roles is None or sight.scopes is None:
        [role] = spec.serving_roles()
        latest = _latest(snapshot, ie, "")
        desired = _capped(desired_replicas(latest, ie, role), sight.cap)
        plan = plan_groups(sight.pods, Wanted(role.shape.workers, desired,
                                              build.revision(ie["spec"]), spec.rollout),
                           Trouble(sight.lost, stuck=sight.stuck))
        return [RolePlan(role, plan, desired, latest if role.scaling else None)]
    decode = _plan_decode(snapshot, ie, spec, sight)
    return [decode, _plan_prefill(snapshot, ie, spec, sight, decode)]


def _latest(snapshot: Snapshot, ie: Obj, role: str) -> Scaled | None:
    meta = ie["metadata"]
    return snapshot.scaled.get((meta["namespace"], meta["name"], role))


def _capped(desired: int, cap: int | None) -> int:
    return desired if cap is None else min(desired, cap)


def _where(scopes: Scopes, groups: Mapping[int, Group]) -> dict[int, str | None]:
    return {i: scopes.scope(g.domain()) for i, g in groups.items()}


def _units(sight: Sight, decode: Mapping[int, Group]) -> Units:
    """The serving units as DECODE's groups and the prefill pods leave them."""
    assert sight.scopes is not None
    return Units.of({DECODE: _where(sight.scopes, decode), PREFILL: _where(
        sight.scopes, groups_of(role_pods(sight.pods, PREFILL)))})


def _plan_decode(snapshot: Snapshot, ie: Obj, spec: InferenceEndpointSpec, sight: Sight
                 ) -> RolePlan:
    assert sight.scopes is not None
    decode = spec.serving_roles()[0]
    scopes, mine = sight.scopes, role_pods(sight.pods, DECODE)
    latest = _latest(snapshot, ie, DECODE)
    desired = _capped(desired_replicas(latest, ie, decode), sight.cap)
    units = _units(sight, groups_of(mine))
    plan = plan_groups(mine, Wanted(decode.shape.workers, desired,
                                    build.revision(ie["spec"], DECODE), spec.rollout),
                       Trouble(sight.lost, stuck=sight.stuck),
                       lambda kept, count: removal_order(DECODE, _where(scopes, kept), units,
                                                         count))
    return RolePlan(decode, plan, desired, latest if decode.scaling else None)


def _plan_prefill(snapshot: Snapshot, ie: Obj, spec: InferenceEndpointSpec, sight: Sight,
                  decode: RolePlan) -> RolePlan:
    """The prefill pool sees the units as the decode pool leaves them."""
    assert sight.scopes is not None and spec.roles is not None
    prefill = spec.serving_roles()[1]
    scopes, plan = sight.scopes, decode.plan
    units = _units(sight, {i: g for i, g in plan.groups.items() if i not in plan.delete})
    settled = not (plan.create or plan.place or plan.complete)  # no decode group to come
    latest = _latest(snapshot, ie, PREFILL)
    own = _capped(desired_replicas(latest, ie, prefill), sight.cap)
    anchors = len(units.units()) + (0 if settled else len(units.orphaned()))
    desired, held = prefill_wanted(own, decode.desired, anchors, spec.roles.prefill_per_decode)
    moved = {i: f"its serving unit {scope} has no decode replica left"
             for scope in (units.orphaned() if settled else [])
             for i in units.members[scope][PREFILL]}
    planned = plan_groups(role_pods(sight.pods, PREFILL), Wanted(
        prefill.shape.workers, desired, build.revision(ie["spec"], PREFILL), spec.rollout),
        Trouble(sight.lost, moved, sight.stuck),
        lambda kept, count: removal_order(PREFILL, _where(scopes, kept), units, count,
                                          orphans_first=settled))
    return RolePlan(prefill, planned, desired, latest if prefill.scaling else None,
                    held if desired != own else "")


def units_of(scopes: Scopes, plans: list[RolePlan]) -> Units:
    """The units as the plans leave them (their deleted groups gone)."""
    return Units.of({rp.role.name: {i: scopes.scope(g.domain())
                                     for i, g in rp.plan.groups.items()
                                     if i not in rp.plan.delete} for rp in plans})


def units_status(scopes: Scopes, plans: list[RolePlan]) -> list[UnitStatusDict]:
    """Each serving unit's groups, as the pods say now (placed or pinned)."""
    units = units_of(scopes, plans)
    return [{"scope": scope, DECODE: units.members[scope][DECODE],
             PREFILL: units.members[scope][PREFILL]} for scope in sorted(units.members)]
