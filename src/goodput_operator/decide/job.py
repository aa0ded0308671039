"""A TrainingJob's pass, decided: its attempt (decide.attempt), its placement or the
replacement of lost ranks, and the complete status to write.

Placement happens on the live fleet inside the caller's `Fleet.trial()`: the jobs decided
after this one see its reservations, and the controller makes them for real
(`JobDecision.reservations`) when it applies the decision. A placement is written to the
job's status before any pod is pinned to it, so an operator restart mid-launch finishes
the launch from it instead of redoing it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from goodput_operator import names
from goodput_operator.api.base import describe_errors
from goodput_operator.api.conditions import set_condition, stamp
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.attempt import (
    TERMINAL,
    Attempt,
    Lost,
    attempt,
    books_of,
    refuse,
    strict_checkpoints,
)
from goodput_operator.decide.fit import pod_fit
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import (
    ConditionUpdate,
    Event,
    ProbeStart,
    Refusal,
    Reservation,
    apply_conditions,
)
from goodput_operator.health import badput, straggler
from goodput_operator.health.hang import from_progress
from goodput_operator.health.quarantine import iso, parse_time, record_of
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.pods import attempt_of, index_of, is_gated, owned
from goodput_operator.topology.model import Fleet, trainingjob_owner
from goodput_operator.topology.placement import (
    Placement,
    RankSlot,
    Request,
    in_rank_order,
    place,
)
from goodput_operator.topology.record import nodes_of, ranks_of, to_slices
from goodput_operator.topology.replacement import Elastic, grow, replace

Obj = dict[str, Any]


@dataclass
class JobDecision:
    """Everything one job's pass will do: the status to write, the children to change,
    the reservations and probes for the controller to record, and the events."""

    job: Obj
    status: Obj  # the status as read
    desired: Obj  # the keys to write (None removes one)
    events: list[Event] = field(default_factory=list)
    attempt: Attempt | None = None  # None: only the status changes (invalid spec, no group)
    placement: Obj | None = None
    fresh: bool = False  # a placement made in this pass: write it before pinning
    spec: TrainingJobSpec | None = None
    observed: dict[str, Obj] = field(default_factory=dict)  # the job's pods, by name
    reservations: list[Reservation] = field(default_factory=list)
    probes: list[ProbeStart] = field(default_factory=list)
    wake_at: float | None = None  # a timer (backoff) runs out then
    placement_seconds: float | None = None  # time spent placing (a metric)
    pending_seconds: float | None = None  # created -> placed, when placed now (a metric)

    @property
    def key(self) -> tuple[str, str]:
        meta = self.job["metadata"]
        return meta["namespace"], meta["name"]


def restart_of(job: Obj) -> int:
    return int((job.get("status") or {}).get("restarts", 0))


def decide_job(snapshot: Snapshot, job: Obj) -> JobDecision:
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status: Obj = dict(job.get("status") or {})
    generation = meta.get("generation")
    clock, at = snapshot.clock, stamp(snapshot.clock)
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
    if fleet is None:
        message = f"UltraServerGroup {group!r} does not exist"
        return JobDecision(job, status, {
            "phase": "Pending", "message": message,
            "conditions": set_condition(conditions, "Placed", False,
                                        "UltraServerGroupNotFound", message, generation, at)})

    pods = owned(snapshot.job_pods.get((namespace, name), {}).values(), job)
    decided = attempt(job, pods, fleet.shape.accelerator_resource,
                      lost_nodes(snapshot, fleet, job, pods), clock, snapshot.report_url,
                      suspects=snapshot.seen_unhealthy.keys(), probed=snapshot.probed_at,
                      spec=spec, steps=snapshot.steps.get((namespace, name))
                      or from_progress(status.get("progress")))
    _creation(snapshot.refused.get((namespace, name)), decided, pods, status, clock)
    wakes = [w for w in (decided.wake_at, _unschedulable_wake(pods, restart_of(job), clock))
             if w is not None]
    result = JobDecision(job, status, {}, list(decided.events), decided, spec=spec,
                         observed={p["metadata"]["name"]: p for p in pods},
                         wake_at=min(wakes, default=None))
    placement = status.get("placement")
    grown = _running(snapshot, fleet, spec, job, decided, result) \
        if decided.phase == "Running" else None
    desired: Obj = {"phase": decided.phase, "message": decided.message, **decided.status}
    if grown is not None:
        placement, desired["restarts"] = grown, restart_of(job) + 1
    if (namespace, name) in snapshot.progress:
        desired["progress"] = snapshot.progress[(namespace, name)]
    conditions = apply_conditions(conditions, decided.conditions, generation, at)

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
            by_rank = {r["rank"]: r for r in ranks_of(placement)}
            decided.pin = [(p["metadata"]["name"], by_rank[index_of(p)]["node"],
                            by_rank[index_of(p)]["domain"]) for p in pods
                           if index_of(p) in by_rank and attempt_of(p) == restart_of(job)
                           and is_gated(p)]
            if spec.sdc.probe_on_start:  # probes first: the workers stay gated
                decided.hold, decided.pin = True, []
                decided.probe = sorted({r["node"] for r in by_rank.values()})
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
    _stage(status, desired, parse_time(meta.get("creationTimestamp")), clock)
    result.probes = [ProbeStart(group, node, "start", snapshot.probe_runs.get(node, 0))
                     for node in decided.probe]
    result.placement = placement
    result.desired = _complete(desired, status, decided, spec, placement, conditions,
                               generation, clock)
    due = badput.refresh_due(result.desired.get("goodput") or status.get("goodput") or {},
                             clock) if result.desired["phase"] == "Running" else None
    result.wake_at = min((w for w in (result.wake_at, due) if w is not None), default=None)
    if desired["phase"] != status.get("phase") and desired["phase"] in (
            "Running", "Succeeded", "Failed", "Suspended"):
        result.events.append(Event("Warning" if desired["phase"] == "Failed" else "Normal",
                                   desired["phase"], desired["message"]))
    return result


def _running(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
             decided: Attempt, result: JobDecision) -> Obj | None:
    """What a running job's pass adds: an elastic job's grow (its new placement), or
    else the Straggler condition."""
    grown = _grow(snapshot, fleet, spec, job, decided, result) if spec.elastic else None
    if grown is None:
        meta = job["metadata"]
        decided.conditions.append(_stragglers(snapshot, (meta["namespace"], meta["name"]),
                                              spec, restart_of(job)))
    return grown


def _stragglers(snapshot: Snapshot, key: tuple[str, str], spec: TrainingJobSpec,
                restart: int) -> ConditionUpdate:
    """The Straggler condition: which signal is in force, and the slow ranks found."""
    policy = spec.failure_policy.straggler
    if not policy.enabled:
        return ConditionUpdate("Straggler", False, "Disabled",
                               "failurePolicy.straggler.enabled is false")
    pace = snapshot.paces.get(key)
    if pace is None or pace.attempt != restart or len(pace.ranks) < 2:
        return ConditionUpdate("Straggler", False, "NoStepReports",
                               "fewer than 2 ranks reported steps in this attempt: "
                               "stragglers are not detected")
    found = snapshot.stragglers.get(key) or []
    if found:
        more = f"; {len(found) - 3} more" if len(found) > 3 else ""
        action = (" (its node is quarantined for a probe)" if policy.action == "quarantine"
                  else "")
        return ConditionUpdate("Straggler", True, "SlowRank", "; ".join(
            s.evidence for s in found[:3]) + more + action)
    basis = (straggler.METRIC if any(p.measured for p in pace.ranks.values())
             else "the time between step reports")
    return ConditionUpdate("Straggler", False, "NoneFound",
                           f"ranks compared by {basis}: none over {policy.factor:g} x its "
                           f"peers' median over {policy.min_steps}+ steps")


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
    desired["placement"] = placement
    desired["conditions"] = conditions
    goodput = desired.get("goodput") or status.get("goodput") or {}
    counted = badput.with_stalls(goodput, status.get("checkpoint") or {}, clock)
    if counted is not goodput:
        desired["goodput"] = goodput = counted
    due = badput.refresh_due(goodput, clock)
    if desired["phase"] == "Running" and due is not None and due <= clock:
        desired["goodput"] = badput.refreshed(goodput, clock)  # current, not as started
    elif "goodput" in desired:
        desired["goodput"] = {**desired["goodput"],
                              "ratio": badput.ratio(desired["goodput"], clock)}
    desired["workers"] = {"desired": decided.workers, "ready": decided.ready,
                          "succeeded": decided.succeeded, "failed": decided.failed}
    live = placement is not None and desired["phase"] not in TERMINAL
    desired["accelerators"] = decided.workers * spec.accelerators_per_worker if live else 0
    if desired["phase"] == "Running" and not status.get("startTime"):
        desired["startTime"] = stamp(clock)
    if desired["phase"] in TERMINAL and not status.get("completionTime"):
        desired["completionTime"] = stamp(clock)
    desired["observedGeneration"] = generation
    return desired


def lost_nodes(snapshot: Snapshot, fleet: Fleet, job: Obj, pods: list[Obj]) -> dict[str, Lost]:
    """The nodes this job touches (its ranks, its open incident's, its failed pods') that
    it may no longer use: quarantined, gone, or moved out of its group."""
    status = job.get("status") or {}
    names = set(nodes_of(status.get("placement")))
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
    for name, refused in scheduler_refused(pods, restart_of(job), snapshot.clock).items():
        lost.setdefault(name, refused)
    return lost


UNSCHEDULABLE_SECONDS = 30.0  # a pinned worker the scheduler refuses this long: re-placed


def _refused_since(pod: Obj, restart: int) -> tuple[str, float, str] | None:
    """(node, since, the scheduler's message) when POD is a pinned, unbound worker of
    attempt RESTART that kube-scheduler marks Unschedulable; else None."""
    node = (pod["metadata"].get("annotations") or {}).get(names.NODE_ANNOTATION)
    if not node or attempt_of(pod) != restart or is_gated(pod) or \
            pod.get("spec", {}).get("nodeName"):
        return None
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            since = parse_time(condition.get("lastTransitionTime"))
            return None if since is None else (node, since, condition.get("message", ""))
    return None


def scheduler_refused(pods: list[Obj], restart: int, now: float) -> dict[str, Lost]:
    """The nodes the scheduler has refused a pinned worker of attempt RESTART on for
    UNSCHEDULABLE_SECONDS (other pods' CPU or memory, a device plugin short of devices:
    what placement cannot see): for this job they are as good as lost, and its ranks there
    are placed again elsewhere."""
    found: dict[str, Lost] = {}
    for pod in pods:
        refused = _refused_since(pod, restart)
        if refused is not None and now >= refused[1] + UNSCHEDULABLE_SECONDS:
            node, since, message = refused
            found[node] = Lost(f"the scheduler refuses {pod['metadata']['name']} there for "
                               f"{now - since:.0f}s: {message}"[:512], since, "Unschedulable")
    return found


def _unschedulable_wake(pods: list[Obj], restart: int, now: float) -> float | None:
    """When the next pinned worker the scheduler refuses has been refused long enough."""
    due = [refused[1] + UNSCHEDULABLE_SECONDS for pod in pods
           if (refused := _refused_since(pod, restart)) is not None]
    return min((t for t in due if t > now), default=None)


def _reserve(fleet: Fleet, result: JobDecision, spec: TrainingJobSpec, restart: int,
             ranks: list[RankSlot]) -> None:
    """Reserve the placed ranks in the trial (the jobs decided later in this pass must see
    them) and hand them to the controller."""
    job, group = result.job, spec.ultra_server_group or ""
    meta = job["metadata"]
    owner = trainingjob_owner(meta["namespace"], meta["name"])
    for rank in ranks:
        key = f"{meta['namespace']}/{build.pod_name(meta['name'], restart, rank.rank)}"
        fleet.bind(key, rank.node, spec.accelerators_per_worker, owner)
        result.reservations.append(Reservation(group, key, rank.node,
                                               spec.accelerators_per_worker, owner))


def request_for(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                workers: int) -> Request:
    """WORKERS of the job's gang as placement takes them: limited to the nodes its worker
    pod fits as kube-scheduler judges it (node selector, node affinity, taints,
    requests), worked out once per pass for each group and pod spec."""
    pod_spec = build.worker_pod(job, 0, 0, fleet.shape.accelerator_resource, spec=spec)["spec"]
    eligible, why = pod_fit(snapshot.nodes, snapshot.memo, fleet, spec.ultra_server_group,
                            pod_spec)
    return Request(workers, spec.accelerators_per_worker, spec.topology.unit,
                   spec.topology.policy, eligible, why)


def _placement_record(placed: Placement, clock: float) -> Obj:
    """The placement as the status records it (and the next attempt reads it back)."""
    ranks = placed.ranks
    domains = placed.domains or tuple(dict.fromkeys(r.domain for r in ranks))
    return {"domains": list(domains), "reason": placed.reason,
            "placedAt": iso(clock), "workers": len(ranks),
            "slices": to_slices({"rank": r.rank, "node": r.node, "domain": r.domain}
                                    for r in ranks)}


def _replacement(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
                 placement: Obj | None, failed: list[str], result: JobDecision
                 ) -> tuple[Obj | None, str, str]:
    """The next attempt's placement: the same one when no node was lost, else failed ranks
    on spares keeping the topology, the whole gang moved, shrunk, or none (wait)."""
    ranks = ranks_of(placement)
    if placement is None or not ranks:
        return None, "wait", "no placement yet: placing the gang when it fits"
    if not failed:
        return ({**placement, "placedAt": iso(snapshot.clock)}, "restart",
                "restarting on the same nodes")
    if spec.failure_policy.node_replacement == "wait":
        return None, "wait", ("failurePolicy.nodeReplacement is wait: placing the gang again "
                              "when it fits")
    current = Placement(True, "", tuple(
        RankSlot(r["rank"], r["node"], r.get("domain") or "",
                 fleet.nodes[r["node"]].slot if r["node"] in fleet.nodes else 0)
        for r in sorted(ranks, key=lambda r: r["rank"])))
    request = request_for(snapshot, fleet, spec, job, len(ranks))
    allowed = request.eligible if request.eligible is not None else frozenset(fleet.nodes)
    gone = "; ".join(filter(None, [request.ineligible, f"{len(failed)} being replaced"]))
    request = dataclasses.replace(request, eligible=allowed - set(failed),  # not back there
                                  ineligible=gone)
    elastic = Elastic(spec.elastic.min_workers, spec.elastic.step) if spec.elastic else None
    meta = job["metadata"]
    owner = trainingjob_owner(meta["namespace"], meta["name"])
    replaced = replace(fleet, current, failed, request, owner, elastic,
                       spares_only=spec.failure_policy.node_replacement == "spare")
    if replaced.action == "wait":
        return None, "wait", replaced.reason
    ranks_now = in_rank_order(replaced.ranks, spec.topology.rank_order)
    _reserve(fleet, result, spec, restart_of(job) + 1, list(ranks_now))
    return (_placement_record(Placement(True, replaced.reason, ranks_now), snapshot.clock),
            replaced.action, replaced.reason)


def _grow(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
          decided: Attempt, result: JobDecision) -> Obj | None:
    """An elastic job running below spec.workers grows back: once it has run
    elastic.growAfterSeconds at its size (the hysteresis), while no other gang of its group
    waits for a placement (returning capacity goes to waiting gangs first), and when a
    larger gang fits. The grow is a planned restart of the whole gang at the new size from
    the last checkpoint (incident cause Resize, paid from no budget). Returns the new
    placement and turns DECIDED into that restart; None leaves it as it was."""
    assert spec.elastic is not None
    status = job.get("status") or {}
    running = len(ranks_of(status.get("placement")))
    since = parse_time((status.get("goodput") or {}).get("since"))
    if not running or running >= spec.workers or since is None:
        return None
    due = _grow_due(status, since, spec.elastic.grow_after_seconds, snapshot.clock)
    if snapshot.clock < due:
        result.wake_at = min(w for w in (result.wake_at, due) if w is not None)
        return None
    if _gangs_waiting(snapshot, fleet, spec, job):
        return None
    meta = job["metadata"]
    request = request_for(snapshot, fleet, spec, job, spec.workers)
    grown = grow(fleet, running, request, trainingjob_owner(meta["namespace"], meta["name"]),
                 Elastic(spec.elastic.min_workers, spec.elastic.step))
    if grown is None:
        return None
    ranks = in_rank_order(grown.ranks, spec.topology.rank_order)
    restart = restart_of(job)
    _reserve(fleet, result, spec, restart + 1, list(ranks))
    clock = snapshot.clock
    books = badput.open_incident(books_of(status), restart + 1, "Resize", grown.reason, [],
                                 clock, clock, strict=strict_checkpoints(spec))
    books = badput.replaced(books, clock, "grow")
    decided.phase, decided.restart = "Recovering", False
    decided.message = f"elastic: {grown.reason} (restart {restart + 1})"
    decided.status = {"incidents": books["incidents"], "goodput": books["goodput"]}
    decided.create, decided.pin = [], []
    decided.delete = [p["metadata"]["name"] for p in result.observed.values()]
    decided.conditions = [c for c in decided.conditions if c.type != "Running"]
    decided.conditions.append(ConditionUpdate("Running", False, "Resizing", decided.message))
    result.events.append(Event("Normal", "Resizing", decided.message))
    return _placement_record(Placement(True, grown.reason, ranks), clock)


def _grow_due(status: Obj, since: float, after: float, now: float) -> float:
    """When a grow may happen: AFTER seconds into the stretch at this size, at the first
    checkpoint committed from then on (a restart there redoes no work), or AFTER seconds
    later still when the job commits none in that time."""
    due = since + after
    committed = parse_time(((status.get("checkpoint") or {}).get("latest") or {}).get("time"))
    if committed is None or committed >= due or now >= due + after:
        return due
    return due + after


def _gangs_waiting(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj) -> bool:
    """Whether a gang of the group, of at least this job's priority, waits for its first
    placement and fits in what is free now: returning capacity goes to it before a grow
    takes it. A waiting gang that does not fit even now does not hold growth back (it
    would wait for ever, and the grow frees nothing it could use)."""
    for other in snapshot.jobs:
        status = other.get("status") or {}
        if other is job or other["spec"].get("ultraServerGroup") != spec.ultra_server_group \
                or status.get("placement") or status.get("phase") not in (None, "Pending") \
                or other["spec"].get("suspend"):
            continue
        try:
            waiting = TrainingJobSpec.model_validate(other["spec"])
        except ValidationError:
            continue
        if waiting.priority >= spec.priority and place(
                fleet, request_for(snapshot, fleet, waiting, other, waiting.workers)).ok:
            return True
    return False


def _place(snapshot: Snapshot, fleet: Fleet, spec: TrainingJobSpec, job: Obj,
           conditions: list[Obj], result: JobDecision) -> tuple[Obj | None, ConditionUpdate]:
    """Place the whole gang, or say why it waits (an event when the reason changes)."""
    request = request_for(snapshot, fleet, spec, job, spec.workers)
    started = time.perf_counter()
    if badput.current_incident(books_of(job.get("status") or {})) is not None:
        with fleet.spares_released():  # a recovering gang may take spares
            placed = place(fleet, request)
    else:
        placed = place(fleet, request)
    result.placement_seconds = time.perf_counter() - started
    if not placed.ok:
        previous = next((c for c in conditions if c["type"] == "Placed"), None)
        if previous is None or previous.get("message") != placed.reason:
            result.events.append(Event("Normal", "WaitingForCapacity", placed.reason))
        return None, ConditionUpdate("Placed", False, "WaitingForCapacity", placed.reason)
    placed = dataclasses.replace(placed, ranks=in_rank_order(placed.ranks,
                                                             spec.topology.rank_order))
    _reserve(fleet, result, spec, restart_of(job), list(placed.ranks))
    created = parse_time(job["metadata"].get("creationTimestamp"))
    if created is not None:
        result.pending_seconds = max(0.0, snapshot.clock - created)
    result.events.append(Event("Normal", "Placed", placed.reason))
    return (_placement_record(placed, snapshot.clock),
            ConditionUpdate("Placed", True, "Placed", placed.reason))
