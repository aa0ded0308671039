"""An InferenceEndpoint's pass, decided: its replica groups (decide.replicas), the placement
of whole gated groups inside one domain each, and the complete status to write.

Like jobs, groups are placed inside the caller's `Fleet.trial()`, so the next group and the
next endpoint see the reservation, which the controller makes when it applies the plan.
Pod writes come out of the pass's write budget: what a pass will not write, it does not
build (9,000 pod bodies per pass were most of the memory at scale).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from goodput_operator import names
from goodput_operator.api.base import describe_errors
from goodput_operator.api.conditions import set_condition, stamp
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.decide.fit import pod_fit
from goodput_operator.decide.replicas import EndpointPlan, Removal, groups_of, plan_groups
from goodput_operator.decide.snapshot import Scaled, Snapshot
from goodput_operator.decide.types import Event, Reservation
from goodput_operator.health.quarantine import iso
from goodput_operator.resources import inference as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import FINISHED, owned, pinned
from goodput_operator.topology.model import Fleet, endpoint_owner
from goodput_operator.topology.placement import Request, place

Obj = dict[str, Any]
MAX_DECISIONS = 16  # scaling decisions kept in status.recentScaling


@dataclass
class WriteBudget:
    """Pod writes left in this pass; what does not fit is counted and waits for the next."""

    left: int
    deferred: int = 0

    def spend(self, count: int) -> bool:
        if self.left <= 0:
            self.deferred += count
            return False
        self.left -= count
        return True


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
    scaling_recorded: bool = False  # the autoscaler's decision is in this status
    wake_at: float | None = None  # a refused create's backoff runs out then

    @property
    def key(self) -> tuple[str, str]:
        meta = self.ie["metadata"]
        return meta["namespace"], meta["name"]


def placed_groups(pods: Iterable[Obj], size: int) -> int:
    """Groups whose every member holds a node (bound, or pinned and reserved)."""
    groups = groups_of([p for p in pods if p.get("status", {}).get("phase") not in FINISHED])
    return sum(1 for g in groups.values() if len(g.pods) == size and all(g.nodes()))


def request_of(spec: InferenceEndpointSpec, eligible: frozenset[str] | None = None,
               why: str = "") -> Request:
    """A replica group: multi-node groups must stay inside one domain; ELIGIBLE: the nodes
    its pods fit (decide.fit), None for all."""
    shape = spec.replica_shape
    return Request(shape.workers, shape.accelerators_per_worker, "domain",
                   "required" if shape.workers > 1 else "preferred", eligible, why)


def desired_replicas(scaled: Scaled | None, ie: Obj, spec: InferenceEndpointSpec) -> int:
    if spec.scaling is None:
        return 1 if spec.replicas is None else spec.replicas
    if scaled is not None:
        return int(scaled.decision.desired)
    status = ie.get("status") or {}
    start = status.get("desiredReplicas") or spec.replicas or spec.scaling.min_replicas
    return max(spec.scaling.min_replicas, min(spec.scaling.max_replicas, int(start)))


def decide_endpoint(snapshot: Snapshot, ie: Obj, budget: WriteBudget) -> EndpointDecision:
    meta = ie["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = dict(ie.get("status") or {})
    generation, at = meta.get("generation"), stamp(snapshot.clock)
    conditions = list(status.get("conditions") or [])
    try:
        spec = InferenceEndpointSpec.model_validate(ie["spec"])
    except ValidationError as err:
        detail = describe_errors(err)
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "InvalidSpec", detail, generation, at)})
    fleet = snapshot.fleets.get(spec.ultra_server_group)
    if fleet is None:
        message = f"UltraServerGroup {spec.ultra_server_group!r} does not exist"
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "UltraServerGroupNotFound", message, generation, at)})
    pods = owned(snapshot.endpoint_pods.get((namespace, name), {}).values(), ie)
    lost = {n for p in pods if (n := p.get("spec", {}).get("nodeName"))
            and (n not in fleet.nodes or fleet.nodes[n].state == "quarantined")}
    latest = snapshot.scaled.get((namespace, name))
    scaled = latest if spec.scaling else None
    desired = desired_replicas(latest, ie, spec)
    size = spec.replica_shape.workers
    decided = plan_groups(pods, size, desired, build.revision(ie["spec"]), spec.rollout, lost)
    result = EndpointDecision(ie, status, {}, services=[build.service(ie, spec),
                                                        build.headless(ie)])
    for index, why in sorted(decided.delete.items()):
        result.delete += [p["metadata"]["name"] for p in decided.groups[index].pods.values()]
        if decided.removal[index] is Removal.RESTART:
            result.events.append(Event("Warning", "GroupRestarted", f"group {index}: {why}"))
    refusal = snapshot.refused.get((namespace, name))
    if refusal is not None and snapshot.clock < refusal.retry_at():
        # the API server refused its pods: no creates, and none of the pass's write budget
        # (other endpoints' rollouts), until the backoff runs out
        decided.create, decided.complete = [], []
        result.wake_at = refusal.retry_at()
    writes = size * (len(decided.create) + len(decided.place)) + sum(
        size - len(decided.groups[i].pods) for i in decided.complete)
    waiting: list[str] = []
    deferred_before = budget.deferred
    if not writes or budget.spend(writes):  # else the next pass, right after
        result.writes = writes
        fabric = Fabric.of(snapshot.groups[spec.ultra_server_group])
        for index in decided.complete:
            group = decided.groups[index]
            result.create += [
                p for p in build.group_pods(ie, spec, index, group.revision, fabric)
                if int(p["metadata"]["labels"][names.MEMBER_LABEL]) not in group.pods]
        new = {index: {int(p["metadata"]["labels"][names.MEMBER_LABEL]): p
                       for p in build.group_pods(ie, spec, index, revision, fabric)}
               for index, revision in decided.create}
        waiting = _place(snapshot, fleet, spec, decided, result, fabric, new)
    result.deferred = budget.deferred - deferred_before
    limited = [*([scaled.decision.limited] if scaled and scaled.decision.limited else []),
               *waiting]
    result.limited = bool(limited)
    result.desired = {
        "observedGeneration": generation, "replicas": decided.live,
        "desiredReplicas": desired, "readyReplicas": decided.ready,
        "updatedReplicas": decided.updated, "selector": build.leader_selector(name),
        "groups": [{"index": i, "domain": g.domain() or None,
                    "nodes": [n for n in g.nodes() if n], "ready": g.ready(size),
                    "revision": g.revision}
                   for i, g in sorted(decided.groups.items()) if i not in decided.delete],
        "conditions": _conditions(spec, decided, desired, scaled, waiting, limited,
                                  conditions, generation, at),
    }
    _record_scaling(latest, result)
    return result


def _place(snapshot: Snapshot, fleet: Fleet, spec: InferenceEndpointSpec,
           decided: EndpointPlan, result: EndpointDecision, fabric: Fabric,
           new: dict[int, dict[int, Obj]]) -> list[str]:
    """Place each whole, gated group, then each NEW one (its pods by rank, not created
    yet), inside one domain, on nodes its pods fit (as the group's FABRIC dresses them);
    reserve it at once so the next group (and the next endpoint) sees it. A gated group
    is pinned; a new one placed now is created pinned, one write per pod instead of a
    gated create and a pin a pass later. Groups that do not fit stay (or are created)
    gated, whole."""
    namespace, name = result.key
    owner = endpoint_owner(namespace, name)
    group_name = spec.ultra_server_group
    waiting: list[str] = []
    if not decided.place and not new:
        return waiting
    member = build.group_pods(result.ie, spec, 0, "0", fabric)[0]
    request = request_of(spec, *pod_fit(snapshot.nodes, snapshot.memo, fleet, group_name,
                                        member["spec"]))
    done: list[tuple[int, str, str]] = []  # (group, domain, why)
    for index in [*decided.place, *new]:  # the groups waiting longest first
        pods = new[index] if index in new else decided.groups[index].pods
        placed = place(fleet, request)
        if not placed.ok:
            waiting.append(f"group {index}: {placed.reason}")
            result.create += new.get(index, {}).values()
            continue
        done.append((index, placed.ranks[0].domain, placed.reason))
        for rank in placed.ranks:
            pod = pods[rank.rank]
            key = f"{namespace}/{pod['metadata']['name']}"
            fleet.bind(key, rank.node, request.accelerators, owner)
            result.reservations.append(Reservation(group_name, key, rank.node,
                                                   request.accelerators, owner))
            if index in new:
                result.create.append(pinned(pod, rank.node, rank.domain))
            else:
                result.pin.append((pod, rank.node, rank.domain))
    if done:  # one event a pass, not one a group: a rollout's 9,000 groups were 9,000 POSTs
        result.events.append(Event("Normal", "Placed", f"group {done[0][0]}: {done[0][2]}"
                                   if len(done) == 1 else
                                   f"{len(done)} groups placed, each inside one "
                                   f"{fleet.shape.domain_noun}: "
                                   + ", ".join(f"{i} in {d}" for i, d, _ in done)))
    return waiting


def _conditions(spec: InferenceEndpointSpec, decided: EndpointPlan, desired: int,
                scaled: Scaled | None, waiting: list[str], limited: list[str],
                conditions: list[Obj], generation: int | None, at: str) -> list[Obj]:
    ready = decided.ready >= desired
    conditions = set_condition(conditions, "Ready", ready,
                               "ReplicasReady" if ready else "ReplicasNotReady",
                               f"{decided.ready}/{desired} replica groups ready", generation,
                               at)
    progressing = decided.updated < desired or decided.live != desired
    conditions = set_condition(conditions, "Progressing", progressing,
                               "RollingOut" if progressing else "Complete",
                               f"{decided.updated}/{desired} groups on the current revision, "
                               f"{decided.live} exist", generation, at)
    short = bool(waiting) or bool(scaled and scaled.decision.capacity_limited)
    conditions = set_condition(conditions, "ScalingLimited", bool(limited),
                               "InsufficientCapacity" if short
                               else "AtMaxReplicas" if limited else "WithinLimits",
                               "; ".join(limited), generation, at)
    if spec.scaling is not None:
        missing = scaled.decision.unavailable if scaled else None
        conditions = set_condition(conditions, "MetricsUnavailable", bool(missing),
                                   "MetricsMissing" if missing else "MetricsFresh",
                                   f"{missing}; holding {desired} replicas" if missing else "",
                                   generation, at)
        panic = bool(scaled and scaled.decision.panic)
        conditions = set_condition(conditions, "Panic", panic,
                                   "Burst" if panic else "Steady",
                                   scaled.decision.reason if scaled and panic else "",
                                   generation, at)
    return conditions


def _record_scaling(scaled: Scaled | None, result: EndpointDecision) -> None:
    """A new autoscaler decision that changes the size goes into the status (and an
    event) once."""
    if scaled is None or scaled.written or scaled.decision.desired == scaled.current:
        return
    entry = {"time": iso(scaled.at), "from": scaled.current, "to": scaled.decision.desired,
             "reason": scaled.decision.reason, "metrics": scaled.decision.metrics}
    recent = [*(result.status.get("recentScaling") or []), entry][-MAX_DECISIONS:]
    result.desired["lastScaling"] = entry
    result.desired["recentScaling"] = recent
    result.events.append(Event("Normal", "Scaled", f"{scaled.current} -> "
                                                   f"{scaled.decision.desired}: "
                                                   f"{scaled.decision.reason}"))
    result.scaling_recorded = True
