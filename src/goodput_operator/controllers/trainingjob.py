"""TrainingJob reconcile: observed state -> jobplan -> I/O, one status write, then events.

One loop reconciles every job in order (priority, then arrival), so a higher-priority job
gets freed capacity first and placements within a pass see each other's reservations.
A placement is written to the job's status before any pod is pinned or created pinned, so
an operator restart mid-launch finishes the launch from it instead of redoing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from goodput_operator import metrics
from goodput_operator.api.base import describe_errors
from goodput_operator.api.conditions import now, set_condition
from goodput_operator.api.trainingjob import PHASES, TrainingJobSpec
from goodput_operator.controllers import inferenceendpoint, runtime, ultraservergroup
from goodput_operator.controllers.kube import Kube, reconcile_each, write_status
from goodput_operator.controllers.state import PASS_WRITE_BUDGET, State
from goodput_operator.health import badput
from goodput_operator.health.quarantine import Finding, iso, parse_time, record_of
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.jobplan import (
    TERMINAL,
    Lost,
    Plan,
    attempt_of,
    books_of,
    index_of,
    plan,
)
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import Placement, RankSlot, Request, place
from goodput_operator.topology.replacement import Elastic, replace

Obj = dict[str, Any]
log = logging.getLogger("goodput.trainingjob")
PLURAL = "trainingjobs"
API_CONCURRENCY = 16  # concurrent API calls per job pass (pod creates, pins, deletes)
DEBOUNCE_SECONDS = 0.02  # one pass for a burst of events, not one per event


def restart_of(job: Obj) -> int:
    return int((job.get("status") or {}).get("restarts", 0))


def reserve_from_status(state: State, job: Obj) -> None:
    """Count a written placement for ranks whose pods are missing or still gated: after an
    operator restart between writing a placement and pinning, they hold nothing yet.
    Finished pods are never re-counted, and a deleted job's reservations are released
    when its deletion is seen (State.remove_job)."""
    status = job.get("status") or {}
    fleet = state.fleets.get(job["spec"].get("ultraServerGroup") or "")
    ranks = (status.get("placement") or {}).get("ranks") or []
    if fleet is None or not ranks or status.get("phase") in TERMINAL:
        return
    meta = job["metadata"]
    pods = state.job_pods.get((meta["namespace"], meta["name"]), {})
    restart = int(status.get("restarts", 0))
    for rank in ranks:
        name = build.pod_name(meta["name"], restart, rank["rank"])
        key = f"{meta['namespace']}/{name}"
        pod = pods.get(name)
        if (pod is None or build.is_gated(pod)) and key not in fleet.pods:
            fleet.bind(key, rank["node"], int(job["spec"]["acceleratorsPerWorker"]),
                       trainingjob_owner(meta["namespace"], meta["name"]))


@dataclass
class Decision:
    """One job's pass, decided: the status to write, events, and the children to change."""

    job: Obj
    status: Obj
    desired: Obj
    events: list[tuple[str, str, str]] = field(default_factory=list)
    plan: Plan | None = None  # None: only the status changes (invalid spec, no group)
    placement: Obj | None = None
    fresh: bool = False  # a placement made in this pass: write it before pinning
    spec: TrainingJobSpec | None = None
    observed: dict[str, Obj] = field(default_factory=dict)  # the job's pods, by name


def decide_job(state: State, job: Obj) -> Decision:
    """Everything this job's pass will do, decided without awaiting anything: all jobs of a
    pass are decided on one snapshot of the fleet, so capacity freed while the pass writes
    goes to the next pass's highest-priority job, not to whichever job is decided last."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status: Obj = dict(job.get("status") or {})
    generation = meta.get("generation")
    conditions: list[Obj] = list(status.get("conditions") or [])
    try:
        spec = TrainingJobSpec.model_validate(job["spec"])
    except ValidationError as err:
        detail = describe_errors(err)
        return Decision(job, status, {"phase": "Failed", "message": f"invalid spec: {detail}",
                                      "conditions": set_condition(conditions, "Failed", True,
                                                                  "InvalidSpec", detail,
                                                                  generation)})
    fleet = state.fleets.get(spec.ultra_server_group or "")
    if fleet is None:
        reason, message = ("UltraServerGroupNotFound",
                           f"UltraServerGroup {spec.ultra_server_group!r} does not exist") \
            if spec.ultra_server_group else \
            ("NoUltraServerGroup", "jobs without spec.ultraServerGroup are not placed yet: "
                                   "set spec.ultraServerGroup")
        return Decision(job, status, {
            "phase": "Pending", "message": message,
            "conditions": set_condition(conditions, "Placed", False, reason, message,
                                        generation)})

    pods = list(state.job_pods.get((namespace, name), {}).values())
    clock = time.time()
    decided = plan(job, pods, fleet.shape.accelerator_resource,
                   lost_nodes(state, fleet, job, pods, clock), clock, state.report_url,
                   suspects=state.seen_unhealthy.keys(), probed=state.probed_at, spec=spec)
    state.wake_at(decided.wake_at)
    for node, evidence in decided.blame.items():  # the group pass quarantines them
        state.blamed.setdefault(node, Finding("WorkerFailure", evidence, clock))
        state.wake.set()
    desired: Obj = {"phase": decided.phase, "message": decided.message, **decided.status}
    if (namespace, name) in state.progress:
        desired["progress"] = state.progress[(namespace, name)]
    placement = status.get("placement")
    events: list[tuple[str, str, str]] = list(decided.events)
    for type_, value, reason, message in decided.conditions:
        conditions = set_condition(conditions, type_, value, reason, message, generation)

    fresh = False
    if decided.needs_placement:
        placement, conditions = _place(fleet, spec, job, conditions, events)
        if placement:
            if desired["phase"] != "Recovering":
                desired["phase"] = "Placing"
            desired["message"] = placement["reason"]
            fresh = True
            books = {**books_of(status), **desired}
            incident = badput.current_incident(books)
            if incident is not None and not incident.get("replacedAt"):
                desired["incidents"] = badput.replaced(books, clock, incident.get("action")
                                                       or "wait")["incidents"]
            by_rank = {r["rank"]: r for r in placement["ranks"]}
            decided.pin = [(p["metadata"]["name"], by_rank[index_of(p)]["node"],
                            by_rank[index_of(p)]["domain"]) for p in pods
                           if index_of(p) in by_rank and attempt_of(p) == restart_of(job)
                           and build.is_gated(p)]
            if spec.sdc.probe_on_start:  # probes first: the workers stay gated
                decided.hold, decided.pin = True, []
                decided.probe = sorted({r["node"] for r in placement["ranks"]})
        else:
            desired["message"] = next(c["message"] for c in conditions if c["type"] == "Placed")
    if decided.restart:
        desired["restarts"] = restart_of(job) + 1
        placement, action, why = _replacement(fleet, spec, job, placement,
                                              decided.failed_nodes)
        books = {**books_of(status), **desired}
        desired["incidents"] = (badput.replaced(books, clock, action) if placement else
                                badput.update_incident(books, action=action))["incidents"]
        desired["message"] = f"{decided.message}: {why}"
        events.append(("Normal", "Replaced" if placement else "WaitingForCapacity", why))
        _count_rollback(job, desired["incidents"][-1])
        log.warning("%s/%s: %s: %s", namespace, name, decided.message, why)
    if decided.phase == "Suspended":
        placement = None

    desired["placement"] = placement
    desired["conditions"] = conditions
    if "goodput" in desired:
        desired["goodput"] = {**desired["goodput"],
                              "ratio": badput.ratio(desired["goodput"], clock)}
    desired["workers"] = {"desired": decided.workers, "ready": decided.ready,
                          "succeeded": decided.succeeded, "failed": decided.failed}
    live = placement is not None and desired["phase"] not in TERMINAL
    desired["accelerators"] = decided.workers * spec.accelerators_per_worker if live else 0
    if desired["phase"] == "Running" and not status.get("startTime"):
        desired["startTime"] = now()
    if desired["phase"] in TERMINAL and not status.get("completionTime"):
        desired["completionTime"] = now()
    desired["observedGeneration"] = generation
    if desired["phase"] != status.get("phase") and desired["phase"] in (
            "Running", "Succeeded", "Failed", "Suspended"):
        kind = "Warning" if desired["phase"] == "Failed" else "Normal"
        events.append((kind, desired["phase"], desired["message"]))
    _observe(job, desired, events, clock)
    return Decision(job, status, desired, events, decided, placement, fresh, spec,
                    {p["metadata"]["name"]: p for p in pods})


async def apply_job(state: State, kube: Kube, decision: Decision) -> None:
    job, status, desired, events = (decision.job, decision.status, decision.desired,
                                    decision.events)
    decided, placement = decision.plan, decision.placement
    if decided is None or decision.spec is None:
        await write_status(kube, PLURAL, job, status, desired, events)
        return
    observed = decision.observed
    group = state.groups.get(decision.spec.ultra_server_group or "")
    if group is not None:
        for node in decided.probe:
            await ultraservergroup.start_probe(state, kube, group, node, "start")
    if decision.fresh:  # the placement is on record before any pod is pinned to it
        await write_status(kube, PLURAL, job, status, desired, events)
        await _children(state, kube, job, decided, placement, observed)
    else:
        await _children(state, kube, job, decided, placement, observed)
        await write_status(kube, PLURAL, job, status, desired, events)
    await _expire(kube, job, decision.spec, {**status, **desired})


async def reconcile_job(state: State, kube: Kube, job: Obj) -> None:
    await apply_job(state, kube, decide_job(state, job))


def lost_nodes(state: State, fleet: Fleet, job: Obj, pods: list[Obj], now: float
               ) -> dict[str, Lost]:
    """The nodes this job touches (its ranks, its open incident's, its failed pods') that
    it may no longer use: quarantined, gone, or moved out of its group."""
    status = job.get("status") or {}
    names = {r["node"] for r in (status.get("placement") or {}).get("ranks") or []}
    for incident in (status.get("incidents") or [])[-1:]:
        names.update(incident.get("nodes") or [])
    names.update(p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName"))
    lost: dict[str, Lost] = {}
    for name in names:
        node = fleet.nodes.get(name)
        record = record_of(state.nodes[name]) if name in state.nodes else None
        if node is None:
            lost[name] = Lost("the node left the group or was deleted", now)
        elif node.state == "quarantined" and record is not None:
            lost[name] = Lost(f"quarantined ({record.reason}: {record.evidence})", record.since,
                              record.reason)
    return lost


def _replacement(fleet: Fleet, spec: TrainingJobSpec, job: Obj, placement: Obj | None,
                 failed: list[str]) -> tuple[Obj | None, str, str]:
    """The next attempt's placement: the same one when no node was lost, else failed ranks
    on spares keeping the topology, the whole gang moved, shrunk, or none (wait)."""
    ranks = (placement or {}).get("ranks") or []
    if placement is None or not ranks:
        return None, "wait", "no placement yet: placing the gang when it fits"
    if not failed:
        return ({**placement, "placedAt": iso(time.time())}, "restart",
                "restarting on the same nodes")
    if spec.failure_policy.node_replacement == "wait":
        return None, "wait", ("failurePolicy.nodeReplacement is wait: placing the gang again "
                              "when it fits")
    current = Placement(True, "", tuple(
        RankSlot(r["rank"], r["node"], r.get("domain") or "",
                 fleet.nodes[r["node"]].slot if r["node"] in fleet.nodes else 0)
        for r in sorted(ranks, key=lambda r: r["rank"])))
    request = Request(len(ranks), spec.accelerators_per_worker, spec.topology.unit,
                      spec.topology.policy)
    elastic = Elastic(spec.elastic.min_workers, spec.elastic.step) if spec.elastic else None
    meta = job["metadata"]
    owner = trainingjob_owner(meta["namespace"], meta["name"])
    result = replace(fleet, current, failed, request, owner, elastic)
    if result.action == "wait":
        return None, "wait", result.reason
    restart = restart_of(job) + 1
    for rank in result.ranks:  # reserve now: later jobs in this pass must see it
        key = f"{meta['namespace']}/{build.pod_name(meta['name'], restart, rank.rank)}"
        fleet.bind(key, rank.node, spec.accelerators_per_worker, owner)
    domains = list(dict.fromkeys(r.domain for r in result.ranks))
    return ({"domains": domains, "reason": result.reason, "placedAt": iso(time.time()),
             "ranks": [{"rank": r.rank, "node": r.node, "domain": r.domain}
                       for r in result.ranks]}, result.action, result.reason)


def _count_rollback(job: Obj, incident: Obj) -> None:
    """Steps given up by resuming from an older checkpoint than the newest, after SDC."""
    latest = ((job.get("status") or {}).get("checkpoint") or {}).get("latest") or {}
    resume = incident.get("resumeFrom") or {}
    if incident["cause"] == "SilentDataCorruption" and "step" in latest:
        meta = job["metadata"]
        metrics.ROLLBACK_STEPS.labels(meta["namespace"], meta["name"]).inc(
            max(0, int(latest["step"]) - int(resume.get("step", 0))))


def _observe(job: Obj, desired: Obj, events: list[tuple[str, str, str]], now: float) -> None:
    """Metrics: each recovered incident's phases and cost, and the job's goodput ratio."""
    meta = job["metadata"]
    goodput = desired.get("goodput") or (job.get("status") or {}).get("goodput") or {}
    ratio = badput.ratio(goodput, now)
    if ratio is not None:
        metrics.GOODPUT_RATIO.labels(meta["namespace"], meta["name"]).set(ratio)
    incidents = desired.get("incidents") or (job.get("status") or {}).get("incidents") or []
    failed_at = parse_time(incidents[-1].get("failedAt")) if incidents else None
    metrics.RECOVERING_SECONDS.labels(meta["namespace"], meta["name"]).set(
        now - failed_at if desired.get("phase") == "Recovering" and failed_at else 0)
    if not any(reason == "Recovered" for _, reason, _ in events):
        return
    incident = desired["incidents"][-1]
    for phase in badput.PHASES:
        metrics.RECOVERY_SECONDS.labels(phase).observe(incident.get(f"{phase}Seconds") or 0)
    lost = sum(incident.get(f"{k}Seconds") or 0 for k in (*badput.PHASES, "lostWork"))
    metrics.BADPUT_SECONDS.labels(incident["cause"]).inc(lost)


def _place(fleet: Fleet, spec: TrainingJobSpec, job: Obj, conditions: list[Obj],
           events: list[tuple[str, str, str]]) -> tuple[Obj | None, list[Obj]]:
    meta = job["metadata"]
    restart = restart_of(job)
    request = Request(spec.workers, spec.accelerators_per_worker, spec.topology.unit,
                      spec.topology.policy)
    started = time.perf_counter()
    if badput.current_incident(books_of(job.get("status") or {})) is not None:
        with fleet.spares_released():  # a recovering gang may take spares
            result = place(fleet, request)
    else:
        result = place(fleet, request)
    metrics.PLACEMENT_SECONDS.observe(time.perf_counter() - started)
    generation = meta.get("generation")
    if not result.ok:
        previous = next((c for c in conditions if c["type"] == "Placed"), None)
        if previous is None or previous.get("message") != result.reason:
            events.append(("Normal", "WaitingForCapacity", result.reason))
            log.info("%s/%s waits: %s", meta["namespace"], meta["name"], result.reason)
        return None, set_condition(conditions, "Placed", False, "WaitingForCapacity",
                                   result.reason, generation)
    for rank in result.ranks:  # reserve now: later jobs in this pass must see it
        key = f"{meta['namespace']}/{build.pod_name(meta['name'], restart, rank.rank)}"
        fleet.bind(key, rank.node, spec.accelerators_per_worker,
                   trainingjob_owner(meta["namespace"], meta["name"]))
    created = parse_time(meta.get("creationTimestamp"))
    if created is not None:
        metrics.PENDING_SECONDS.observe(max(0.0, time.time() - created))
    events.append(("Normal", "Placed", result.reason))
    log.info("%s/%s placed: %s", meta["namespace"], meta["name"], result.reason)
    placement = {"domains": list(result.domains), "reason": result.reason,
                 "placedAt": iso(time.time()),
                 "ranks": [{"rank": r.rank, "node": r.node, "domain": r.domain}
                           for r in result.ranks]}
    return placement, set_condition(conditions, "Placed", True, "Placed", result.reason,
                                    generation)


async def _children(state: State, kube: Kube, job: Obj, decided: Plan, placement: Obj | None,
                    observed: dict[str, Obj]) -> None:
    """Create, pin and delete pods, API_CONCURRENCY calls at a time. What the API returns
    goes straight into the state (expectations): the next pass, which may come before the
    watch events do, must not create or pin the same pods again."""
    namespace = job["metadata"]["namespace"]
    limit = asyncio.Semaphore(API_CONCURRENCY)

    async def call(fn: Any, *args: Any) -> Any:
        async with limit:
            return await asyncio.to_thread(fn, *args)

    if decided.create:
        await call(kube.create, build.service(job))
        ranks = {r["rank"]: r for r in (placement or {}).get("ranks") or []}
        if ranks and not decided.hold:  # placed: create pinned, one write per pod, not two
            hosts = [r["node"] for r in sorted(ranks.values(), key=lambda r: r["rank"])]
            await call(kube.replace_config_map, build.hostfile(job, hosts))
        bodies = [build.pinned(p, ranks[index_of(p)]["node"], ranks[index_of(p)].get("domain"))
                  if index_of(p) in ranks and not decided.hold else p for p in decided.create]
        for created in await asyncio.gather(*(call(kube.create, p) for p in bodies)):
            if created is not None:
                state.upsert_pod(created)
    if decided.pin and placement:
        hosts = [r["node"] for r in sorted(placement["ranks"], key=lambda r: r["rank"])]
        await call(kube.replace_config_map, build.hostfile(job, hosts))
        patches = []
        for pod_name, node, domain in decided.pin:
            patch = build.pin(observed[pod_name], node, domain)
            patches.append(call(kube.patch_pod, namespace, pod_name, patch))
        for patched in await asyncio.gather(*patches):
            state.upsert_pod(patched)
    await asyncio.gather(*(call(kube.delete_pod, namespace, name) for name in decided.delete))


async def _expire(kube: Kube, job: Obj, spec: TrainingJobSpec, status: Obj) -> None:
    ttl = spec.ttl_seconds_after_finished
    finished = parse_time(status.get("completionTime"))
    if ttl is None or finished is None or status.get("phase") not in TERMINAL:
        return
    if time.time() >= finished + ttl:
        meta = job["metadata"]
        log.info("deleting %s/%s: ttlSecondsAfterFinished=%s passed", meta["namespace"],
                 meta["name"], ttl)
        await asyncio.to_thread(kube.delete_custom, PLURAL, meta["namespace"], meta["name"])


TRIM_SECONDS = 60.0  # how often freed memory goes back to the OS
SLOW_PASS_SECONDS = 1.0  # a pass longer than this is logged with where its time went


async def run_loop(state: State, kube: Kube, resync_seconds: float = 5.0) -> None:
    """Reconcile every group, then every job, then every inference endpoint, whenever
    anything changed, when a timer (grace period, backoff) runs out, and every
    resync_seconds."""
    trimmed = time.time()  # the first trim a minute in: after the initial listings
    while True:
        timeout = resync_seconds
        if state.deadline is not None:
            timeout = min(timeout, max(0.0, state.deadline - time.time()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.wake.wait(), timeout=timeout)
        await asyncio.sleep(DEBOUNCE_SECONDS)  # let a burst of watch events land first
        state.wake.clear()
        state.deadline = None
        state.write_budget, state.deferred_writes = PASS_WRITE_BUDGET, 0
        started = time.perf_counter()
        await ultraservergroup.reconcile_groups(state, kube, time.time())
        grouped = time.perf_counter()
        jobs = state.ordered_jobs()
        for job in jobs:
            reserve_from_status(state, job)
        await reconcile_each("TrainingJob", jobs, lambda job: decide_job(state, job),
                             lambda decision: apply_job(state, kube, decision),
                             lambda decision: decision.job)
        applied = time.perf_counter()
        await inferenceendpoint.reconcile_endpoints(state, kube)
        ended = time.perf_counter()
        metrics.RECONCILE_SECONDS.observe(ended - started)
        state.last_pass = time.time()
        if state.last_pass - trimmed > TRIM_SECONDS:
            trimmed = state.last_pass
            runtime.release_freed_memory()
        if ended - started > SLOW_PASS_SECONDS:
            log.info("slow pass %.2fs: groups %.2fs, %d jobs %.2fs, %d endpoints %.2fs "
                     "(%d pod writes left for the next pass)", ended - started,
                     grouped - started, len(jobs), applied - grouped, len(state.endpoints),
                     ended - applied, state.deferred_writes)
        phases = {phase: 0 for phase in PHASES}
        for job in jobs:
            phase = (job.get("status") or {}).get("phase")
            if phase in phases:
                phases[phase] += 1
        for phase, count in phases.items():
            metrics.JOBS.labels(phase).set(count)
        for group, fleet in state.fleets.items():
            metrics.ACCELERATORS.labels(group).set(sum(n.used for n in fleet.nodes.values()))
