"""A multi-region InferenceEndpoint (spec.multiRegion), on a MultiKueue manager: its replicas
are one-replica endpoints, each sent through MultiKueue to one region's queue, and this
decides how many go where.

Why one endpoint per replica rather than one per region: MultiKueue creates the copy in the
worker cluster once and afterwards only copies its status back, and it re-creates the copy
when the Workload changes; a per-region endpoint resized would restart every replica of
the region. Kueue admits multi-node serving replica by replica anyway (as it does
LeaderWorkerSet groups).

Every pass, level-based, from what the replicas' copied statuses say:
- a replica not ready for failoverSeconds (its nodes failed and its region has no room, or
  its region's Kueue never admitted it) is deleted, and its region takes no new replica for
  failoverSeconds (status.regions[].unavailableUntil: the one thing remembered, in the
  status);
- missing replicas go to the available region the split chooses: Capacity, the most room
  its replicas report (status.room); Weighted, the furthest below its weight's share;
- surplus ones leave the least ready, then the region the split likes least;
- a changed template replaces replicas one at a time: a new one first, an old one removed
  once the new one is ready.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from goodput_operator import names, times
from goodput_operator.api.base import MESSAGE_LENGTH
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import MultiRegion
from goodput_operator.api.statuses import RegionStatusDict
from goodput_operator.api.views import EndpointView
from goodput_operator.decide.endpoint import EndpointDecision, record_scaling
from goodput_operator.decide.quota import handoff
from goodput_operator.decide.roles import desired_replicas
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.traffic import routed
from goodput_operator.decide.turns import kept, short_of_replicas, turn
from goodput_operator.decide.types import (
    ConditionUpdate,
    EndpointStatus,
    Event,
    apply_conditions,
)
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.pods import child_name

Obj = dict[str, Any]
COPIED = ("ultraServerGroup", "model", "template", "replicaShape", "rollout", "port")
# replicas one endpoint's pass sends and deletes at most (each is an object, a Workload and
# MultiKueue's work): a tenant's 4,096-replica endpoint costs a bounded pass, and the rest
# go in the passes right after (each write wakes the next)
SENT_PER_PASS, DROPPED_PER_PASS = 32, 64
REGIONS = "InferenceEndpoint/regions"  # the turns of multi-region endpoints (decide.turns)


@dataclass(frozen=True)
class Replica:
    """One replica (a one-replica endpoint) as the manager sees it."""

    name: str
    region: str
    ready: bool
    since: float  # not ready since (its Ready condition's change, else its creation)
    fresh: bool = True  # on the current revision
    room: int | None = None  # what its region's cluster said it could host besides
    cluster: str | None = None


@dataclass
class RegionPlan:
    create: list[str] = field(default_factory=list)  # a region per replica to send
    delete: list[str] = field(default_factory=list)  # replicas to delete
    moved: list[str] = field(default_factory=list)  # what failed over, for events
    unavailable: dict[str, tuple[float, str]] = field(default_factory=dict)  # until, why
    short: str = ""  # why fewer than wanted were sent


def plan_regions(policy: MultiRegion, desired: int, replicas: Sequence[Replica],
                 unavailable: Mapping[str, tuple[float, str]], now: float) -> RegionPlan:
    """Which replicas to delete and where new ones go (the module's rules)."""
    plan = RegionPlan(unavailable={r: u for r, u in unavailable.items() if u[0] > now})
    listed = {r.name for r in policy.regions}
    grace = policy.failover_seconds
    kept: list[Replica] = []
    for replica in replicas:
        if replica.region not in listed:
            plan.delete.append(replica.name)
        elif not replica.ready and now - replica.since >= grace:
            plan.delete.append(replica.name)
            why = (f"replica {replica.name} not ready for {now - replica.since:.0f}s"
                   + (f" in {replica.cluster}" if replica.cluster else " (never admitted)"))
            plan.unavailable[replica.region] = (now + grace, why)
            plan.moved.append(f"{why}: moved; region {replica.region} takes no new replica "
                              f"until {times.millis(now + grace)}")
        else:
            kept.append(replica)
    rooms = _rooms(kept)
    fresh = [r for r in kept if r.fresh]
    stale = [r for r in kept if not r.fresh]
    wanted = desired - len(fresh) - len(stale)
    if stale and wanted <= 0 and all(r.ready for r in fresh) and len(fresh) < desired:
        wanted = 1  # a rollout: one new replica before an old one goes
    counts = {r.name: sum(1 for k in kept if k.region == r.name) for r in policy.regions}
    for _ in range(max(0, wanted)):
        region = _choose(policy, counts, rooms, plan.unavailable, desired)
        if region is None:
            plan.short = ("no region can take a replica: "
                          + ("; ".join(f"{r}: {why}" for r, (_, why)
                                       in sorted(plan.unavailable.items()))
                             or "none reports room"))
            break
        plan.create.append(region)
        counts[region] += 1
        if rooms.get(region) is not None:
            rooms[region] = max(0, (rooms[region] or 0) - 1)
    surplus = len(fresh) + len(stale) - desired
    if stale:  # old replicas leave as new ones are ready, not before
        surplus = max(0, sum(1 for r in fresh if r.ready) + len(stale) - desired) + \
            max(0, len(fresh) - desired)
    for replica in _leaving(policy, kept, rooms, counts, desired)[:max(0, surplus)]:
        plan.delete.append(replica.name)
    return plan


def _rooms(replicas: Sequence[Replica]) -> dict[str, int | None]:
    """Each region's room, as the freshest word of its replicas (the largest: they may
    have said it at different times, and each counts itself out)."""
    rooms: dict[str, int | None] = {}
    for replica in replicas:
        if replica.room is not None:
            rooms[replica.region] = max(rooms.get(replica.region) or 0, replica.room)
    return rooms


def _choose(policy: MultiRegion, counts: Mapping[str, int], rooms: Mapping[str, int | None],
            unavailable: Mapping[str, tuple[float, str]], desired: int) -> str | None:
    """The region a new replica goes to, or None when none is available."""
    open_ = [r for r in policy.regions if r.name not in unavailable]
    if policy.split == "Weighted":
        weighted = [r for r in open_ if r.weight > 0] or open_
        total = sum(r.weight for r in weighted) or len(weighted)
        best = max(weighted, default=None, key=lambda r: (
            desired * (r.weight or 1) / total - counts[r.name], -policy.regions.index(r)))
        return best.name if best is not None else None
    roomy = [r for r in open_ if rooms.get(r.name) is None or (rooms.get(r.name) or 0) > 0]
    best = max(roomy, default=None, key=lambda r: (
        rooms.get(r.name) if rooms.get(r.name) is not None else 1, -counts[r.name],
        -policy.regions.index(r)))
    return best.name if best is not None else None


def _leaving(policy: MultiRegion, kept: Sequence[Replica], rooms: Mapping[str, int | None],
             counts: Mapping[str, int], desired: int) -> list[Replica]:
    """The order surplus replicas leave in: old revision first, then not ready, then the
    region the split likes least, then the newest name."""
    total = sum(r.weight for r in policy.regions) or len(policy.regions)
    weights = {r.name: r.weight for r in policy.regions}

    def disliked(replica: Replica) -> float:
        if policy.split == "Weighted":
            return counts.get(replica.region, 0) - desired * weights.get(
                replica.region, 0) / total
        return -float(rooms.get(replica.region) or 0)

    return sorted(kept, key=lambda r: (r.fresh, r.ready, -disliked(r), _index(r.name)))


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return -int(tail) if tail.isdigit() else 0


def child_spec(spec: Obj) -> Obj:
    """What every replica runs: the parent's serving spec, one replica, no autoscaler."""
    return {**{k: copy.deepcopy(spec[k]) for k in COPIED if k in spec}, "replicas": 1,
            "managedBy": kueue.MULTIKUEUE}


def revision(spec: Obj) -> str:
    return hashlib.sha256(json.dumps(child_spec(spec), sort_keys=True).encode()
                          ).hexdigest()[:10]


def replica_body(ie: Obj, index: int, region: str, queue: str) -> Obj:
    """Replica INDEX of IE, sent to REGION through its QUEUE. Not owned by IE: MultiKueue
    copies the metadata to the region, where an owner that does not exist there would have
    the garbage collector delete the copy at once; the label and annotation tie it to IE
    instead (decide_handed_off deletes a replica whose endpoint is gone)."""
    meta = ie["metadata"]
    return {"apiVersion": ie.get("apiVersion", "goodput.dev/v1alpha1"),
            "kind": "InferenceEndpoint",
            "metadata": {"name": child_name(meta["name"], f"-{index}"),
                         "namespace": meta["namespace"],
                         "labels": {kueue.QUEUE_LABEL: queue, names.REGION_LABEL: region,
                                    names.REVISION_LABEL: revision(ie["spec"]),
                                    names.GLOBAL_ENDPOINT_LABEL: meta["name"]},
                         "annotations": {names.GLOBAL_UID_ANNOTATION: meta["uid"]}},
            "spec": child_spec(ie["spec"])}


def parent_of(child: Obj) -> tuple[str, str, str] | None:
    """(namespace, name, uid) of the multi-region endpoint CHILD is a replica of."""
    meta = child["metadata"]
    name = (meta.get("labels") or {}).get(names.GLOBAL_ENDPOINT_LABEL)
    uid = (meta.get("annotations") or {}).get(names.GLOBAL_UID_ANNOTATION)
    return (meta.get("namespace", ""), name, uid) if name and uid else None


def replicas_of(snapshot: Snapshot, ie: Obj) -> list[tuple[Obj, Replica]]:
    """IE's replicas (the endpoints it owns), as their copied statuses say."""
    meta = ie["metadata"]
    current = revision(ie["spec"])
    found = []
    for child in snapshot.delegated_endpoints:
        cmeta = child["metadata"]
        if parent_of(child) != (meta["namespace"], meta["name"], meta.get("uid")):
            continue
        status = child.get("status") or {}
        labels = cmeta.get("labels") or {}
        ready = int(status.get("readyReplicas") or 0) >= 1
        condition = next((c for c in status.get("conditions") or []
                          if c.get("type") == "Ready"), None)
        since = times.parse((condition or {}).get("lastTransitionTime")) \
            if condition is not None and condition.get("status") != "True" else None
        created = times.parse(cmeta.get("creationTimestamp")) or snapshot.clock
        found.append((child, Replica(
            cmeta["name"], labels.get(names.REGION_LABEL, ""), ready,
            max(created, since) if since is not None else created,
            labels.get(names.REVISION_LABEL) == current, status.get("room"),
            status.get("cluster"))))
    return found


def decide_regions(snapshot: Snapshot, ie: Obj) -> EndpointDecision:
    """The manager's pass over a multi-region endpoint: the replicas to send and delete,
    and the status summing the regions."""
    view = snapshot.endpoint(ie)
    status, at = dict(view.status), times.seconds(snapshot.clock)
    conditions = list(status.get("conditions") or [])
    if view.spec is None:
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "InvalidSpec", view.invalid, view.generation, at)})
    policy = view.spec.multi_region
    assert policy is not None
    [role] = view.spec.serving_roles()
    scaled = snapshot.scaled.get((*view.key, ""))
    desired = desired_replicas(scaled, ie, role)
    held = {r["name"]: (until, r.get("message") or "")
            for r in status.get("regions") or []
            if (until := times.parse(r.get("unavailableUntil"))) is not None}
    children = replicas_of(snapshot, ie)
    plan = plan_regions(policy, desired, [r for _, r in children], held, snapshot.clock)
    plan = replace(plan, create=plan.create[:SENT_PER_PASS],
                   delete=plan.delete[:DROPPED_PER_PASS])
    plan, waits, backoff = _held_back(snapshot, view, plan)
    left = [r for _, r in children if r.name not in plan.delete]
    found = regions_status(snapshot, view, Regions(policy, plan, left, desired, waits))
    routing = None
    if snapshot.proxy is not None:
        routing = routed(snapshot.proxy, view.key, found["regions"],
                         status.get("regions") or [], snapshot.clock,
                         policy.traffic_return_seconds)
        found["regions"] = routing.regions
        found["conditions"] = apply_conditions(found["conditions"], [routing.condition],
                                               view.generation, at)
    recorded = record_scaling(scaled if role.scaling else None, found, status, "")
    if recorded is not None:
        found = {**found, **recorded[0]}
    return EndpointDecision(
        ie, status, found, [*(Event("Warning", "ReplicaMoved", m) for m in plan.moved),
                            *([recorded[1]] if recorded else []),
                            *(routing.events if routing else [])],
        limited=bool(plan.short or waits), scaling_recorded=[""] if recorded else [],
        wake_at=min((t for t in (backoff, routing and routing.wake_at) if t), default=None),
        children=_sent(ie, policy, plan, children), drop=plan.delete,
        weights=routing.weights if routing else [])


def _sent(ie: Obj, policy: MultiRegion, plan: RegionPlan,
          children: list[tuple[Obj, Replica]]) -> list[Obj]:
    """The replicas to send, each to its region's queue, under names not taken."""
    used = {r.name for _, r in children}
    queues = {r.name: r.queue for r in policy.regions}
    sent, index = [], 0
    for target in plan.create:
        while child_name(ie["metadata"]["name"], f"-{index}") in used:
            index += 1
        used.add(child_name(ie["metadata"]["name"], f"-{index}"))
        sent.append(replica_body(ie, index, target, queues[target]))
    return sent


@dataclass(frozen=True)
class Regions:
    """A multi-region endpoint's pass: its policy and plan, the replicas it keeps, its
    desired count, and ScalingLimited when sending waits (None: it does not)."""

    policy: MultiRegion
    plan: RegionPlan
    left: list[Replica]
    desired: int
    waits: ConditionUpdate | None


def regions_status(snapshot: Snapshot, view: EndpointView, found: Regions
                   ) -> EndpointStatus:
    """The status summing the regions: each region's replicas, readiness, room, cluster
    and unavailability; Ready and ScalingLimited."""
    plan, left, desired = found.plan, found.left, found.desired
    generation, at = view.generation, times.seconds(snapshot.clock)
    ready = sum(1 for r in left if r.ready)
    rooms = _rooms(left)
    regions: list[RegionStatusDict] = []
    for region in found.policy.regions:
        mine = [r for r in left if r.region == region.name]
        until, why = plan.unavailable.get(region.name, (0.0, ""))
        listed: RegionStatusDict = {
            "name": region.name, "replicas": len(mine) + plan.create.count(region.name),
            "readyReplicas": sum(1 for r in mine if r.ready)}
        room, cluster = rooms.get(region.name), next((r.cluster for r in mine if r.cluster),
                                                     None)
        if room is not None:
            listed["room"] = room
        if cluster is not None:
            listed["cluster"] = cluster
        if until:
            listed["unavailableUntil"] = times.millis(until)
        if why:
            listed["message"] = why
        regions.append(listed)
    conditions = set_condition(list(view.status.get("conditions") or []), "Ready",
                               ready >= desired,
                               "ReplicasReady" if ready >= desired else "ReplicasNotReady",
                               f"{ready}/{desired} replicas ready in "
                               f"{sum(1 for r in regions if r['readyReplicas'])} region(s)",
                               generation, at)
    conditions = apply_conditions(conditions, [found.waits or ConditionUpdate(
        "ScalingLimited", bool(plan.short), "InsufficientCapacity" if plan.short
        else "WithinLimits", plan.short)], generation, at)
    status: EndpointStatus = {
        "observedGeneration": generation, "replicas": len(left) + len(plan.create),
        "desiredReplicas": desired, "readyReplicas": ready,
        "updatedReplicas": sum(1 for r in left if r.fresh) + len(plan.create),
        "regions": regions,
        "conditions": conditions}
    return {**status, "cluster": snapshot.cluster_name} if snapshot.cluster_name else status


def _held_back(snapshot: Snapshot, view: EndpointView, plan: RegionPlan
               ) -> tuple[RegionPlan, ConditionUpdate | None, float | None]:
    """PLAN without the replicas not sent this pass, why on ScalingLimited, and when a
    refusal's backoff runs out: none sent while the API server's refusal of the last ones
    backs off, and none without a turn (decide.turns: one namespace's multi-region
    endpoints send replicas for at most `searches_per_namespace` of them a pass)."""
    refusal = snapshot.refused.get(view.key)
    if refusal is not None and snapshot.clock < refusal.retry_at():
        return replace(plan, create=[]), ConditionUpdate(
            "ScalingLimited", True, "ReplicaCreateRefused", (
                f"the API server refused a replica: {refusal.message}; sending again at "
                f"{times.millis(refusal.retry_at())}")[:MESSAGE_LENGTH]), refusal.retry_at()
    if plan.create and turn(snapshot, REGIONS, view.obj, snapshot.endpoints,
                            _sends_replicas) is False:
        return replace(plan, create=[]), kept(
            list(view.status.get("conditions") or []), "ScalingLimited", True, view.key[0],
            snapshot.searches_per_namespace), None
    return plan, None, None


def _sends_replicas(ie: Obj) -> bool:
    """A multi-region endpoint that may send replicas in this pass (decide.turns)."""
    return bool((ie.get("spec") or {}).get("multiRegion")) and short_of_replicas(ie)


def decide_handed_off(snapshot: Snapshot, ie: Obj, at: str) -> EndpointDecision:
    """An endpoint MultiKueue runs elsewhere (a multi-region endpoint's replica, on the
    manager): its Workload, and until a worker has it, why it waits (decide.quota.handoff)."""
    status = ie.get("status") or {}
    parent = parent_of(ie)
    if parent is not None and not any(
            parent == (e["metadata"]["namespace"], e["metadata"]["name"],
                       e["metadata"].get("uid")) for e in snapshot.endpoints):
        return EndpointDecision(ie, status, {}, drop=[ie["metadata"]["name"]])  # orphaned
    spec = snapshot.endpoint(ie).spec
    said, quota = handoff(snapshot, ie, lambda fabric: None if spec is None else
                          kueue.endpoint_workload(ie, spec, fabric))
    wake_at = quota.wake_at if quota is not None else None
    if said is None:
        return EndpointDecision(ie, status, {}, quota=quota, wake_at=wake_at)
    generation = ie["metadata"].get("generation")
    conditions = set_condition(list(status.get("conditions") or []), said.type, False,
                               said.reason, said.message, generation, at)
    return EndpointDecision(ie, status, {"conditions": set_condition(
        conditions, "Ready", False, "NotAdmitted", said.message, generation, at)},
        quota=quota, wake_at=wake_at)
