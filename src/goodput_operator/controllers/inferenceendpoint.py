"""InferenceEndpoint reconcile and autoscaler.

The reconcile runs in the operator's one loop, after the TrainingJobs: decide every
endpoint on one fleet snapshot (placing whole replica groups inside one domain), then do
the I/O, one status write each. The autoscaler is an asyncio task beside it: per endpoint,
every `scaling.intervalSeconds`, it queries Prometheus, asks autoscaling.recommend, and
hands the decision to the loop, which writes it (status, event) with everything else.

Not a kopf timer: kopf timers force a finalizer onto every object they run for
(nolar/kopf#1074), and a finalizer would block deleting endpoints while the operator is
down; nothing here needs one, children are garbage-collected through owner references.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from goodput_operator import metrics, names
from goodput_operator.api.base import describe_errors
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.autoscaling import prometheus
from goodput_operator.autoscaling.algorithm import Decision, History, Sample, recommend
from goodput_operator.controllers.kube import Kube, reconcile_each, write_status
from goodput_operator.controllers.state import State
from goodput_operator.health.quarantine import iso
from goodput_operator.resources import inference as build
from goodput_operator.resources import trainingjob as tj
from goodput_operator.resources.inferenceplan import EndpointPlan, groups_of, plan
from goodput_operator.topology.model import Fleet, endpoint_owner
from goodput_operator.topology.placement import Request, place, room_for

Obj = dict[str, Any]
log = logging.getLogger("goodput.inferenceendpoint")
PLURAL = "inferenceendpoints"
MAX_DECISIONS = 16


@dataclass
class Scaled:
    """The autoscaler's latest decision for one endpoint, for the loop to write."""

    decision: Decision
    current: int
    at: float
    written: bool = False


@dataclass
class EndpointDecision:
    ie: Obj
    status: Obj
    desired: Obj
    events: list[tuple[str, str, str]] = field(default_factory=list)
    create: list[Obj] = field(default_factory=list)
    pin: list[tuple[Obj, str, str]] = field(default_factory=list)  # pod, node, domain
    delete: list[str] = field(default_factory=list)
    services: list[Obj] = field(default_factory=list)


def placed_groups(pods: Iterable[Obj], size: int) -> int:
    """Groups whose every member holds a node (bound, or pinned and reserved)."""
    groups = groups_of([p for p in pods
                        if p.get("status", {}).get("phase") not in ("Failed", "Succeeded")])
    return sum(1 for g in groups.values() if len(g.pods) == size and all(g.nodes()))


def request_of(spec: InferenceEndpointSpec) -> Request:
    """A replica group: multi-node groups must stay inside one domain."""
    shape = spec.replica_shape
    return Request(shape.workers, shape.accelerators_per_worker, "domain",
                   "required" if shape.workers > 1 else "preferred")


def desired_replicas(state: State, ie: Obj, spec: InferenceEndpointSpec) -> int:
    if spec.scaling is None:
        return 1 if spec.replicas is None else spec.replicas
    key = (ie["metadata"]["namespace"], ie["metadata"]["name"])
    scaled = state.scaled.get(key)
    if scaled is not None:
        return int(scaled.decision.desired)
    status = ie.get("status") or {}
    start = status.get("desiredReplicas") or spec.replicas or spec.scaling.min_replicas
    return max(spec.scaling.min_replicas, min(spec.scaling.max_replicas, int(start)))


def decide_endpoint(state: State, ie: Obj) -> EndpointDecision:
    meta = ie["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = dict(ie.get("status") or {})
    generation = meta.get("generation")
    conditions = list(status.get("conditions") or [])
    try:
        spec = InferenceEndpointSpec.model_validate(ie["spec"])
    except ValidationError as err:
        detail = describe_errors(err)
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "InvalidSpec", detail, generation)})
    fleet = state.fleets.get(spec.ultra_server_group)
    if fleet is None:
        message = f"UltraServerGroup {spec.ultra_server_group!r} does not exist"
        return EndpointDecision(ie, status, {"conditions": set_condition(
            conditions, "Ready", False, "UltraServerGroupNotFound", message, generation)})
    pods = list(state.endpoint_pods.get((namespace, name), {}).values())
    lost = {n for p in pods if (n := p.get("spec", {}).get("nodeName"))
            and (n not in fleet.nodes or fleet.nodes[n].state == "quarantined")}
    desired = desired_replicas(state, ie, spec)
    rev = build.revision(ie["spec"])
    size = spec.replica_shape.workers
    decided = plan(pods, size, desired, rev, spec.rollout, lost)
    result = EndpointDecision(ie, status, {}, services=[build.service(ie, spec),
                                                        build.headless(ie)])
    resource = fleet.shape.accelerator_resource
    for index, why in sorted(decided.delete.items()):
        result.delete += [p["metadata"]["name"] for p in decided.groups[index].pods.values()]
        if not why.startswith(("replaced", "scaling down")):
            result.events.append(("Warning", "GroupRestarted", f"group {index}: {why}"))
    writes = size * (len(decided.create) + len(decided.place)) + sum(
        size - len(decided.groups[i].pods) for i in decided.complete)
    waiting: list[str] = []
    if not writes or state.spend_writes(writes):  # else the next pass, right after
        for index, revision in decided.create:
            result.create += build.group_pods(ie, spec, index, revision, resource)
        for index in decided.complete:
            group = decided.groups[index]
            result.create += [
                p for p in build.group_pods(ie, spec, index, group.revision, resource)
                if int(p["metadata"]["labels"][names.MEMBER_LABEL]) not in group.pods]
        waiting = _place(fleet, spec, decided, namespace, name, result)
    conditions = _conditions(state, ie, spec, decided, desired, waiting, conditions)
    result.desired = {
        "observedGeneration": generation, "replicas": decided.live,
        "desiredReplicas": desired, "readyReplicas": decided.ready,
        "updatedReplicas": decided.updated, "selector": build.leader_selector(name),
        "groups": [{"index": i, "domain": g.domain() or None,
                    "nodes": [n for n in g.nodes() if n], "ready": g.ready(size),
                    "revision": g.revision}
                   for i, g in sorted(decided.groups.items()) if i not in decided.delete],
        "conditions": conditions,
    }
    _record_scaling(state, ie, result)
    return result


def _place(fleet: Fleet, spec: InferenceEndpointSpec, decided: EndpointPlan, namespace: str,
           name: str, result: EndpointDecision) -> list[str]:
    """Place each whole, gated group inside one domain; reserve it at once so the next
    group (and the next endpoint) sees it. Groups that do not fit stay gated, whole."""
    waiting = []
    request = request_of(spec)
    for index in decided.place:
        group = decided.groups[index]
        placed = place(fleet, request)
        if not placed.ok:
            waiting.append(f"group {index}: {placed.reason}")
            continue
        for rank in placed.ranks:
            pod = group.pods[rank.rank]
            fleet.bind(f"{namespace}/{pod['metadata']['name']}", rank.node,
                       request.accelerators, endpoint_owner(namespace, name))
            result.pin.append((pod, rank.node, rank.domain))
        result.events.append(("Normal", "Placed", f"group {index}: {placed.reason}"))
    return waiting


def _conditions(state: State, ie: Obj, spec: InferenceEndpointSpec, decided: EndpointPlan,
                desired: int, waiting: list[str], conditions: list[Obj]) -> list[Obj]:
    generation = ie["metadata"].get("generation")
    ready = decided.ready >= desired
    conditions = set_condition(conditions, "Ready", ready,
                               "ReplicasReady" if ready else "ReplicasNotReady",
                               f"{decided.ready}/{desired} replica groups ready", generation)
    progressing = decided.updated < desired or decided.live != desired
    conditions = set_condition(conditions, "Progressing", progressing,
                               "RollingOut" if progressing else "Complete",
                               f"{decided.updated}/{desired} groups on the current revision, "
                               f"{decided.live} exist", generation)
    key = (ie["metadata"]["namespace"], ie["metadata"]["name"])
    scaled = state.scaled.get(key) if spec.scaling else None
    limited = [*([scaled.decision.limited] if scaled and scaled.decision.limited else []),
               *waiting]
    metrics.SCALING_LIMITED.labels(*key).set(1 if limited else 0)
    conditions = set_condition(conditions, "ScalingLimited", bool(limited),
                               "InsufficientCapacity" if waiting or (
                                   scaled and "free domains" in (scaled.decision.limited or ""))
                               else "AtMaxReplicas" if limited else "WithinLimits",
                               "; ".join(limited), generation)
    if spec.scaling is not None:
        missing = scaled.decision.unavailable if scaled else None
        conditions = set_condition(conditions, "MetricsUnavailable", bool(missing),
                                   "MetricsMissing" if missing else "MetricsFresh",
                                   f"{missing}; holding {desired} replicas" if missing else "",
                                   generation)
        panic = bool(scaled and scaled.decision.panic)
        conditions = set_condition(conditions, "Panic", panic,
                                   "Burst" if panic else "Steady",
                                   scaled.decision.reason if scaled and panic else "",
                                   generation)
    return conditions


def _record_scaling(state: State, ie: Obj, result: EndpointDecision) -> None:
    """A new autoscaler decision that changes the size goes into the status (and an
    event) once."""
    key = (ie["metadata"]["namespace"], ie["metadata"]["name"])
    scaled = state.scaled.get(key)
    if scaled is None or scaled.written or scaled.decision.desired == scaled.current:
        return
    entry = {"time": iso(scaled.at), "from": scaled.current, "to": scaled.decision.desired,
             "reason": scaled.decision.reason, "metrics": scaled.decision.metrics}
    recent = [*(result.status.get("recentScaling") or []), entry][-MAX_DECISIONS:]
    result.desired["lastScaling"] = entry
    result.desired["recentScaling"] = recent
    result.events.append(("Normal", "Scaled", f"{scaled.current} -> "
                                              f"{scaled.decision.desired}: "
                                              f"{scaled.decision.reason}"))
    scaled.written = True


def _api_reason(err: ApiException) -> str:
    """The API server's own message (its Status body), else the HTTP reason."""
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except ValueError:
        return str(err.reason)


async def apply_endpoint(state: State, kube: Kube, decided: EndpointDecision) -> None:
    ie = decided.ie
    meta = ie["metadata"]
    if decided.create:
        try:
            await asyncio.gather(*(asyncio.to_thread(kube.create, body)
                                   for body in decided.services))
        except ApiException as err:  # e.g. the cluster's service IP range is full
            reason = _api_reason(err)
            decided.desired["conditions"] = set_condition(
                decided.desired.get("conditions") or [], "Ready", False,
                "ServiceCreateFailed", f"cannot create the endpoint's Service: {reason}",
                meta.get("generation"))
            decided.events.append(("Warning", "ServiceCreateFailed", reason))
    pins = [asyncio.to_thread(kube.patch_pod, meta["namespace"], pod["metadata"]["name"],
                              tj.pin(pod, node, domain)) for pod, node, domain in decided.pin]
    for pinned in await asyncio.gather(*pins):  # pinned pods first: they are placed
        state.upsert_pod(pinned)
    for created in await asyncio.gather(*(asyncio.to_thread(kube.create, body)
                                          for body in decided.create)):
        if created is not None:
            state.upsert_pod(created)
    await asyncio.gather(*(asyncio.to_thread(kube.delete_pod, meta["namespace"], name)
                           for name in decided.delete))
    await write_status(kube, PLURAL, ie, decided.status, decided.desired, decided.events)


async def reconcile_endpoints(state: State, kube: Kube) -> None:
    await reconcile_each("InferenceEndpoint", list(state.endpoints.values()),
                         lambda ie: decide_endpoint(state, ie),
                         lambda decided: apply_endpoint(state, kube, decided),
                         lambda decided: decided.ie)


# ---- the autoscaler ---------------------------------------------------------------------

async def evaluate(state: State, ie: Obj, spec: InferenceEndpointSpec, now: float) -> None:
    """Query the metrics, decide, and hand the decision to the loop."""
    assert spec.scaling is not None
    meta = ie["metadata"]
    key = (meta["namespace"], meta["name"])
    url = spec.scaling.prometheus_url or state.prometheus_url
    samples = []
    for metric in spec.scaling.metrics:
        promql = prometheus.query_for(metric, meta["namespace"], meta["name"])
        try:
            value = await asyncio.to_thread(
                prometheus.instant, url, promql, 5.0, 4.0 * spec.scaling.interval_seconds)
        except prometheus.PrometheusError as err:
            previous = state.scaled.get(key)
            if previous is None or previous.decision.unavailable is None:  # once per outage
                log.warning("%s/%s: %s", meta["namespace"], meta["name"], err)
            value = None
        samples.append(Sample(metric.type, metric.target, value, metric.type))
    current = desired_replicas(state, ie, spec)
    fleet = state.fleets.get(spec.ultra_server_group)
    capacity = None
    if fleet is not None:  # groups holding nodes now, plus what the free space can host
        placed = placed_groups(state.endpoint_pods.get(key, {}).values(),
                               spec.replica_shape.workers)
        capacity = placed + room_for(fleet, request_of(spec),
                                     max(0, spec.scaling.max_replicas - placed))
    history = state.scaling_history.setdefault(key, History())
    decision = recommend(samples, current, spec.scaling, history, now, capacity)
    state.scaled[key] = Scaled(decision, current, now)
    if decision.desired != current:
        log.info("%s/%s: %d -> %d: %s", meta["namespace"], meta["name"], current,
                 decision.desired, decision.reason)
        metrics.SCALING_DECISIONS.labels("up" if decision.desired > current else "down").inc()
    state.wake.set()


async def run_autoscaler(state: State, tick: float = 1.0) -> None:
    """Every TICK, evaluate the endpoints whose interval has passed."""
    while True:
        now = time.time()
        for key, ie in list(state.endpoints.items()):
            try:
                spec = InferenceEndpointSpec.model_validate(ie["spec"])
            except ValidationError:
                continue
            if spec.scaling is None:
                state.scaled.pop(key, None)
                continue
            last = state.scaled.get(key)
            # within half a tick of due counts as due: evaluations stay one interval apart
            if last is None or now - last.at >= spec.scaling.interval_seconds - tick / 2:
                try:
                    await evaluate(state, ie, spec, now)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("autoscaling %s/%s failed", *key)
        await asyncio.sleep(tick)
