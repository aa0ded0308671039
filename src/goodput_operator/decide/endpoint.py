"""An InferenceEndpoint's pass, decided: its replica groups (decide.replicas), the placement
of whole gated groups inside one domain each, and the complete status to write.

Like jobs, groups are placed inside the caller's `Fleet.trial()`, so the next group and the
next endpoint see the reservation, which the controller makes when it applies the plan.
Pod writes come out of the pass's write budget: what a pass will not write, it does not
build (9,000 pod bodies per pass were most of the memory at scale).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import names, times
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import (
    MAX_RECENT_SCALING,
    InferenceEndpointSpec,
    ReplicaShape,
    ServingRole,
)
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.fit import pod_fit
from goodput_operator.decide.quota import endpoint_quota
from goodput_operator.decide.replicas import (
    EndpointPlan,
    Group,
    Removal,
    groups_of,
    plan_groups,
    refused_members,
)
from goodput_operator.decide.snapshot import Scaled, Snapshot
from goodput_operator.decide.standby import decide_standby
from goodput_operator.decide.turns import kept, short_of_replicas, turn
from goodput_operator.decide.types import (
    ConditionUpdate,
    Event,
    Memo,
    Quota,
    Reservation,
    apply_conditions,
)
from goodput_operator.decide.units import (
    DECODE,
    PREFILL,
    Pending,
    Scopes,
    Units,
    place_units,
    prefill_wanted,
    removal_order,
    room_in_units,
)
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import FINISHED, owned, pinned
from goodput_operator.topology.model import Fleet, endpoint_owner
from goodput_operator.topology.placement import Placement, Request, place, room_for

Obj = dict[str, Any]
ROOM_LIMIT = 16  # the most status.room says (under Kueue)


@dataclass
class EndpointDecision:
    ie: Obj
    status: Obj  # the status as read
    desired: Obj  # the keys to write
    events: list[Event] = field(default_factory=list)
    create: list[Obj] = field(default_factory=list)
    pin: list[tuple[Obj, str, str]] = field(default_factory=list)  # pod, node, domain
    delete: list[str] = field(default_factory=list)
    services: list[Obj] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    writes: int = 0  # pod writes taken from the pass's budget
    deferred: int = 0  # pod writes left for the next pass
    limited: bool = False  # scaling is held back (capacity, maxReplicas)
    scaling_recorded: list[str] = field(default_factory=list)  # roles whose autoscaler's
    # decision is in this status
    wake_at: float | None = None  # a refused create's backoff runs out then
    quota: Quota | None = None  # under Kueue: its Workload to create or patch
    children: list[Obj] = field(default_factory=list)  # multiRegion: replicas to send
    drop: list[str] = field(default_factory=list)  # multiRegion: replicas to delete

    @property
    def key(self) -> tuple[str, str]:
        meta = self.ie["metadata"]
        return meta["namespace"], meta["name"]


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


@dataclass
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


def decide_endpoint(snapshot: Snapshot, ie: Obj, budget: WriteBudget) -> EndpointDecision:
    meta = ie["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = dict(ie.get("status") or {})
    generation, at = meta.get("generation"), times.seconds(snapshot.clock)
    conditions = list(status.get("conditions") or [])
    spec = snapshot.endpoint(ie).spec
    if spec is None:
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "InvalidSpec", snapshot.endpoint(ie).invalid,
            generation, at)})
    fleet = snapshot.fleets.get(spec.ultra_server_group)
    if fleet is None:
        message = f"UltraServerGroup {spec.ultra_server_group!r} does not exist"
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "UltraServerGroupNotFound", message, generation, at)})
    pods = owned(snapshot.endpoint_pods.get((namespace, name), {}).values(), ie)
    lost = {n for p in pods if (n := p.get("spec", {}).get("nodeName"))
            and (n not in fleet.nodes or fleet.nodes[n].state == "quarantined")}
    scopes = Scopes(fleet, spec.roles.affinity) if spec.roles is not None else None
    quota = endpoint_quota(snapshot, ie, spec, pods, at)
    stuck, due = refused_members(pods, snapshot.clock)
    plans = _plan_roles(snapshot, ie, spec, scopes, pods, lost, stuck,
                        0 if quota is not None and (quota.hold or quota.evicted) else None)
    wakes = [w for w in (quota.wake_at if quota is not None else None, due) if w is not None]
    result = EndpointDecision(ie, status, {}, services=[build.service(ie, spec),
                                                        build.headless(ie)], quota=quota,
                              wake_at=min(wakes, default=None))
    for rp in plans:
        for index, why in sorted(rp.plan.delete.items()):
            result.delete += [p["metadata"]["name"]
                              for p in rp.plan.groups[index].pods.values()]
            removal = rp.plan.removal[index]
            if removal in (Removal.RESTART, Removal.MOVE):
                result.events.append(Event(
                    "Warning" if removal is Removal.RESTART else "Normal",
                    "GroupRestarted" if removal is Removal.RESTART else "GroupMoved",
                    f"group {build.group_id(rp.role.name, index)}: {why}"))
    no_turn = _held_back(snapshot, plans, result)
    writes = sum(rp.size * (len(rp.plan.create) + len(rp.plan.place)) + sum(
        rp.size - len(rp.plan.groups[i].pods) for i in rp.plan.complete) for rp in plans)
    waiting: list[str] = []
    deferred_before = budget.deferred
    if not writes or budget.spend(writes):  # else the next pass, right after
        result.writes = writes
        fabric = Fabric.of(snapshot.groups[spec.ultra_server_group])
        for rp in plans:
            for index in rp.plan.complete:
                group = rp.plan.groups[index]
                result.create += [
                    p for p in build.group_pods(ie, spec, index, group.revision, fabric, rp.role)
                    if int(p["metadata"]["labels"][names.MEMBER_LABEL]) not in group.pods]
            rp.new = {index: {int(p["metadata"]["labels"][names.MEMBER_LABEL]): p
                              for p in build.group_pods(ie, spec, index, revision, fabric,
                                                        rp.role)}
                      for index, revision in rp.plan.create}
        waiting = _place(snapshot, fleet, scopes, spec, plans, result, fabric)
    result.deferred = budget.deferred - deferred_before
    limited = [*(f"{rp.role.name}: {rp.scaled.decision.limited}" if rp.role.name
                 else rp.scaled.decision.limited
                 for rp in plans if rp.scaled and rp.scaled.decision.limited),
               *(f"{rp.role.name} held at {rp.desired}: {rp.held}" for rp in plans if rp.held),
               *waiting]
    result.limited = bool(limited) or no_turn
    # without a turn, ScalingLimited stays what the last search said
    held = kept(conditions, "ScalingLimited", True, namespace,
                snapshot.searches_per_namespace) if no_turn else None
    totals = EndpointPlan(ready=sum(rp.plan.ready for rp in plans),
                          updated=sum(rp.plan.updated for rp in plans),
                          live=sum(rp.plan.live for rp in plans))
    desired = sum(rp.desired for rp in plans)
    result.desired = {
        "observedGeneration": generation, "replicas": totals.live,
        "desiredReplicas": desired, "readyReplicas": totals.ready,
        "updatedReplicas": totals.updated, "selector": build.leader_selector(name, spec),
        "groups": [{"index": i, "domain": g.domain() or None,
                    "nodes": [n for n in g.nodes() if n], "ready": g.ready(rp.size),
                    "revision": g.revision, **({"role": rp.role.name} if rp.role.name else {})}
                   for rp in plans for i, g in sorted(rp.plan.groups.items())
                   if i not in rp.plan.delete],
        "conditions": _conditions(spec, totals, desired, plans, waiting, limited,
                                  conditions, generation, at, held),
    }
    if scopes is not None:
        result.desired["roles"] = [
            {"name": rp.role.name, "replicas": rp.plan.live, "desiredReplicas": rp.desired,
             "readyReplicas": rp.plan.ready} for rp in plans]
        result.desired["units"] = _units_status(scopes, plans)
    if spec.scaling is not None and spec.scaling.standby_domains:
        _standby(snapshot, fleet, spec, plans, result, bool(waiting) or (
            held is not None and held.reason == "InsufficientCapacity"))
    elif status.get("standby"):  # standby turned off: nothing held any more
        result.desired["standby"] = None
        result.desired["conditions"] = [c for c in result.desired["conditions"]
                                        if c.get("type") != "Standby"]
    for rp in plans:
        record_scaling(rp.scaled, result, rp.role.name)
    _report_kueue(snapshot, fleet, spec, plans, pods, result)
    return result


def _held_back(snapshot: Snapshot, plans: list[RolePlan], result: EndpointDecision
               ) -> bool:
    """Take out of PLANS what waits for a later pass; True when the endpoint has no turn
    at placement in this one (decide.turns: nothing new is placed or created). The API
    server refused its pods: no creates, and none of the pass's write budget (other
    endpoints' rollouts), until the backoff runs out."""
    refusal = snapshot.refused.get(result.key)
    if refusal is not None and snapshot.clock < refusal.retry_at():
        for rp in plans:
            rp.plan.create, rp.plan.complete = [], []
        result.wake_at = min(refusal.retry_at(), result.wake_at or refusal.retry_at())
    no_turn = turn(snapshot, "InferenceEndpoint", result.ie, snapshot.endpoints,
                   _waits_for_placement) is False
    if no_turn:
        for rp in plans:
            rp.plan.create, rp.plan.place = [], []
    return no_turn


def _report_kueue(snapshot: Snapshot, fleet: Fleet, spec: InferenceEndpointSpec,
                  plans: list[RolePlan], pods: list[Obj], result: EndpointDecision) -> None:
    """This cluster's name; under Kueue, the Workload, whether it is admitted (an endpoint
    not admitted is not Ready: it holds no replica), and the room for more replicas of its
    shape, which a multi-region endpoint on the manager reads from the copied status."""
    if snapshot.cluster_name:
        result.desired["cluster"] = snapshot.cluster_name
    quota = result.quota
    if quota is None:
        return
    meta = result.ie["metadata"]
    generation, at = meta.get("generation"), times.seconds(snapshot.clock)
    if quota.workload:  # none when it is held for naming no queue
        result.desired["workload"] = quota.workload
    conditions = set_condition(result.desired["conditions"], "Admitted", quota.condition.status,
                               quota.condition.reason, quota.condition.message, generation, at)
    if quota.hold or quota.evicted:
        conditions = set_condition(conditions, "Ready", False, "NotAdmitted", quota.message,
                                   generation, at)
    result.desired["conditions"] = conditions
    requests = role_requests(snapshot.nodes, snapshot.memo, fleet, result.ie, spec,
                             Fabric.of(snapshot.groups[spec.ultra_server_group]))
    result.desired["room"] = sum(room_for_role(fleet, spec, rp.role, pods, requests, ROOM_LIMIT)
                                 for rp in plans)


def _capped(desired: int, cap: int | None) -> int:
    return desired if cap is None else min(desired, cap)


def _standby(snapshot: Snapshot, fleet: Fleet, spec: InferenceEndpointSpec,
             plans: list[RolePlan], result: EndpointDecision, waiting: bool) -> None:
    """The warm standby after this pass (decide.standby): status.standby, the Standby
    condition, and a Reclaiming event when it starts taking a domain back."""
    assert spec.scaling is not None
    [rp] = plans
    [request] = role_requests(snapshot.nodes, snapshot.memo, fleet, result.ie, spec,
                              Fabric.of(snapshot.groups[spec.ultra_server_group])).values()
    mine = {g.domain() for i, g in rp.plan.groups.items() if i not in rp.plan.delete} | {
        fleet.nodes[r.node].domain for r in result.reservations if r.node in fleet.nodes}
    standby = decide_standby(snapshot, fleet, result.ie, spec.scaling.standby_domains,
                             request, mine, waiting)
    result.desired["standby"] = standby.status
    meta = result.ie["metadata"]
    result.desired["conditions"] = set_condition(
        result.desired["conditions"], "Standby", standby.held, standby.reason,
        standby.message,
        meta.get("generation"), times.seconds(snapshot.clock))
    if standby.reclaiming:
        result.events.append(Event("Warning", "Reclaiming", standby.reclaiming))


def _plan_roles(snapshot: Snapshot, ie: Obj, spec: InferenceEndpointSpec,
                scopes: Scopes | None, pods: list[Obj], lost: set[str],
                stuck: Mapping[str, str], cap: int | None = None) -> list[RolePlan]:
    """Each role's groups planned: its size (for prefill, bounded by the decode pool and
    the units; every role's by CAP: 0 while Kueue has not admitted it), what to create,
    place and delete (a group with a member the scheduler refuses, STUCK, placed again)."""
    meta = ie["metadata"]
    roles = spec.serving_roles()
    plans: list[RolePlan] = []
    if spec.roles is None or scopes is None:
        [role] = roles
        latest = snapshot.scaled.get((meta["namespace"], meta["name"], ""))
        desired = _capped(desired_replicas(latest, ie, role), cap)
        plan = plan_groups(pods, role.shape.workers, desired, build.revision(ie["spec"]),
                           spec.rollout, lost, stuck=stuck)
        return [RolePlan(role, plan, desired, latest if role.scaling else None)]
    mine = {r.name: role_pods(pods, r.name) for r in roles}

    def where(groups: dict[int, Group]) -> dict[int, str | None]:
        return {i: scopes.scope(g.domain()) for i, g in groups.items()}

    decode, prefill = roles
    latest = snapshot.scaled.get((meta["namespace"], meta["name"], DECODE))
    desired = _capped(desired_replicas(latest, ie, decode), cap)
    prefill_scopes = where(groups_of(mine[PREFILL]))
    units = Units.of({DECODE: where(groups_of(mine[DECODE])), PREFILL: prefill_scopes})
    plan = plan_groups(mine[DECODE], decode.shape.workers, desired,
                       build.revision(ie["spec"], DECODE), spec.rollout, lost,
                       lambda kept, count: removal_order(DECODE, where(kept), units, count),
                       stuck=stuck)
    plans = [RolePlan(decode, plan, desired, latest if decode.scaling else None)]
    # the prefill pool sees the units as the decode pool leaves them
    units = Units.of({DECODE: where({i: g for i, g in plan.groups.items()
                                     if i not in plan.delete}), PREFILL: prefill_scopes})
    settled = not (plan.create or plan.place or plan.complete)  # no decode group to come
    latest = snapshot.scaled.get((meta["namespace"], meta["name"], PREFILL))
    own = _capped(desired_replicas(latest, ie, prefill), cap)
    anchors = len(units.units()) + (0 if settled else len(units.orphaned()))
    desired, held = prefill_wanted(own, plans[0].desired, anchors,
                                   spec.roles.prefill_per_decode)
    moved = {i: f"its serving unit {scope} has no decode replica left"
             for scope in (units.orphaned() if settled else [])
             for i in units.members[scope][PREFILL]}
    plan = plan_groups(mine[PREFILL], prefill.shape.workers, desired,
                       build.revision(ie["spec"], PREFILL), spec.rollout, lost,
                       lambda kept, count: removal_order(PREFILL, where(kept), units,
                                                         count, orphans_first=settled),
                       moved, stuck)
    plans.append(RolePlan(prefill, plan, desired, latest if prefill.scaling else None,
                          held if desired != own else ""))
    return plans


def _place(snapshot: Snapshot, fleet: Fleet, scopes: Scopes | None,
           spec: InferenceEndpointSpec,
           plans: list[RolePlan], result: EndpointDecision, fabric: Fabric) -> list[str]:
    """Place each whole, gated group, then each new one (its pods by rank, not created
    yet): inside one domain, on nodes its pods fit (as the group's FABRIC dresses them);
    with roles, inside a serving unit (decide.units). Each is reserved at once so the next
    group (and the next endpoint) sees it. A gated group is pinned; a new one placed now
    is created pinned, one write per pod instead of a gated create and a pin a pass
    later. A gated group that does not fit stays gated, whole; a new one that does not fit
    is not created: a group that is not placed costs no pods (TENANCY.md, rule 4: one
    namespace's thousands of endpoints made thousands of gated pods that every pass and
    every new leader listed), and it is asked for again, whole, in the next pass."""
    namespace, name = result.key
    owner = endpoint_owner(namespace, name)
    group_name = spec.ultra_server_group
    pending = [Pending(rp.role.name, index) for rp in plans
               for index in [*rp.plan.place, *rp.new]]  # the groups waiting longest first
    if not pending:
        return []
    by_role = {rp.role.name: rp for rp in plans}
    requests = role_requests(snapshot.nodes, snapshot.memo, fleet, result.ie, spec, fabric)
    done: list[tuple[str, str, str]] = []  # (group, domain, why)

    def bind(item: Pending, placed: Placement) -> None:
        rp = by_role[item.role]
        new = item.index in rp.new
        pods = rp.new[item.index] if new else rp.plan.groups[item.index].pods
        accelerators = requests[item.role].accelerators
        done.append((build.group_id(item.role, item.index), placed.ranks[0].domain,
                     placed.reason))
        for rank in placed.ranks:
            pod = pods[rank.rank]
            key = f"{namespace}/{pod['metadata']['name']}"
            fleet.bind(key, rank.node, accelerators, owner)
            result.reservations.append(Reservation(group_name, key, rank.node,
                                                   accelerators, owner))
            if new:
                result.create.append(pinned(pod, rank.node, rank.domain))
            else:
                result.pin.append((pod, rank.node, rank.domain))

    if scopes is None:
        left = {}
        for item in pending:
            placed = place(fleet, requests[item.role])
            if placed.ok:
                bind(item, placed)
            else:
                left[item] = placed.reason
    else:
        left = place_units(scopes, units_of(scopes, plans), pending, requests, bind)
    waiting = []
    for item, why in left.items():
        waiting.append(f"group {build.group_id(item.role, item.index)}: {why}")
    if done:  # one event a pass, not one a group: a rollout's 9,000 groups were 9,000 POSTs
        result.events.append(Event("Normal", "Placed", f"group {done[0][0]}: {done[0][2]}"
                                   if len(done) == 1 else
                                   f"{len(done)} groups placed, each inside one "
                                   f"{fleet.shape.domain_noun}: "
                                   + ", ".join(f"{i} in {d}" for i, d, _ in done)))
    return waiting


def units_of(scopes: Scopes, plans: list[RolePlan]) -> Units:
    """The units as the plans leave them (their deleted groups gone)."""
    return Units.of({rp.role.name: {i: scopes.scope(g.domain())
                                     for i, g in rp.plan.groups.items()
                                     if i not in rp.plan.delete} for rp in plans})


def _units_status(scopes: Scopes, plans: list[RolePlan]) -> list[Obj]:
    """Each serving unit's groups, as the pods say now (placed or pinned)."""
    units = units_of(scopes, plans)
    return [{"scope": scope, DECODE: units.members[scope][DECODE],
             PREFILL: units.members[scope][PREFILL]} for scope in sorted(units.members)]


def _conditions(spec: InferenceEndpointSpec, totals: EndpointPlan, desired: int,
                plans: list[RolePlan], waiting: list[str], limited: list[str],
                conditions: list[Obj], generation: int | None, at: str,
                held: ConditionUpdate | None = None) -> list[Obj]:
    """The endpoint's conditions after this pass; HELD: the ScalingLimited condition of
    an endpoint that had no turn at placement (decide.turns), kept as it was."""
    ready = all(rp.plan.ready >= rp.desired for rp in plans)
    conditions = set_condition(conditions, "Ready", ready,
                               "ReplicasReady" if ready else "ReplicasNotReady",
                               f"{totals.ready}/{desired} replica groups ready", generation,
                               at)
    progressing = any(rp.plan.updated < rp.desired or rp.plan.live != rp.desired
                      for rp in plans)
    conditions = set_condition(conditions, "Progressing", progressing,
                               "RollingOut" if progressing else "Complete",
                               f"{totals.updated}/{desired} groups on the current revision, "
                               f"{totals.live} exist", generation, at)
    scaled = [rp.scaled for rp in plans if rp.scaled is not None]
    short = bool(waiting) or any(s.decision.capacity_limited for s in scaled)
    conditions = apply_conditions(conditions, [held or ConditionUpdate(
        "ScalingLimited", bool(limited), "InsufficientCapacity" if short
        else "AtMaxReplicas" if limited else "WithinLimits", "; ".join(limited))],
        generation, at)
    if any(rp.role.scaling is not None for rp in plans):
        missing = "; ".join(f"{rp.role.name}: {u}" if rp.role.name else u for rp in plans
                            if rp.scaled and (u := rp.scaled.decision.unavailable))
        conditions = set_condition(conditions, "MetricsUnavailable", bool(missing),
                                   "MetricsMissing" if missing else "MetricsFresh",
                                   f"{missing}; holding {desired} replicas" if missing else "",
                                   generation, at)
        panic = "; ".join(rp.scaled.decision.reason for rp in plans
                          if rp.scaled and rp.scaled.decision.panic)
        conditions = set_condition(conditions, "Panic", bool(panic),
                                   "Burst" if panic else "Steady", panic, generation, at)
    return conditions


def record_scaling(scaled: Scaled | None, result: EndpointDecision, role: str) -> None:
    """A new autoscaler decision that changes the size goes into the status (and an
    event) once."""
    if scaled is None or scaled.written or scaled.decision.desired == scaled.current:
        return
    entry = {"time": times.millis(scaled.at), "from": scaled.current, "to": scaled.decision.desired,
             "reason": scaled.decision.reason, "metrics": scaled.decision.metrics,
             **({"role": role} if role else {})}
    recent = [*(result.desired.get("recentScaling") or result.status.get("recentScaling")
                or []), entry][-MAX_RECENT_SCALING:]
    result.desired["lastScaling"] = entry
    result.desired["recentScaling"] = recent
    result.events.append(Event("Normal", "Scaled", f"{role + ': ' if role else ''}"
                                                   f"{scaled.current} -> "
                                                   f"{scaled.decision.desired}: "
                                                   f"{scaled.decision.reason}"))
    result.scaling_recorded.append(role)


def _waits_for_placement(ie: Obj) -> bool:
    """An endpoint that asks for placement searches in every pass until its groups fit
    (decide.turns). Multi-region endpoints place nothing here (decide.regions)."""
    return not (ie.get("spec") or {}).get("multiRegion") and short_of_replicas(ie)
