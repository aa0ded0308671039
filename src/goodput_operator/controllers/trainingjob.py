"""TrainingJob controller: applies what decide.job decided, one status write per job, then
events. The pass decides every job on one snapshot first (decide.decide_jobs), so capacity
freed while it writes goes to the next pass's highest-priority job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

from goodput_operator import metrics, times
from goodput_operator.api.statuses import GoodputDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.controllers import ultraservergroup
from goodput_operator.controllers.kube import (
    Kube,
    apply_each,
    apply_quota,
    log_failures,
    unless_refused,
    write_status,
)
from goodput_operator.controllers.state import State
from goodput_operator.decide import Event, Failure, JobDecision, decide_jobs, trial, turns
from goodput_operator.decide.attempt import TERMINAL, Attempt, Spots
from goodput_operator.decide.creates import WriteBudget
from goodput_operator.health import badput
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.pods import is_gated, pin, pinned
from goodput_operator.topology.model import trainingjob_owner
from goodput_operator.topology.record import ranks_of

Obj = dict[str, Any]
log = logging.getLogger("goodput.trainingjob")
PLURAL = "trainingjobs"
API_CONCURRENCY = 16  # concurrent API calls per job pass (pod creates, pins, deletes)


def reserve_from_status(state: State, job: Obj) -> None:
    """Count a written placement for ranks whose pods are missing or still gated: after an
    operator restart between writing a placement and pinning, they hold nothing yet.
    Finished pods are never re-counted, and a deleted job's reservations are released
    when its deletion is seen (State.remove_job)."""
    status = job.get("status") or {}
    fleet = state.fleets.get(job["spec"].get("ultraServerGroup") or "")
    ranks = ranks_of(status.get("placement"))
    if fleet is None or not ranks or status.get("phase") in TERMINAL:
        return
    meta = job["metadata"]
    pods = state.job_pods.get((meta["namespace"], meta["name"]), {})
    restart = int(status.get("restarts", 0))
    for rank in ranks:
        name = build.pod_name(meta["name"], restart, rank["rank"])
        key = f"{meta['namespace']}/{name}"
        pod = pods.get(name)
        if (pod is None or is_gated(pod)) and key not in fleet.pods:
            fleet.bind(key, rank["node"], int(job["spec"]["acceleratorsPerWorker"]),
                       trainingjob_owner(meta["namespace"], meta["name"]))


async def reconcile_jobs(state: State, kube: Kube, clock: float) -> int:
    """Decide every job on one snapshot, make their reservations, then apply the
    decisions APPLY_CONCURRENCY at a time. Returns how many jobs there were."""
    snapshot = state.snapshot(clock)
    for job in snapshot.jobs:  # before the decisions: the snapshot's fleets see them
        reserve_from_status(state, job)
    failures: list[Failure] = []
    budget = WriteBudget(state.write_budget)
    with trial(snapshot):
        decisions = decide_jobs(snapshot, failures, budget)
    state.write_budget = budget.left  # what the endpoints' pass may still write
    state.defer_writes(budget.deferred)
    for decision in decisions:  # before any await: the endpoints' pass must see them
        record(state, decision)
    state.note_turns(turns.granted(snapshot, "TrainingJob"), clock)
    log_failures(failures)
    await apply_each("TrainingJob", decisions, lambda d: apply_job(state, kube, d, clock),
                     lambda d: d.job, lambda d: state.remove_job(*d.key))
    return len(snapshot.jobs)


def record(state: State, decision: JobDecision) -> None:
    """What the decision hands the operator's state: reservations and timers; a job that
    ends gives back the reservations of workers it never created."""
    state.reserve(decision.reservations)
    if decision.desired.get("phase") in TERMINAL:
        state.release_unbound(trainingjob_owner(*decision.key))
    state.wake_at(decision.wake_at)


async def apply_job(state: State, kube: Kube, decision: JobDecision, clock: float) -> None:
    job, status, desired, events = (decision.job, decision.status, decision.desired,
                                    decision.events)
    decided, placement = decision.attempt, decision.placement
    _measure(decision, clock)
    if decided is None or decision.spec is None:
        follow_up(state, await write_status(kube, PLURAL, job, status, desired, events))
        await apply_quota(kube, decision.quota, state.note_workload)
        return
    for probe in decision.probes:
        await ultraservergroup.start_probe(state, kube, probe)
    if decision.fresh or decided.restart:
        # the placement is on record before any pod is pinned to it; the new attempt is,
        # before the old one's pods are deleted: from then on the old workers' reports
        # (a checkpoint commit from a partitioned node) are refused (409)
        changed = await write_status(kube, PLURAL, job, status, desired, events)
        await _children(state, kube, job, decision.spec, decided, placement,
                        decision.observed)
    else:
        await _children(state, kube, job, decision.spec, decided, placement,
                        decision.observed)
        changed = await write_status(kube, PLURAL, job, status, desired, events)
    follow_up(state, changed)
    await apply_quota(kube, decision.quota, state.note_workload)
    await _expire(kube, job, decision.spec, {**status, **desired})


# what a pass rewrites while a job runs (its workers' latest step, the goodput books):
# a change of only these decides nothing new, so it asks for no follow-up pass
PROGRESS_KEYS = frozenset({"progress", "goodput"})


def follow_up(state: State, changed: set[str]) -> None:
    """Ask for another pass after a status write that may change the next decision (its
    watch echo no longer does: State.upsert_job)."""
    if changed - PROGRESS_KEYS:
        state.wake.set()


def _measure(decision: JobDecision, clock: float) -> None:
    """The decision's metrics and log lines."""
    namespace, name = decision.key
    for event in decision.events:
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(level, "%s/%s: %s: %s", namespace, name, event.reason, event.message)
    if decision.placement_seconds is not None:
        metrics.PLACEMENT_SECONDS.observe(decision.placement_seconds)
    if decision.pending_seconds is not None:
        metrics.PENDING_SECONDS.observe(decision.pending_seconds)
    if decision.attempt is not None and decision.attempt.restart:
        _count_rollback(decision.job, decision.desired["incidents"][-1])
    if decision.spec is not None:
        _observe(decision.job, decision.desired, decision.events, clock)


def _count_rollback(job: Obj, incident: Mapping[str, Any]) -> None:
    """Steps given up by resuming from an older checkpoint than the newest, after SDC."""
    latest = ((job.get("status") or {}).get("checkpoint") or {}).get("latest") or {}
    resume = incident.get("resumeFrom") or {}
    if incident["cause"] == "SilentDataCorruption" and "step" in latest:
        meta = job["metadata"]
        metrics.ROLLBACK_STEPS.labels(meta["namespace"], meta["name"]).inc(
            max(0, int(latest["step"]) - int(resume.get("step", 0))))


def _observe(job: Obj, desired: Mapping[str, Any], events: list[Event], now: float) -> None:
    """Metrics: each recovered incident's phases and cost, and the job's goodput ratio."""
    meta = job["metadata"]
    goodput: GoodputDict = desired.get("goodput") or (job.get("status") or {}).get(
        "goodput") or GoodputDict()
    ratio = badput.ratio(goodput, now)
    if ratio is not None:
        metrics.GOODPUT_RATIO.labels(meta["namespace"], meta["name"]).set(ratio)
    incidents = desired.get("incidents") or (job.get("status") or {}).get("incidents") or []
    failed_at = times.parse(incidents[-1].get("failedAt")) if incidents else None
    metrics.RECOVERING_SECONDS.labels(meta["namespace"], meta["name"]).set(
        now - failed_at if desired.get("phase") == "Recovering" and failed_at else 0)
    if not any(event.reason == "Recovered" for event in events):
        return
    incident = desired["incidents"][-1]
    for phase in badput.PHASES:
        metrics.RECOVERY_SECONDS.labels(phase).observe(incident.get(f"{phase}Seconds") or 0)
    lost = sum(incident.get(f"{k}Seconds") or 0 for k in (*badput.PHASES, "lostWork"))
    metrics.BADPUT_SECONDS.labels(incident["cause"]).inc(lost)


async def _children(state: State, kube: Kube, job: Obj, spec: TrainingJobSpec,
                    decided: Attempt, placement: Mapping[str, Any] | None,
                    observed: dict[str, Obj]) -> None:
    """Create, pin and delete pods, API_CONCURRENCY calls at a time. What the API returns
    goes straight into the state (expectations): the next pass, which may come before the
    watch events do, must not create or pin the same pods again."""
    namespace = job["metadata"]["namespace"]
    limit = asyncio.Semaphore(API_CONCURRENCY)

    async def call(fn: Any, *args: Any) -> Any:
        async with limit:
            return await asyncio.to_thread(fn, *args)

    refused: list[str] = []  # the decision says so and, in the end, fails the job

    async def create(write: Any, body: Obj) -> Obj | None:
        return cast(Obj | None, await unless_refused(call(write, body), body, refused))

    spots = Spots(placement)
    ranks = spots.ranks
    if decided.create:
        await create(kube.create, build.service(job, spec))
        if not refused:
            await create(kube.create, build.disruption_budget(job, spec))
        if refused:  # no gang without its Service and budget (a name held by another, say)
            state.note_creates((namespace, job["metadata"]["name"]), refused[0], time.time())
            return
        group = state.groups.get(job["spec"].get("ultraServerGroup", ""))
        device_class = group.accelerator.device_class if group is not None else None
        for source in build.claim_sources(job, decided.create, device_class):
            await create(kube.create, source)  # before the pods that claim from them
        if ranks and not decided.hold:  # placed: create pinned, one write per pod, not two
            await create(kube.replace_config_map,
                         build.hostfile(job, len(ranks), state.settings.report_ca, spec))
        bodies = [pinned(p, spot["node"], spot.get("domain"))
                  if (spot := spots.of(p)) is not None and not decided.hold else p
                  for p in decided.create]
        for created in await asyncio.gather(*(create(kube.create, p) for p in bodies)):
            if created is not None:
                state.upsert_pod(created)
        state.note_creates((namespace, job["metadata"]["name"]),
                           refused[0] if refused else None, time.time())
    if decided.pin and placement:
        await call(kube.replace_config_map,
                   build.hostfile(job, len(ranks), state.settings.report_ca, spec))
        patches = []
        for pod_name, node, domain in decided.pin:
            patch = pin(observed[pod_name], node, domain)
            patches.append(call(kube.patch_pod, namespace, pod_name, patch))
        for patched in await asyncio.gather(*patches):
            state.upsert_pod(patched)
    await asyncio.gather(*(call(kube.delete_pod, namespace, name) for name in decided.delete))


async def _expire(kube: Kube, job: Obj, spec: TrainingJobSpec, status: Obj) -> None:
    ttl = spec.ttl_seconds_after_finished
    finished = times.parse(status.get("completionTime"))
    if ttl is None or finished is None or status.get("phase") not in TERMINAL:
        return
    if time.time() >= finished + ttl:
        meta = job["metadata"]
        log.info("deleting %s/%s: ttlSecondsAfterFinished=%s passed", meta["namespace"],
                 meta["name"], ttl)
        await asyncio.to_thread(kube.delete_custom, PLURAL, meta["namespace"], meta["name"])


