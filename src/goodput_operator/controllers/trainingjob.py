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
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from goodput_operator import metrics
from goodput_operator.api.conditions import now, set_condition
from goodput_operator.api.trainingjob import PHASES, TrainingJobSpec
from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import RESERVED_NODE, State
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.jobplan import TERMINAL, Plan, attempt_of, index_of, plan
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import Request, place

Obj = dict[str, Any]
log = logging.getLogger("goodput.trainingjob")
PLURAL = "trainingjobs"
API_CONCURRENCY = 16  # concurrent API calls per job pass (pod creates, pins, deletes)
DEBOUNCE_SECONDS = 0.02  # one pass for a burst of events, not one per event


def restart_of(job: Obj) -> int:
    return int((job.get("status") or {}).get("restarts", 0))


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


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


async def reconcile_job(state: State, kube: Kube, job: Obj) -> None:
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status: Obj = dict(job.get("status") or {})
    generation = meta.get("generation")
    conditions: list[Obj] = list(status.get("conditions") or [])
    try:
        spec = TrainingJobSpec.model_validate(job["spec"])
    except ValidationError as err:
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        await _write(kube, job, status, {"phase": "Failed", "message": f"invalid spec: {detail}",
                     "conditions": set_condition(conditions, "Failed", True, "InvalidSpec",
                                                 detail, generation)})
        return
    fleet = state.fleets.get(spec.ultra_server_group or "")
    if fleet is None:
        reason, message = ("UltraServerGroupNotFound",
                           f"UltraServerGroup {spec.ultra_server_group!r} does not exist") \
            if spec.ultra_server_group else \
            ("NoUltraServerGroup", "jobs without spec.ultraServerGroup are not placed yet: "
                                   "set spec.ultraServerGroup")
        await _write(kube, job, status, {
            "phase": "Pending", "message": message,
            "conditions": set_condition(conditions, "Placed", False, reason, message,
                                        generation)})
        return

    pods = list(state.job_pods.get((namespace, name), {}).values())
    decided = plan(job, pods, fleet.shape.accelerator_resource)
    desired: Obj = {"phase": decided.phase, "message": decided.message}
    placement = status.get("placement")
    events: list[tuple[str, str, str]] = []
    for type_, value, reason, message in decided.conditions:
        conditions = set_condition(conditions, type_, value, reason, message, generation)

    fresh = False
    if decided.needs_placement:
        placement, conditions = _place(fleet, spec, job, conditions, events)
        if placement:
            desired["phase"], desired["message"] = "Placing", placement["reason"]
            fresh = True
            by_rank = {r["rank"]: r for r in placement["ranks"]}
            decided.pin = [(p["metadata"]["name"], by_rank[index_of(p)]["node"],
                            by_rank[index_of(p)]["domain"]) for p in pods
                           if index_of(p) in by_rank and attempt_of(p) == restart_of(job)
                           and build.is_gated(p)]
        else:
            desired["message"] = next(c["message"] for c in conditions if c["type"] == "Placed")
    if decided.restart:
        desired["restarts"] = int(status.get("restarts", 0)) + 1
        placement = None
        events.append(("Warning", "Restarting", decided.message))
        log.warning("%s/%s: %s", namespace, name, decided.message)
    if decided.phase == "Suspended":
        placement = None

    desired["placement"] = placement
    desired["conditions"] = conditions
    desired["workers"] = {"desired": spec.workers, "ready": decided.ready,
                          "succeeded": decided.succeeded, "failed": decided.failed}
    live = placement is not None and desired["phase"] not in TERMINAL
    desired["accelerators"] = spec.workers * spec.accelerators_per_worker if live else 0
    if desired["phase"] == "Running" and not status.get("startTime"):
        desired["startTime"] = now()
    if desired["phase"] in TERMINAL and not status.get("completionTime"):
        desired["completionTime"] = now()
    desired["observedGeneration"] = generation
    if desired["phase"] != status.get("phase") and desired["phase"] in (
            "Running", "Succeeded", "Failed", "Suspended"):
        kind = "Warning" if desired["phase"] == "Failed" else "Normal"
        events.append((kind, desired["phase"], desired["message"]))
    observed = {p["metadata"]["name"]: p for p in pods}
    if fresh:  # the placement is on record before any pod is pinned to it
        await _write(kube, job, status, desired, events)
        await _children(state, kube, job, decided, placement, observed)
    else:
        await _children(state, kube, job, decided, placement, observed)
        await _write(kube, job, status, desired, events)
    await _expire(kube, job, spec, {**status, **desired})


def _place(fleet: Fleet, spec: TrainingJobSpec, job: Obj, conditions: list[Obj],
           events: list[tuple[str, str, str]]) -> tuple[Obj | None, list[Obj]]:
    meta = job["metadata"]
    restart = restart_of(job)
    request = Request(spec.workers, spec.accelerators_per_worker, spec.topology.unit,
                      spec.topology.policy)
    started = time.perf_counter()
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
    created = _parse_time(meta.get("creationTimestamp"))
    if created is not None:
        metrics.PENDING_SECONDS.observe(max(0.0, time.time() - created))
    events.append(("Normal", "Placed", result.reason))
    log.info("%s/%s placed: %s", meta["namespace"], meta["name"], result.reason)
    placement = {"domains": list(result.domains), "reason": result.reason,
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
        if ranks:  # already placed: create pinned, one write per pod instead of two
            hosts = [r["node"] for r in sorted(ranks.values(), key=lambda r: r["rank"])]
            await call(kube.replace_config_map, build.hostfile(job, hosts))
        bodies = [build.pinned(p, ranks[index_of(p)]["node"], ranks[index_of(p)].get("domain"))
                  if index_of(p) in ranks else p for p in decided.create]
        for created in await asyncio.gather(*(call(kube.create, p) for p in bodies)):
            if created is not None:
                state.upsert_pod(created)
    if decided.pin and placement:
        hosts = [r["node"] for r in sorted(placement["ranks"], key=lambda r: r["rank"])]
        await call(kube.replace_config_map, build.hostfile(job, hosts))
        patches = []
        for pod_name, node, domain in decided.pin:
            patch = build.pin(observed[pod_name], node, domain)
            patch["metadata"]["annotations"][RESERVED_NODE] = node
            patches.append(call(kube.patch_pod, namespace, pod_name, patch))
        for patched in await asyncio.gather(*patches):
            state.upsert_pod(patched)
    await asyncio.gather(*(call(kube.delete_pod, namespace, name) for name in decided.delete))


async def _write(kube: Kube, job: Obj, current: Obj, desired: Obj,
                 events: list[tuple[str, str, str]] | None = None) -> None:
    """One status write when anything changed, then the events (never before)."""
    if any(current.get(key) != value for key, value in desired.items()):
        meta = job["metadata"]
        await asyncio.to_thread(kube.patch_status, PLURAL, meta["namespace"], meta["name"],
                                desired)
        job["status"] = {**current, **{k: v for k, v in desired.items() if v is not None}}
    for type_, reason, message in events or []:
        await asyncio.to_thread(kube.event, job, reason, message, type_)


async def _expire(kube: Kube, job: Obj, spec: TrainingJobSpec, status: Obj) -> None:
    ttl = spec.ttl_seconds_after_finished
    finished = _parse_time(status.get("completionTime"))
    if ttl is None or finished is None or status.get("phase") not in TERMINAL:
        return
    if time.time() >= finished + ttl:
        meta = job["metadata"]
        log.info("deleting %s/%s: ttlSecondsAfterFinished=%s passed", meta["namespace"],
                 meta["name"], ttl)
        await asyncio.to_thread(kube.delete_custom, PLURAL, meta["namespace"], meta["name"])


async def run_loop(state: State, kube: Kube, resync_seconds: float = 5.0) -> None:
    """Reconcile every job whenever anything changed (and every resync_seconds)."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.wake.wait(), timeout=resync_seconds)
        await asyncio.sleep(DEBOUNCE_SECONDS)  # let a burst of watch events land first
        state.wake.clear()
        started = time.perf_counter()
        jobs = state.ordered_jobs()
        for job in jobs:
            reserve_from_status(state, job)
        for job in jobs:
            try:
                await reconcile_job(state, kube, job)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad job must not stop the others
                metrics.RECONCILE_ERRORS.labels("TrainingJob").inc()
                log.exception("reconcile of %s/%s failed", job["metadata"]["namespace"],
                              job["metadata"]["name"])
        metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        phases = {phase: 0 for phase in PHASES}
        for job in jobs:
            phase = (job.get("status") or {}).get("phase")
            if phase in phases:
                phases[phase] += 1
        for phase, count in phases.items():
            metrics.JOBS.labels(phase).set(count)
        for group, fleet in state.fleets.items():
            metrics.ACCELERATORS.labels(group).set(sum(n.used for n in fleet.nodes.values()))
