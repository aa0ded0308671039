"""A TrainingJob's pass, policy by policy in order (`decide_job`), each a function that
returns a small record, combined in one place:

1. gate        an invalid spec fails it; no group, or a priority class the admin has not
               made or granted, keeps it Pending                          (here)
2. quota       Kueue's verdict on its Workload, or the admin's queue rule (decide.quota)
3. attempt     its current attempt: pods, incidents, restarts             (decide.attempt)
               held while not admitted, backed off while creates are refused (here)
4. preemption  a victim of this pass saves a checkpoint, then stops       (decide.preemption)
5. running     an elastic job grows back; the Straggler condition         (decide.running)
6. placement   a gang that needs one is placed, or preempts room          (decide.placing)
7. replacement a restart's lost ranks move to spares in their domain      (decide.replacing)
8. status      assembled once: phase, message, books, placement, counts   (decide.jobstatus)

Placement happens on the live fleet inside the caller's `Fleet.trial()`: the jobs decided
after this one see its reservations, and the controller makes them for real
(`JobDecision.reservations`) when it applies the decision. A placement is written to the
job's status before any pod is pinned to it, so an operator restart mid-launch finishes
the launch from it instead of redoing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goodput_operator import times
from goodput_operator.api.base import MESSAGE_LENGTH, SHORT_MESSAGE_LENGTH
from goodput_operator.api.conditions import get_condition, set_condition
from goodput_operator.api.statuses import ConditionDict, PlacementDict
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.views import JobView
from goodput_operator.decide import advising, jobstatus, noticing
from goodput_operator.decide.attempt import (
    TERMINAL,
    Attempt,
    Lost,
    Seen,
    Spots,
    attempt,
    books_of,
    pins,
    refuse,
)
from goodput_operator.decide.creates import with_class
from goodput_operator.decide.gang import JobDecision, fabric_of
from goodput_operator.decide.group import inconclusive_message, may_probe
from goodput_operator.decide.placing import Placed, place_gang
from goodput_operator.decide.preemption import Yielded, yield_to
from goodput_operator.decide.priority import pod_class
from goodput_operator.decide.quota import finish, queue_required, quota_for
from goodput_operator.decide.replacing import Replaced, replacement
from goodput_operator.decide.running import Grown, running_job
from goodput_operator.decide.snapshot import Mark, Snapshot
from goodput_operator.decide.types import (
    ConditionUpdate,
    Event,
    JobStatus,
    ProbeStart,
    Quota,
    Reservation,
    apply_conditions,
)
from goodput_operator.health import badput
from goodput_operator.health.hang import from_progress
from goodput_operator.health.quarantine import record_of
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.pods import attempt_of, is_active, owned, refused_by_scheduler

Obj = dict[str, Any]


def decide_job(snapshot: Snapshot, job: Obj) -> JobDecision:
    """JOB's pass: the module's steps, in their order."""
    view = snapshot.job(job)
    gated = gate(snapshot, view)
    if gated is not None:
        return gated
    assert view.spec is not None  # gate decides an invalid one
    fleet = snapshot.fleets[view.spec.ultra_server_group]
    pods = owned(snapshot.job_pods.get(view.key, {}).values(), job)
    quota, spec = under_kueue(snapshot, view, view.spec, pods)
    decided = current_attempt(snapshot, view, spec, pods, quota)
    names = [p["metadata"]["name"] for p in pods]
    decided, yielded = yield_to(snapshot, spec, job, decided, names)
    decided, grown = running_job(snapshot, fleet, spec, job, decided, names) \
        if decided.phase == "Running" and not yielded.marked else (decided, Grown())
    conditions = apply_conditions(list(view.status.get("conditions") or []),
                                  [*decided.conditions, *_evidence_held(snapshot, view)],
                                  view.generation, times.seconds(snapshot.clock))
    placed = place_gang(snapshot, fleet, spec, job, conditions) \
        if decided.needs_placement else None
    if placed is not None and placed.placement is not None:
        decided = _pinned(spec, decided, placed.placement, pods, view.restart)
    replaced = replacement(snapshot, fleet, spec, job, decided.failed_nodes,
                           decided.probe_first) if decided.restart else None
    return decision(snapshot, view, spec, Pass(decided, pods, quota, yielded, grown, placed,
                                               replaced), conditions)


@dataclass(frozen=True)
class Pass:
    """One job's pass as its policies left it: the attempt, the pods it saw, its quota,
    and what preemption, running, placement and replacement came to (None: the policy
    did not apply)."""

    decided: Attempt
    pods: list[Obj]
    quota: Quota | None
    yielded: Yielded
    grown: Grown
    placed: Placed | None
    replaced: Replaced | None

    @property
    def events(self) -> list[Event]:
        """In the order the policies ran."""
        replaced = self.replaced
        return [*self.decided.events, *self.yielded.events, *self.grown.events,
                *(self.placed.events if self.placed else ()),
                *((Event("Normal", "Replaced" if replaced.placement else
                         "WaitingForCapacity", replaced.why),) if replaced else ())]

    @property
    def reservations(self) -> list[Reservation]:
        return [*self.grown.reservations, *(self.placed.reservations if self.placed else ()),
                *(self.replaced.reservations if self.replaced else ())]


def gate(snapshot: Snapshot, view: JobView) -> JobDecision | None:
    """The job's decision when nothing else is decided: an invalid spec fails it (said
    once, by its view); a missing group, or a priority class the admin has not made or not
    granted its namespace before it is placed (it would run at a priority no one gave
    it), keeps it Pending."""
    job, status = view.obj, dict(view.status)
    conditions = list(status.get("conditions") or [])
    at = times.seconds(snapshot.clock)
    if view.spec is None:
        return JobDecision(job, status, {
            "phase": "Failed", "message": f"invalid spec: {view.invalid}",
            "conditions": set_condition(conditions, "Failed", True, "InvalidSpec",
                                        view.invalid, view.generation, at)})
    group = view.spec.ultra_server_group
    priority = snapshot.priority(job)
    if group not in snapshot.fleets:
        reason, message = "UltraServerGroupNotFound", f"UltraServerGroup {group!r} does " \
                                                      "not exist"
    elif priority.problem is not None and not status.get("placement"):
        reason, message = priority.reason, priority.problem
    else:
        return None
    return JobDecision(job, status, {
        "phase": "Pending", "message": message,
        "conditions": set_condition(conditions, "Placed", False, reason, message,
                                    view.generation, at)})


def under_kueue(snapshot: Snapshot, view: JobView, spec: TrainingJobSpec, pods: list[Obj]
                ) -> tuple[Quota | None, TrainingJobSpec]:
    """A job whose quota Kueue holds (decide.quota): its Workload's verdict, and the spec
    it is placed by (the admitted flavors' node labels join its node selector). An
    eviction marks it for this pass like a preemption victim (decide.preemption)."""
    job = view.obj
    if not kueue.under_kueue(job):
        return queue_required(snapshot, job), spec
    priority = snapshot.priority(job)
    busy = bool(view.status.get("placement")) or any(map(is_active, pods))
    quota = quota_for(snapshot, job, lambda: kueue.workload(
        job, spec, fabric_of(snapshot, spec), priority.value, priority.workload_ref()),
        kueue.job_pod_counts(spec), busy, times.seconds(snapshot.clock))
    if quota.evicted:
        snapshot.mark(view.key, Mark("Kueue", None, quota.evicted, verb="evicted"))
    if quota.node_labels:
        spec = spec.model_copy(update={
            "node_selector": {**(spec.node_selector or {}), **quota.node_labels}})
    return quota, spec


def current_attempt(snapshot: Snapshot, view: JobView, spec: TrainingJobSpec,
                    pods: list[Obj], quota: Quota | None) -> Attempt:
    """The attempt (decide.attempt), held until Kueue admits the job, its pods of the
    job's priority class, backed off while the API server refuses its workers."""
    job, clock = view.obj, snapshot.clock
    decided = attempt(job, spec, Seen(
        pods, fabric_of(snapshot, spec), lost_nodes(snapshot, view, pods), clock,
        snapshot.report_url, snapshot.seen_unhealthy.keys(), snapshot.probed_at,
        snapshot.steps.get(view.key) or from_progress(view.status.get("progress"))))
    decided = _held(decided, quota)
    classed = with_class(decided.missing, pod_class(snapshot.priority(job)))
    decided = decided if classed is decided.missing else decided.but(missing=classed)
    decided = _creation(snapshot, view, decided, pods)
    return decided.woken_by(scheduler_refused(pods, view.restart, clock)[1]).woken_by(
        quota.wake_at if quota else None)


def _held(decided: Attempt, quota: Quota | None) -> Attempt:
    """Until Kueue admits the job: no pods made, nothing placed, and the reason said."""
    if quota is None:
        return decided
    decided = decided.said(quota.condition)
    if not quota.hold:
        return decided
    decided = decided.but(missing=None, needs_placement=False)
    if decided.phase in ("Pending", "Recovering"):
        return decided.but(message=quota.message)
    return decided


def _creation(snapshot: Snapshot, view: JobView, decided: Attempt, pods: list[Obj]
              ) -> Attempt:
    """Whether the API server refused the workers (decide.attempt.refuse), and saying so
    once it stops."""
    refusal = snapshot.refused.get(view.key)
    if refusal is not None and decided.phase not in TERMINAL:
        refused = refuse(decided, refusal, pods, books_of(view.status), snapshot.clock)
        return refused.told(Event("Warning", "CreateRefused", refused.message)) \
            if refusal.times == 1 else refused
    if any(c["type"] == "WorkersCreated" and c["status"] == "False"
           for c in view.status.get("conditions") or []):
        return decided.said(ConditionUpdate("WorkersCreated", True, "Created", ""))
    return decided


def _pinned(spec: TrainingJobSpec, decided: Attempt, placement: Mapping[str, Any], pods: list[Obj],
            restart: int) -> Attempt:
    """A gang placed now: its pods pinned to their nodes, or, probed first, held gated."""
    spots = Spots(placement)
    if spec.sdc.probe_on_start:  # probes first: the workers stay gated
        return decided.but(hold=True, pin=[],
                       probe=sorted({r["node"] for r in spots.ranks.values()}))
    return decided.but(pin=pins(spots, pods, restart))


def decision(snapshot: Snapshot, view: JobView, spec: TrainingJobSpec, done: Pass,
             conditions: list[ConditionDict]) -> JobDecision:
    """The job's status, assembled once (decide.jobstatus), and its decision."""
    clock, at, status = snapshot.clock, times.seconds(snapshot.clock), dict(view.status)
    desired, placement = fields(view, done, clock)
    if view.key in snapshot.progress:
        desired["progress"] = snapshot.progress[view.key]
    live = desired.get("phase") not in TERMINAL  # a finished job's advice stays as it was
    gang = Spots(view.status.get("placement")).nodes() if live else []
    advice, interval = advising.advice_for(snapshot, view, spec, gang) if live \
        else (None, None)
    if advice is not None or (live and status.get("checkpointAdvice")):
        desired["checkpointAdvice"] = advice
    updates = [u for u in (done.placed.condition if done.placed else None, interval)
               if u is not None]
    if updates:
        conditions = apply_conditions(conditions, updates, view.generation, at)
    desired = jobstatus.staged(status, desired, times.parse(
        view.obj["metadata"].get("creationTimestamp")), clock)
    probes, held = start_probes(snapshot, spec.ultra_server_group, done.decided.probe)
    if held:
        desired["message"] = f"{desired.get('message', '')}; {held}".lstrip("; ")
    desired = jobstatus.completed({**desired, "conditions": conditions}, status, done.decided,
                                  spec, placement, clock)
    desired = jobstatus.booked({**desired, "observedGeneration": view.generation}, status,
                               clock, snapshot.refresh_seconds)
    notice, deadline = noticing.pending(snapshot, view, gang) \
        if desired.get("phase") == "Running" else (None, None)
    if notice is not None or status.get("notice"):
        desired["notice"] = notice
    quota = finished(snapshot, done.quota, view, desired)
    desired |= where(snapshot, quota)
    wakes = [done.decided.wake_at, done.yielded.wake_at, done.grown.wake_at, deadline,
             jobstatus.refresh_due(desired, status, clock, snapshot.refresh_seconds)]
    return JobDecision(
        view.obj, status, desired, [*done.events, *news(status, desired)], done.decided,
        placement,
        fresh=done.placed is not None and done.placed.placement is not None, spec=spec,
        observed={p["metadata"]["name"]: p for p in done.pods},
        reservations=done.reservations, probes=probes,
        wake_at=min((w for w in wakes if w is not None), default=None),
        placement_seconds=done.placed.placement_seconds if done.placed else None,
        pending_seconds=done.placed.pending_seconds if done.placed else None, quota=quota)


def news(status: Obj, desired: JobStatus) -> list[Event]:
    """The events this pass's status changes are worth: a phase a person waits for, a
    node's notice first seen, the checkpoint interval turning far from its advice."""
    found = []
    phase, message = desired.get("phase"), desired.get("message") or ""
    if phase != status.get("phase") and phase in ("Running", "Succeeded", "Failed",
                                                  "Suspended"):
        found.append(Event("Warning" if phase == "Failed" else "Normal", phase, message))
    notice = desired.get("notice")
    if notice and (status.get("notice") or {}).get("node") != notice.get("node"):
        found.append(Event("Warning", "NodeNotice", (
            f"{notice.get('kind')} notice on node {notice.get('node')}: saving a checkpoint "
            f"now; its ranks move once saved, by {notice.get('deadline')}")))
    was = get_condition(status.get("conditions") or [], "CheckpointInterval") or {}
    now = get_condition(desired.get("conditions") or [], "CheckpointInterval") or {}
    if now.get("status") == "False" and was.get("status") != "False":
        found.append(Event("Warning", "CheckpointIntervalFarOff", now.get("message") or ""))
    return found


def fields(view: JobView, done: Pass, clock: float) -> tuple[JobStatus, PlacementDict | None]:
    """The status fields the policies decided (phase, message, incidents, restarts,
    preemption), and the placement the job holds after this pass."""
    decided = done.decided
    desired: JobStatus = {"phase": decided.phase, "message": decided.message,
                          **decided.status, **done.yielded.fields}
    placement: PlacementDict | None = view.status.get("placement")
    if done.grown.placement is not None:
        placement, desired["restarts"] = done.grown.placement, view.restart + 1
    if done.yielded.stopped:
        placement = None
    if done.placed is not None:
        placement = done.placed.placement
        desired |= _placed_fields(view, desired, done.placed, clock)
    if done.replaced is not None:
        placement = done.replaced.placement
        desired |= _replaced_fields(view, desired, done, clock)
    if decided.phase == "Suspended":
        placement = None
    return desired, placement


def _placed_fields(view: JobView, desired: JobStatus, placed: Placed, clock: float
                   ) -> JobStatus:
    """A placement search's: Placing (or still Recovering) and its reason, the open
    incident's replacement done; or why it waits."""
    if placed.placement is None:
        return {"message": placed.condition.message}
    found: JobStatus = {
        "phase": "Recovering" if desired.get("phase") == "Recovering" else "Placing",
        "message": placed.placement.get("reason")}
    books: JobStatus = {**books_of(view.status), **desired, **found}
    incident = badput.current_incident(books)
    if incident is not None and not incident.get("replacedAt"):
        found["incidents"] = badput.replaced(books, clock, incident.get("action")
                                             or "wait")["incidents"]
    return found


def _replaced_fields(view: JobView, desired: JobStatus, done: Pass, clock: float
                     ) -> JobStatus:
    """A restart's: the next attempt, and the incident's replacement (or its wait)."""
    assert done.replaced is not None
    replaced = done.replaced
    books: JobStatus = {**books_of(view.status), **desired, "restarts": view.restart + 1}
    incidents = (badput.replaced(books, clock, replaced.action) if replaced.placement else
                 badput.update_incident(books, action=replaced.action))["incidents"]
    return {"restarts": view.restart + 1, "incidents": incidents,
            "message": f"{done.decided.message}: {replaced.why}"}


def finished(snapshot: Snapshot, quota: Quota | None, view: JobView, desired: JobStatus
             ) -> Quota | None:
    """A job that ended finishes its Workload (decide.quota.finish)."""
    phase = desired.get("phase")
    if quota is None or not quota.workload or phase not in TERMINAL:
        return quota
    return finish(quota, snapshot.workloads, view.key[0], phase, desired.get("message") or "",
                  times.seconds(snapshot.clock))


def where(snapshot: Snapshot, quota: Quota | None) -> JobStatus:
    """The cluster the job runs in and its Workload, in its status (MultiKueue copies
    it to the manager)."""
    found: JobStatus = {"cluster": snapshot.cluster_name} if snapshot.cluster_name else {}
    if quota is not None and quota.workload:
        found["workload"] = quota.workload
    return found


def start_probes(snapshot: Snapshot, group: str, nodes: list[str]
                 ) -> tuple[list[ProbeStart], str]:
    """Probe NODES before the start, but not where the group's probe image already proved
    nothing: the workers stay gated there, for a human or an image that can test the node,
    and the job's message says why (returned second)."""
    spec = snapshot.groups[group]
    return [ProbeStart(group, node, "start", snapshot.probe_runs.get(node, 0))
            for node in nodes if may_probe(snapshot, spec, node)], \
        inconclusive_message(snapshot, nodes)


def _evidence_held(snapshot: Snapshot, view: JobView) -> list[ConditionUpdate]:
    """The EvidenceHeld condition: nodes this job's reports blamed that are not out yet
    (the group's blame budget is in use: its status.heldEvidence says more)."""

    def by_owner() -> dict[str, list[str]]:  # one walk a pass, not one a job
        found: dict[str, list[str]] = {}
        for node, blamed in sorted(snapshot.blamed.items()):
            found.setdefault(blamed.owner, []).append(node)
        return found

    held = snapshot.memo.recall("blamed by owner", by_owner).get("/".join(view.key), [])
    if not held and not any(c.get("type") == "EvidenceHeld"
                            for c in view.status.get("conditions") or []):
        return []
    if not held:
        return [ConditionUpdate("EvidenceHeld", False, "Settled", "")]
    return [ConditionUpdate("EvidenceHeld", True, "BlameBudgetInUse", (
        f"blamed by this job's reports, not held out yet (the group's blame budget is in "
        f"use, or a hold on the node ended lately: the group's status.heldEvidence "
        f"says which): {', '.join(held[:8])}" + (f" and {len(held) - 8} more"
                                                 if len(held) > 8 else ""))[:MESSAGE_LENGTH])]


def lost_nodes(snapshot: Snapshot, view: JobView, pods: list[Obj]) -> dict[str, Lost]:
    """The nodes this job touches (its ranks, its open incident's, its failed pods') that
    it may no longer use: quarantined, gone, or moved out of its group."""
    assert view.spec is not None
    fleet = snapshot.fleets[view.spec.ultra_server_group]
    names = set(Spots(view.status.get("placement")).nodes())
    for incident in (view.status.get("incidents") or [])[-1:]:
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
    for notice in noticing.notices(snapshot, view.spec.ultra_server_group, names):  # about to go
        if notice.node not in lost and (gone := noticing.lost_to(view, notice,
                                                                  snapshot.clock)):
            lost[notice.node] = gone
    for name, refused in scheduler_refused(pods, view.restart, snapshot.clock)[0].items():
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
