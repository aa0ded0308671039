"""A TrainingJob's pass, decided: its attempt (decide.attempt), its placement or the
replacement of lost ranks, and the complete status to write.

Placement happens on the live fleet inside the caller's `Fleet.trial()`: the jobs decided
after this one see its reservations, and the controller makes them for real
(`JobDecision.reservations`) when it applies the decision. A placement is written to the
job's status before any pod is pinned to it, so an operator restart mid-launch finishes
the launch from it instead of redoing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from goodput_operator import times
from goodput_operator.api.base import MESSAGE_LENGTH, SHORT_MESSAGE_LENGTH, describe_errors
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import (
    TERMINAL,
    Attempt,
    Lost,
    Spots,
    attempt,
    books_of,
    pins,
    refuse,
)
from goodput_operator.decide.creates import with_class
from goodput_operator.decide.gang import (
    JobDecision,
    companions_for,
    domain_summary,
    fabric_of,
    placement_record,
    recorded_companions,
    replacement_for,
    request_for,
    reserve,
    restart_of,
)
from goodput_operator.decide.group import inconclusive_message, may_probe
from goodput_operator.decide.preemption import preempt_for, yield_to
from goodput_operator.decide.priority import Priority, pod_class
from goodput_operator.decide.quota import finish, queue_required, quota_for
from goodput_operator.decide.running import running_job
from goodput_operator.decide.snapshot import Mark, Snapshot
from goodput_operator.decide.standby import place_off_standby, standby_map
from goodput_operator.decide.turns import kept, turn
from goodput_operator.decide.types import (
    ConditionUpdate,
    Event,
    ProbeStart,
    Quota,
    Refusal,
    apply_conditions,
    changed_keys,
)
from goodput_operator.health import badput
from goodput_operator.health.hang import from_progress
from goodput_operator.health.quarantine import record_of
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.pods import (
    attempt_of,
    is_active,
    owned,
    refused_by_scheduler,
)
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import (
    CompanionSlot,
    Placement,
    RankSlot,
    Request,
    in_rank_order,
)
from goodput_operator.topology.podsets import companions_near
from goodput_operator.topology.record import nodes_of, ranks_of

Obj = dict[str, Any]


def decide_job(snapshot: Snapshot, job: Obj) -> JobDecision:
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status: Obj = dict(job.get("status") or {})
    generation = meta.get("generation")
    clock, at = snapshot.clock, times.seconds(snapshot.clock)
    conditions: list[Obj] = list(status.get("conditions") or [])
    try:
        spec = TrainingJobSpec.model_validate(job["spec"])
    except ValidationError as err:
        detail = describe_errors(err)
        return JobDecision(job, status, {
            "phase": "Failed", "message": f"invalid spec: {detail}",
            "conditions": set_condition(conditions, "Failed", True, "InvalidSpec", detail,
                                        generation, at)})
    group = spec.ultra_server_group
    fleet = snapshot.fleets.get(group)
    priority = snapshot.priority(job)
    waits = _waiting_for(group, fleet, priority, status)
    if waits is not None or fleet is None:
        reason, message = waits or ("", "")
        return JobDecision(job, status, {
            "phase": "Pending", "message": message,
            "conditions": set_condition(conditions, "Placed", False, reason, message,
                                        generation, at)})
    pods = owned(snapshot.job_pods.get((namespace, name), {}).values(), job)
    quota, spec = _under_kueue(snapshot, job, spec, priority, pods, at)
    decided = attempt(job, pods, fabric_of(snapshot, spec),
                      lost_nodes(snapshot, fleet, job, pods), clock, snapshot.report_url,
                      suspects=snapshot.seen_unhealthy.keys(), probed=snapshot.probed_at,
                      spec=spec, steps=snapshot.steps.get((namespace, name))
                      or from_progress(status.get("progress")))
    _hold(decided, quota)
    decided.missing = with_class(decided.missing, pod_class(priority))
    _creation(snapshot.refused.get((namespace, name)), decided, pods, status, clock)
    wakes = [w for w in (decided.wake_at, scheduler_refused(pods, restart_of(job), clock)[1],
                         quota.wake_at if quota else None) if w is not None]
    result = JobDecision(job, status, {}, list(decided.events), decided, spec=spec,
                         observed={p["metadata"]["name"]: p for p in pods},
                         wake_at=min(wakes, default=None), quota=quota)
    placement = status.get("placement")
    yielded = yield_to(snapshot, spec, job, decided, result)
    grown = running_job(snapshot, fleet, spec, job, decided, result) \
        if decided.phase == "Running" and not yielded.marked else None
    desired: Obj = {"phase": decided.phase, "message": decided.message, **decided.status,
                    **yielded.fields}
    if grown is not None:
        placement, desired["restarts"] = grown, restart_of(job) + 1
    if yielded.stopped:
        placement = None
    if (namespace, name) in snapshot.progress:
        desired["progress"] = snapshot.progress[(namespace, name)]
    held = _evidence_held(snapshot, f"{namespace}/{name}", conditions)
    conditions = apply_conditions(conditions, [*decided.conditions, *held], generation, at)

    if decided.needs_placement:
        placement, update = _place(snapshot, fleet, spec, job, conditions, result)
        conditions = apply_conditions(conditions, [update], generation, at)
        if placement:
            if desired["phase"] != "Recovering":
                desired["phase"] = "Placing"
            desired["message"] = placement["reason"]
            result.fresh = True
            books = {**books_of(status), **desired}
            incident = badput.current_incident(books)
            if incident is not None and not incident.get("replacedAt"):
                desired["incidents"] = badput.replaced(books, clock, incident.get("action")
                                                       or "wait")["incidents"]
            spots = Spots(placement)
            decided.pin = pins(spots, pods, restart_of(job))
            if spec.sdc.probe_on_start:  # probes first: the workers stay gated
                decided.hold, decided.pin = True, []
                decided.probe = sorted({r["node"] for r in spots.ranks.values()})
        else:
            desired["message"] = update.message
    if decided.restart:
        desired["restarts"] = restart_of(job) + 1
        placement, action, why = _replacement(snapshot, fleet, spec, job, placement,
                                              decided.failed_nodes, result)
        if placement is not None:
            why += _probe_first(placement, decided.probe_first)
        books = {**books_of(status), **desired}
        desired["incidents"] = (badput.replaced(books, clock, action) if placement else
                                badput.update_incident(books, action=action))["incidents"]
        desired["message"] = f"{decided.message}: {why}"
        result.events.append(Event("Normal", "Replaced" if placement else "WaitingForCapacity",
                                   why))
    if decided.phase == "Suspended":
        placement = None
    _stage(status, desired, times.parse(meta.get("creationTimestamp")), clock)
    result.probes = _start_probes(snapshot, group, decided.probe, desired)
    result.placement = placement
    result.desired = _complete(desired, status, decided, spec, placement, conditions,
                               generation, clock)
    _books(result.desired, status, clock, snapshot.refresh_seconds)
    due = badput.refresh_due(result.desired.get("goodput") or status.get("goodput") or {},
                             clock, snapshot.refresh_seconds) \
        if result.desired["phase"] == "Running" else None
    result.wake_at = min((w for w in (result.wake_at, due) if w is not None), default=None)
    _where(snapshot, quota, result.desired, namespace, at)
    if desired["phase"] != status.get("phase") and desired["phase"] in (
            "Running", "Succeeded", "Failed", "Suspended"):
        result.events.append(Event("Warning" if desired["phase"] == "Failed" else "Normal",
                                   desired["phase"], desired["message"]))
    return result


def _evidence_held(snapshot: Snapshot, key: str, conditions: list[Obj]
                   ) -> list[ConditionUpdate]:
    """The EvidenceHeld condition: nodes this job's reports blamed that are not out yet
    (the group's blame budget is in use: its status.heldEvidence says more)."""
    if "blamed by owner" not in snapshot.memo:  # one walk a pass, not one a job
        by_owner: dict[str, list[str]] = {}
        for node, found in sorted(snapshot.blamed.items()):
            by_owner.setdefault(found.owner, []).append(node)
        snapshot.memo["blamed by owner"] = by_owner
    held: list[str] = snapshot.memo["blamed by owner"].get(key, [])
    if not held and not any(c.get("type") == "EvidenceHeld" for c in conditions):
        return []
    if not held:
        return [ConditionUpdate("EvidenceHeld", False, "Settled", "")]
    return [ConditionUpdate("EvidenceHeld", True, "BlameBudgetInUse", (
        f"blamed by this job's reports, not quarantined yet (the group's blame budget is in "
        f"use): {', '.join(held[:8])}" + (f" and {len(held) - 8} more" if len(held) > 8
                                          else ""))[:MESSAGE_LENGTH])]


def _waiting_for(group: str, fleet: Fleet | None, priority: Priority,
                 status: Obj) -> tuple[str, str] | None:
    """Why a job is left Pending before anything else is decided (reason, message): no
    group to place on, or, before it is placed, a priority class the admin has not made
    or not granted its namespace (it would be placed at a priority no one gave it)."""
    if fleet is None:
        return "UltraServerGroupNotFound", f"UltraServerGroup {group!r} does not exist"
    if priority.problem is not None and not status.get("placement"):
        return priority.reason, priority.problem
    return None


def _under_kueue(snapshot: Snapshot, job: Obj, spec: TrainingJobSpec, priority: Priority,
                 pods: list[Obj], at: str) -> tuple[Quota | None, TrainingJobSpec]:
    """A job whose quota Kueue holds (decide.quota): its Workload's verdict, and the spec
    it is placed by (the admitted flavors' node labels join its node selector). An
    eviction marks it for this pass like a preemption victim (decide.preemption)."""
    if not kueue.under_kueue(job):
        return queue_required(snapshot, job), spec
    meta = job["metadata"]
    busy = bool((job.get("status") or {}).get("placement")) or any(map(is_active, pods))
    quota = quota_for(snapshot, job, lambda: kueue.workload(
        job, spec, fabric_of(snapshot, spec), priority.value, priority.workload_ref()),
        kueue.job_pod_counts(spec), busy, at)
    if quota.evicted:
        snapshot.preempting[(meta["namespace"], meta["name"])] = Mark(
            "Kueue", None, quota.evicted, verb="evicted")
    if quota.node_labels:
        spec = spec.model_copy(update={
            "node_selector": {**(spec.node_selector or {}), **quota.node_labels}})
    return quota, spec


def _where(snapshot: Snapshot, quota: Quota | None, desired: Obj, namespace: str,
           at: str) -> None:
    """The cluster the job runs in and its Workload, in its status (MultiKueue copies it to
    the manager); a job that ended finishes its Workload."""
    if snapshot.cluster_name:
        desired["cluster"] = snapshot.cluster_name
    if quota is None or not quota.workload:
        return
    desired["workload"] = quota.workload
    if desired["phase"] in TERMINAL:
        finish(quota, snapshot.workloads, namespace, desired["phase"], desired["message"], at)


def _hold(decided: Attempt, quota: Quota | None) -> None:
    """Until Kueue admits the job: no pods made, nothing placed, and the reason said."""
    if quota is None:
        return
    decided.conditions.append(quota.condition)
    if quota.hold:
        decided.missing, decided.needs_placement = None, False
        if decided.phase in ("Pending", "Recovering"):
            decided.message = quota.message


def _start_probes(snapshot: Snapshot, group: str, nodes: list[str],
                  desired: Obj) -> list[ProbeStart]:
    """Probe NODES before the start, but not where the group's probe image already proved
    nothing: the workers stay gated there, for a human or an image that can test the node,
    and the job's message says why."""
    spec = snapshot.groups[group]
    held = inconclusive_message(snapshot, nodes)
    if held:
        desired["message"] = f"{desired.get('message', '')}; {held}".lstrip("; ")
    return [ProbeStart(group, node, "start", snapshot.probe_runs.get(node, 0))
            for node in nodes if may_probe(snapshot, spec, node)]


def _creation(refusal: Refusal | None, decided: Attempt, pods: list[Obj], status: Obj,
              clock: float) -> None:
    """Whether the API server refused the workers (decide.attempt.refuse), and saying so
    once it stops."""
    if refusal is not None and decided.phase not in TERMINAL:
        refuse(decided, refusal, pods, books_of(status), clock)
        if refusal.times == 1:
            decided.events.append(Event("Warning", "CreateRefused", decided.message))
    elif any(c["type"] == "WorkersCreated" and c["status"] == "False"
             for c in status.get("conditions") or []):
        decided.conditions.append(ConditionUpdate("WorkersCreated", True, "Created", ""))


def _stage(status: Obj, desired: Obj, created: float | None, clock: float) -> None:
    """Move the goodput's waiting stage to the one the decided phase is in (queueing,
    launch, suspended or none), so that the time spent in each is accounted for."""
    books = {**books_of(status), **{k: desired[k] for k in ("goodput", "incidents")
                                    if desired.get(k) is not None}}
    recovering = badput.current_incident(books) is not None
    goodput = badput.staged(books, badput.stage_of(desired["phase"], recovering), clock,
                            created)
    if goodput != books["goodput"]:
        desired["goodput"] = goodput


def _probe_first(placement: Obj, suspects: list[str]) -> str:
    """Mark the nodes of SUSPECTS the restart keeps (an exit code made them suspect) to be
    probed before the gang starts on them; what to add to the message."""
    kept = sorted(set(nodes_of(placement)) & set(suspects))
    if not kept:
        return ""
    placement["probeFirst"] = kept
    return f"; probing suspect node(s) {', '.join(kept)} first"


def _complete(desired: Obj, status: Obj, decided: Attempt, spec: TrainingJobSpec,
              placement: Obj | None, conditions: list[Obj], generation: int | None,
              clock: float) -> Obj:
    """The rest of the status: placement, conditions, counts, times."""
    if placement and placement.get("domains") and "domainSummary" not in placement:
        # a new placement, or one an operator recorded before the DOMAINS column
        placement = {**placement, "domainSummary": domain_summary(placement["domains"])}
    desired["placement"] = placement
    desired["conditions"] = conditions
    goodput = desired.get("goodput") or status.get("goodput") or {}
    counted = badput.with_stalls(goodput, status.get("checkpoint") or {}, clock)
    if counted is not goodput:
        desired["goodput"] = counted
    desired["workers"] = {"desired": decided.workers, "ready": decided.ready,
                          "succeeded": decided.succeeded, "failed": decided.failed}
    live = placement is not None and desired["phase"] not in TERMINAL
    companions = sum(s.replicas * s.accelerators_per_pod for s in spec.pod_sets)
    desired["accelerators"] = decided.workers * spec.accelerators_per_worker + companions \
        if live else 0
    if desired["phase"] == "Running" and not status.get("startTime"):
        desired["startTime"] = times.seconds(clock)
    if desired["phase"] in TERMINAL and not status.get("completionTime"):
        desired["completionTime"] = times.seconds(clock)
    desired["observedGeneration"] = generation
    return desired


def _books(desired: Obj, status: Obj, clock: float, every: float) -> None:
    """A running job's goodput figures are refreshed with every status write it makes
    anyway, and on their own once EVERY seconds old (Snapshot.refresh_seconds: longer when
    thousands of jobs run); a changed goodput otherwise gets its ratio as of now."""
    goodput = desired.get("goodput") or status.get("goodput") or {}
    due = badput.refresh_due(goodput, clock, every)
    written = bool(changed_keys(status, desired))
    if desired["phase"] == "Running" and due is not None and (due <= clock or written):
        desired["goodput"] = badput.refreshed(goodput, clock)  # current, not as started
    elif "goodput" in desired:
        desired["goodput"] = {**desired["goodput"],
                              "ratio": badput.ratio(desired["goodput"], clock)}


def lost_nodes(snapshot: Snapshot, fleet: Fleet, job: Obj, pods: list[Obj]) -> dict[str, Lost]:
    """The nodes this job touches (its ranks, its open incident's, its failed pods') that
    it may no longer use: quarantined, gone, or moved out of its group."""
    status = job.get("status") or {}
    names = set(Spots(status.get("placement")).nodes())
    for incident in (status.get("incidents") or [])[-1:]:
        names.update(incident.get("nodes") or [])
    names.update(p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName"))
    lost: dict[str, Lost] = {}
    for name in names:
        node = fleet.nodes.get(name)
        record = record_of(snapshot.nodes[name]) if name in snapshot.nodes else None
        if node is None:
            lost[name] = Lost("the node left the group or was deleted", snapshot.clock)
        elif node.state == "quarantined" and record is not None:
            lost[name] = Lost(f"quarantined ({record.reason}: {record.evidence})", record.since,
                              record.reason)
    for name, refused in scheduler_refused(pods, restart_of(job), snapshot.clock)[0].items():
        lost.setdefault(name, refused)
    return lost


def scheduler_refused(pods: list[Obj], restart: int, now: float
                      ) -> tuple[dict[str, Lost], float | None]:
    """The nodes the scheduler has refused a pinned worker of attempt RESTART on for
    UNSCHEDULABLE_SECONDS (other pods' CPU or memory, a device plugin short of devices:
    what placement cannot see): for this job they are as good as lost, and its ranks there
    are placed again elsewhere. And when the next refused worker will have been refused
    long enough."""
    found, due = refused_by_scheduler([p for p in pods if attempt_of(p) == restart], now)
    return {r.node: Lost(f"the scheduler refuses {r.pod} there for {now - r.since:.0f}s: "
                         f"{r.message}"[:SHORT_MESSAGE_LENGTH], r.since, "Unschedulable")
            for r in found}, due


def _replacement(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                 placement: Obj | None, failed: list[str], result: JobDecision
                 ) -> tuple[Obj | None, str, str]:
    """The next attempt's placement: the same one when no node was lost, else failed ranks
    on spares keeping the topology, the whole gang moved, shrunk, or none (wait)."""
    ranks = ranks_of(placement)
    if placement is None or not ranks:
        return None, "wait", "no placement yet: placing the gang when it fits"
    if not failed:
        return ({**placement, "placedAt": times.millis(snapshot.clock)}, "restart",
                "restarting on the same nodes")
    current = Placement(True, "", tuple(
        RankSlot(r["rank"], r["node"], r.get("domain") or "",
                 fleet.nodes[r["node"]].slot if r["node"] in fleet.nodes else 0)
        for r in sorted(ranks, key=lambda r: r["rank"])))
    request = request_for(snapshot, fleet, spec, job, len(ranks))
    meta = job["metadata"]
    replaced = replacement_for(fleet, spec, current, failed, request,
                               trainingjob_owner(meta["namespace"], meta["name"]))
    if replaced.action == "wait":
        return None, "wait", replaced.reason
    ranks_now = replaced.ranks
    companions = _companions_after(snapshot, fleet, spec, job, placement, failed, request,
                                   ranks_now)
    if isinstance(companions, str):
        return None, "wait", f"{replaced.reason}, but {companions}"
    reserve(fleet, result, spec, restart_of(job) + 1, list(ranks_now), companions)
    return (placement_record(Placement(True, replaced.reason, ranks_now), snapshot.clock,
                             companions), replaced.action, replaced.reason)


def _companions_after(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                      placement: Obj, failed: list[str], request: Request,
                      ranks: Sequence[RankSlot]) -> list[CompanionSlot] | str:
    """The pod sets' places beside the replaced ranks: where they were while none of them
    was lost and the workers kept their domains; else placed again near the workers
    (never on a lost node), or why they cannot be."""
    kept = recorded_companions(placement)
    domains = tuple(dict.fromkeys(r.domain for r in ranks))
    if not spec.pod_sets or (not any(c.node in failed for c in kept) and
                             set(domains) == set(placement.get("domains") or ())):
        return kept
    lost = set(failed)
    companions = [dataclasses.replace(c, eligible=(c.eligible if c.eligible is not None
                                                   else frozenset(fleet.nodes)) - lost)
                  for c in companions_for(snapshot, fleet, spec, job)]
    return companions_near(fleet, Placement(True, "", tuple(ranks), domains), request,
                           companions)


def _place(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
           conditions: list[Obj], result: JobDecision) -> tuple[Obj | None, ConditionUpdate]:
    """Place the whole gang, or say why it waits (an event when the reason changes); in
    a namespace with more waiting jobs than turns, only when it has a turn (decide.turns)."""
    has_turn = turn(snapshot, "TrainingJob", job, snapshot.jobs, _waits_for_placement)
    previous = next((c for c in conditions if c["type"] == "Placed"), None)
    again = previous.get("message", "") if has_turn is False and previous is not None and \
        previous.get("reason") == "Preempting" else None
    if has_turn is False and again is None:
        return None, kept(conditions, "Placed", False, job["metadata"]["namespace"],
                          snapshot.searches_per_namespace)
    request = dataclasses.replace(request_for(snapshot, fleet, spec, job, spec.workers),
                                  companions=tuple(companions_for(snapshot, fleet, spec, job)))
    started = time.perf_counter()
    recovering = badput.current_incident(books_of(job.get("status") or {})) is not None
    preempting = None
    # a recovering gang may take spares
    with fleet.spares_released() if recovering else contextlib.nullcontext():
        placed = place_off_standby(fleet, request,
                                   standby_map(snapshot, spec.ultra_server_group),
                                   spec.borrow_standby)
        if not placed.ok and spec.preemption_policy == "LowerPriority":
            # without a turn, the victims of its last search while they still make room
            if again is not None:
                preempting = preempt_for(snapshot, fleet, spec, job, request, again)
            if preempting is None:
                preempting = preempt_for(snapshot, fleet, spec, job, request)
    result.placement_seconds = time.perf_counter() - started
    if not placed.ok:
        reason, why = ("Preempting", preempting) if preempting else \
            ("WaitingForCapacity", placed.reason)
        if previous is None or previous.get("message") != why:
            result.events.append(Event("Normal", reason, why))
        return None, ConditionUpdate("Placed", False, reason, why)
    placed = dataclasses.replace(placed, ranks=in_rank_order(placed.ranks,
                                                             spec.topology.rank_order))
    reserve(fleet, result, spec, restart_of(job), list(placed.ranks), placed.companions)
    created = times.parse(job["metadata"].get("creationTimestamp"))
    if created is not None:
        result.pending_seconds = max(0.0, snapshot.clock - created)
    result.events.append(Event("Normal", "Placed", placed.reason))
    return (placement_record(placed, snapshot.clock),
            ConditionUpdate("Placed", True, "Placed", placed.reason))


def _waits_for_placement(job: Obj) -> bool:
    """A job that asks for a placement search in every pass until it fits (decide.turns):
    not placed, not ended or suspended. One preempting already waits too: its search for
    victims (up to preemption.TRIALS placements) takes turns like any other, and between
    them it marks the victims it found again (`preempt_for`'s AGAIN)."""
    status = job.get("status") or {}
    return not status.get("placement") and status.get("phase") not in (*TERMINAL,
                                                                       "Suspended")
