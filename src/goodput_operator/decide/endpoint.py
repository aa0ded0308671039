"""An InferenceEndpoint's pass, policy by policy in order (`decide_endpoint`):

1. gate        an invalid spec, or no group: not Ready, nothing else   (here)
2. sight       its pods, lost nodes, serving units, quota (Kueue)      (here, decide.quota)
3. roles       each role's size and its groups' plan                   (decide.roles,
                                                                        decide.replicas)
4. removals    the groups to delete, said when a group restarts        (here)
5. turn        refused creates back off; no turn, nothing new placed   (here, decide.turns)
6. build       the pods the pass's write budget lets it create         (here)
7. placement   whole groups, each inside one domain or serving unit    (decide.groupplacing)
8. status      replicas, groups, roles, units, conditions; standby, the autoscaler's
               decision, Kueue's word                                  (here, decide.standby)

Like jobs, groups are placed inside the caller's `Fleet.trial()`, so the next group and the
next endpoint see the reservation, which the controller makes when it applies the plan.
Pod writes come out of the pass's write budget: what a pass will not write, it does not
build (9,000 pod bodies per pass were most of the memory at scale).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from goodput_operator import names, times
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import (
    MAX_RECENT_SCALING,
    InferenceEndpointSpec,
    as_role,
)
from goodput_operator.api.statuses import (
    ConditionDict,
    ReplicaGroupStatusDict,
    RoleStatusDict,
    ScalingDecisionDict,
)
from goodput_operator.api.views import EndpointView
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.decide.groupplacing import GroupsPlaced, place_groups
from goodput_operator.decide.quota import endpoint_quota
from goodput_operator.decide.replicas import EndpointPlan, Group, Removal, refused_members
from goodput_operator.decide.roles import (
    RolePlan,
    Sight,
    plan_roles,
    role_requests,
    room_for_role,
    units_status,
)
from goodput_operator.decide.snapshot import Scaled, Snapshot
from goodput_operator.decide.standby import decide_standby
from goodput_operator.decide.turns import kept, short_of_replicas, turn
from goodput_operator.decide.types import (
    ConditionUpdate,
    EndpointStatus,
    Event,
    Quota,
    Reservation,
    apply_conditions,
)
from goodput_operator.decide.units import Scopes
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import owned
from goodput_operator.topology.model import Fleet

Obj = dict[str, Any]
ROOM_LIMIT = 16  # the most status.room says (under Kueue)


@dataclass
class EndpointDecision:
    ie: Obj
    status: Obj  # the status as read
    desired: EndpointStatus  # the keys to write
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
    # multiRegion, routed: the proxy's weights to set (backend, server, weight)
    weights: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        meta = self.ie["metadata"]
        return meta["namespace"], meta["name"]


def decide_endpoint(snapshot: Snapshot, ie: Obj, budget: WriteBudget) -> EndpointDecision:
    """IE's pass: the module's steps, in their order; BUDGET: the pass's pod writes."""
    view = snapshot.endpoint(ie)
    gated = gate(snapshot, view)
    if gated is not None:
        return gated
    assert view.spec is not None  # gate decides an invalid one
    spec, fleet = view.spec, snapshot.fleets[view.spec.ultra_server_group]
    sight, quota, due = _sight(snapshot, view, spec, fleet)
    plans = plan_roles(snapshot, ie, spec, sight)
    delete, events = _removals(plans)
    plans, no_turn, backoff = _held_back(snapshot, view, plans)
    built = _built(snapshot, view, spec, plans, budget)
    placed = place_groups(snapshot, view, spec, sight.scopes, built.plans, built.fabric) \
        if built.fabric is not None else GroupsPlaced()
    outcome = Outcome(built.plans, placed, no_turn, _limited(built.plans, placed), quota,
                      sight)
    desired = status_of(snapshot, view, spec, outcome)
    desired, reclaiming = with_standby(snapshot, fleet, view, spec, outcome, desired)
    desired, scaled, recorded = with_scaling(view, outcome.plans, desired)
    desired = with_kueue(snapshot, fleet, view, spec, outcome, desired)
    wakes = [w for w in (quota.wake_at if quota is not None else None, due, backoff)
             if w is not None]
    return EndpointDecision(
        ie, dict(view.status), desired, [*events, *placed.events, *reclaiming, *scaled],
        [*built.create, *placed.create], placed.pin, delete,
        [build.service(ie, spec), build.headless(ie)], placed.reservations, built.writes,
        built.deferred, bool(outcome.limited) or no_turn, recorded,
        min(wakes, default=None), quota)


def gate(snapshot: Snapshot, view: EndpointView) -> EndpointDecision | None:
    """The endpoint's decision when nothing else is decided: an invalid spec (said once,
    by its view) or a missing group leaves it not Ready."""
    status = dict(view.status)
    if view.spec is None:
        reason, message = "InvalidSpec", view.invalid
    elif view.spec.ultra_server_group not in snapshot.fleets:
        reason = "UltraServerGroupNotFound"
        message = f"UltraServerGroup {view.spec.ultra_server_group!r} does not exist"
    else:
        return None
    return EndpointDecision(view.obj, status, {"conditions": set_condition(
        list(status.get("conditions") or []), "Ready", False, reason, message,
        view.generation, times.seconds(snapshot.clock))})


def _sight(snapshot: Snapshot, view: EndpointView, spec: InferenceEndpointSpec, fleet: Fleet
           ) -> tuple[Sight, Quota | None, float | None]:
    """What the pass sees of its replicas (roles.Sight), its quota under Kueue, and when
    the next member the scheduler refuses is due to be placed again."""
    pods = owned(snapshot.endpoint_pods.get(view.key, {}).values(), view.obj)
    lost = {n for p in pods if (n := p.get("spec", {}).get("nodeName"))
            and (n not in fleet.nodes or fleet.nodes[n].state == "quarantined")}
    quota = endpoint_quota(snapshot, view.obj, spec, pods, times.seconds(snapshot.clock))
    stuck, due = refused_members(pods, snapshot.clock)
    held = quota is not None and (quota.hold or quota.evicted)
    return Sight(pods, lost, Scopes(fleet, spec.roles.affinity) if spec.roles else None,
                 stuck, 0 if held else None), quota, due


def _removals(plans: list[RolePlan]) -> tuple[list[str], list[Event]]:
    """The pods of the groups the plans delete, and the news: a group restarted (a
    Warning) or moved."""
    delete: list[str] = []
    events = []
    for rp in plans:
        for index, why in sorted(rp.plan.delete.items()):
            delete += [p["metadata"]["name"] for p in rp.plan.groups[index].pods.values()]
            removal = rp.plan.removal[index]
            if removal in (Removal.RESTART, Removal.MOVE):
                events.append(Event(
                    "Warning" if removal is Removal.RESTART else "Normal",
                    "GroupRestarted" if removal is Removal.RESTART else "GroupMoved",
                    f"group {build.group_id(rp.role.name, index)}: {why}"))
    return delete, events


def _held_back(snapshot: Snapshot, view: EndpointView, plans: list[RolePlan]
               ) -> tuple[list[RolePlan], bool, float | None]:
    """PLANS without what waits for a later pass; whether the endpoint has no turn at
    placement in this one (decide.turns: nothing new is placed or created); and when a
    refusal's backoff runs out. The API server refused its pods: no creates, and none of
    the pass's write budget (other endpoints' rollouts), until the backoff runs out."""
    refusal = snapshot.refused.get(view.key)
    backoff = None
    if refusal is not None and snapshot.clock < refusal.retry_at():
        plans = [replace(rp, plan=replace(rp.plan, create=[], complete=[])) for rp in plans]
        backoff = refusal.retry_at()
    no_turn = turn(snapshot, "InferenceEndpoint", view.obj, snapshot.endpoints,
                   _waits_for_placement) is False
    if no_turn:
        plans = [replace(rp, plan=replace(rp.plan, create=[], place=[])) for rp in plans]
    return plans, no_turn, backoff


@dataclass(frozen=True)
class Built:
    """The pods the pass's write budget lets it create: the gated groups' missing members
    (CREATE), the new groups' pods by index and member (in PLANS, created once placed),
    the writes taken and left; FABRIC: None when nothing is built this pass."""

    plans: list[RolePlan]
    create: list[Obj] = field(default_factory=list)
    writes: int = 0
    deferred: int = 0
    fabric: Fabric | None = None


def _built(snapshot: Snapshot, view: EndpointView, spec: InferenceEndpointSpec,
           plans: list[RolePlan], budget: WriteBudget) -> Built:
    writes = sum(rp.size * (len(rp.plan.create) + len(rp.plan.place)) + sum(
        rp.size - len(rp.plan.groups[i].pods) for i in rp.plan.complete) for rp in plans)
    deferred_before = budget.deferred
    if writes and not budget.spend(writes):  # else the next pass, right after
        return Built(plans, deferred=budget.deferred - deferred_before)
    ie, fabric = view.obj, Fabric.of(snapshot.groups[spec.ultra_server_group])
    create = [p for rp in plans for index in rp.plan.complete
              for p in build.group_pods(ie, spec, index, rp.plan.groups[index].revision,
                                        fabric, rp.role)
              if int(p["metadata"]["labels"][names.MEMBER_LABEL])
              not in rp.plan.groups[index].pods]
    plans = [replace(rp, new={index: {int(p["metadata"]["labels"][names.MEMBER_LABEL]): p
                                      for p in build.group_pods(ie, spec, index, revision,
                                                                fabric, rp.role)}
                              for index, revision in rp.plan.create}) for rp in plans]
    return Built(plans, create, writes, budget.deferred - deferred_before, fabric)


def _limited(plans: list[RolePlan], placed: GroupsPlaced) -> list[str]:
    """Why scaling is held back: the autoscaler's limits, a role held by another's size,
    the groups left waiting for room."""
    return [*(f"{rp.role.name}: {rp.scaled.decision.limited}" if rp.role.name
              else rp.scaled.decision.limited
              for rp in plans if rp.scaled and rp.scaled.decision.limited),
            *(f"{rp.role.name} held at {rp.desired}: {rp.held}" for rp in plans if rp.held),
            *placed.waiting]


@dataclass(frozen=True)
class Outcome:
    """One endpoint's pass as its policies left it, for its status."""

    plans: list[RolePlan]
    placed: GroupsPlaced
    no_turn: bool
    limited: list[str]
    quota: Quota | None
    sight: Sight  # what the pass saw: its pods and serving units, read once

    @property
    def desired(self) -> int:
        return sum(rp.desired for rp in self.plans)


def status_of(snapshot: Snapshot, view: EndpointView, spec: InferenceEndpointSpec,
              outcome: Outcome) -> EndpointStatus:
    """Replicas, groups, roles, units and conditions."""
    plans = outcome.plans
    totals = EndpointPlan(ready=sum(rp.plan.ready for rp in plans),
                          updated=sum(rp.plan.updated for rp in plans),
                          live=sum(rp.plan.live for rp in plans))
    desired: EndpointStatus = {
        "observedGeneration": view.generation, "replicas": totals.live,
        "desiredReplicas": outcome.desired, "readyReplicas": totals.ready,
        "updatedReplicas": totals.updated,
        "selector": build.leader_selector(view.key[1], spec),
        "groups": [_group_status(i, g, rp) for rp in plans
                   for i, g in sorted(rp.plan.groups.items()) if i not in rp.plan.delete],
        "conditions": _conditions(snapshot, view, spec, outcome, totals)}
    if outcome.sight.scopes is not None:  # roles
        desired["roles"] = [_role_status(rp) for rp in plans]
        desired["units"] = units_status(outcome.sight.scopes, plans)
    return desired


def _group_status(index: int, group: Group, rp: RolePlan) -> ReplicaGroupStatusDict:
    """One replica group as status.groups lists it."""
    found: ReplicaGroupStatusDict = {
        "index": index, "domain": group.domain() or None,
        "nodes": [n for n in group.nodes() if n], "ready": group.ready(rp.size),
        "revision": group.revision}
    named = as_role(rp.role.name)
    if named is not None:
        found["role"] = named
    return found


def _role_status(rp: RolePlan) -> RoleStatusDict:
    """One role of a disaggregated endpoint as status.roles lists it."""
    found: RoleStatusDict = {"replicas": rp.plan.live, "desiredReplicas": rp.desired,
                             "readyReplicas": rp.plan.ready}
    named = as_role(rp.role.name)
    if named is not None:
        found["name"] = named
    return found


def _conditions(snapshot: Snapshot, view: EndpointView, spec: InferenceEndpointSpec,
                outcome: Outcome, totals: EndpointPlan) -> list[ConditionDict]:
    """The endpoint's conditions after this pass: Ready, Progressing, ScalingLimited (as it
    was, for an endpoint that had no turn at placement, decide.turns) and the
    autoscaler's MetricsUnavailable and Panic."""
    plans, desired, generation = outcome.plans, outcome.desired, view.generation
    at = times.seconds(snapshot.clock)
    ready = all(rp.plan.ready >= rp.desired for rp in plans)
    conditions = set_condition(list(view.status.get("conditions") or []), "Ready", ready,
                               "ReplicasReady" if ready else "ReplicasNotReady",
                               f"{totals.ready}/{desired} replica groups ready", generation,
                               at)
    progressing = any(rp.plan.updated < rp.desired or rp.plan.live != rp.desired
                      for rp in plans)
    conditions = set_condition(conditions, "Progressing", progressing,
                               "RollingOut" if progressing else "Complete",
                               f"{totals.updated}/{desired} groups on the current revision, "
                               f"{totals.live} exist", generation, at)
    conditions = apply_conditions(conditions, [_scaling_limited(snapshot, view, outcome)],
                                  generation, at)
    if not any(rp.role.scaling is not None for rp in plans):
        return conditions
    missing = "; ".join(f"{rp.role.name}: {u}" if rp.role.name else u for rp in plans
                        if rp.scaled and (u := rp.scaled.decision.unavailable))
    conditions = set_condition(conditions, "MetricsUnavailable", bool(missing),
                               "MetricsMissing" if missing else "MetricsFresh",
                               f"{missing}; holding {desired} replicas" if missing else "",
                               generation, at)
    panic = "; ".join(rp.scaled.decision.reason for rp in plans
                      if rp.scaled and rp.scaled.decision.panic)
    return set_condition(conditions, "Panic", bool(panic), "Burst" if panic else "Steady",
                         panic, generation, at)


def _scaling_limited(snapshot: Snapshot, view: EndpointView, outcome: Outcome
                     ) -> ConditionUpdate:
    """Without a turn, ScalingLimited stays what the last search said."""
    if outcome.no_turn:
        return kept(list(view.status.get("conditions") or []), "ScalingLimited", True,
                    view.key[0], snapshot.searches_per_namespace)
    scaled = [rp.scaled for rp in outcome.plans if rp.scaled is not None]
    short = bool(outcome.placed.waiting) or any(s.decision.capacity_limited for s in scaled)
    return ConditionUpdate("ScalingLimited", bool(outcome.limited),
                           "InsufficientCapacity" if short
                           else "AtMaxReplicas" if outcome.limited else "WithinLimits",
                           "; ".join(outcome.limited))


def with_standby(snapshot: Snapshot, fleet: Fleet, view: EndpointView,
                 spec: InferenceEndpointSpec, outcome: Outcome, desired: EndpointStatus
                 ) -> tuple[EndpointStatus, list[Event]]:
    """DESIRED with the warm standby after this pass (decide.standby): status.standby, the
    Standby condition, and a Reclaiming event when it starts taking a domain back; or,
    standby turned off, nothing held any more."""
    if spec.scaling is None or not spec.scaling.standby_domains:
        if not view.status.get("standby"):
            return desired, []
        return {**desired, "standby": None, "conditions": [
            c for c in desired["conditions"] if c.get("type") != "Standby"]}, []
    [rp] = outcome.plans
    [request] = role_requests(snapshot.nodes, snapshot.memo, fleet, view.obj, spec,
                              Fabric.of(snapshot.groups[spec.ultra_server_group])).values()
    mine = {g.domain() for i, g in rp.plan.groups.items() if i not in rp.plan.delete} | {
        fleet.nodes[r.node].domain for r in outcome.placed.reservations
        if r.node in fleet.nodes}
    held = _scaling_limited(snapshot, view, outcome) if outcome.no_turn else None
    waiting = bool(outcome.placed.waiting) or (
        held is not None and held.reason == "InsufficientCapacity")
    standby = decide_standby(snapshot, view.obj, spec.scaling.standby_domains, request,
                             mine, waiting)
    return {**desired, "standby": standby.status, "conditions": set_condition(
        desired["conditions"], "Standby", standby.held, standby.reason, standby.message,
        view.generation, times.seconds(snapshot.clock))}, \
        [Event("Warning", "Reclaiming", standby.reclaiming)] if standby.reclaiming else []


def with_scaling(view: EndpointView, plans: list[RolePlan], desired: EndpointStatus
                 ) -> tuple[EndpointStatus, list[Event], list[str]]:
    """DESIRED with each role's new autoscaler decision recorded (record_scaling); the
    events, and the roles recorded."""
    events, recorded = [], []
    for rp in plans:
        found = record_scaling(rp.scaled, desired, view.status, rp.role.name)
        if found is not None:
            fields, event = found
            desired = {**desired, **fields}
            events.append(event)
            recorded.append(rp.role.name)
    return desired, events, recorded


def record_scaling(scaled: Scaled | None, desired: EndpointStatus, status: Obj, role: str
                   ) -> tuple[EndpointStatus, Event] | None:
    """A new autoscaler decision that changes the size goes into the status (and an
    event) once: the status fields, and the event; None when there is none to record."""
    if scaled is None or scaled.written or scaled.decision.desired == scaled.current:
        return None
    entry: ScalingDecisionDict = {
        "time": times.millis(scaled.at), "from": scaled.current, "to": scaled.decision.desired,
        "reason": scaled.decision.reason, "metrics": scaled.decision.metrics}
    named = as_role(role)
    if named is not None:
        entry["role"] = named
    recent = [*(desired.get("recentScaling") or status.get("recentScaling") or []),
              entry][-MAX_RECENT_SCALING:]
    return {"lastScaling": entry, "recentScaling": recent}, Event(
        "Normal", "Scaled", f"{role + ': ' if role else ''}{scaled.current} -> "
                           f"{scaled.decision.desired}: {scaled.decision.reason}")


def with_kueue(snapshot: Snapshot, fleet: Fleet, view: EndpointView,
               spec: InferenceEndpointSpec, outcome: Outcome, desired: EndpointStatus
               ) -> EndpointStatus:
    """DESIRED with this cluster's name; under Kueue, the Workload, whether it is admitted
    (an endpoint not admitted is not Ready: it holds no replica), and the room for more
    replicas of its shape, which a multi-region endpoint on the manager reads from the
    copied status."""
    found: EndpointStatus = {**desired, "cluster": snapshot.cluster_name} \
        if snapshot.cluster_name else desired
    quota = outcome.quota
    if quota is None:
        return found
    generation, at = view.generation, times.seconds(snapshot.clock)
    if quota.workload:  # none when it is held for naming no queue
        found = {**found, "workload": quota.workload}
    conditions = set_condition(found["conditions"], "Admitted", quota.condition.status,
                               quota.condition.reason, quota.condition.message, generation, at)
    if quota.hold or quota.evicted:
        conditions = set_condition(conditions, "Ready", False, "NotAdmitted", quota.message,
                                   generation, at)
    requests = role_requests(snapshot.nodes, snapshot.memo, fleet, view.obj, spec,
                             Fabric.of(snapshot.groups[spec.ultra_server_group]))
    pods = outcome.sight.pods
    return {**found, "conditions": conditions, "room": sum(
        room_for_role(fleet, spec, rp.role, pods, requests, ROOM_LIMIT)
        for rp in outcome.plans)}


def _waits_for_placement(ie: Obj) -> bool:
    """An endpoint that asks for placement searches in every pass until its groups fit
    (decide.turns). Multi-region endpoints place nothing here (decide.regions)."""
    return not (ie.get("spec") or {}).get("multiRegion") and short_of_replicas(ie)
