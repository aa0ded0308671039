"""TrainingJobs and InferenceEndpoints under Kueue's quota: what their Workloads say.

A job with a `kueue.x-k8s.io/queue-name` label (or one MultiKueue sent to this cluster,
with its prebuilt-workload label) gets no pod and no placement until Kueue admits its
Workload; then it is placed by our engine on the nodes of the flavors Kueue assigned
(their node labels join the job's node selector). An eviction (Kueue's preemption, a
deactivation) is a preemption to the job: its workers are asked for a checkpoint, stopped
within preemptionGraceSeconds, and once they are gone the quota is given back, so Kueue
queues the Workload again. When the job ends its Workload is finished. An endpoint under
Kueue holds no replica until admitted and gives them all up when evicted. Without the
label nothing changes.

On a MultiKueue manager, an object with `spec.managedBy: kueue.x-k8s.io/multikueue` only
gets its Workload (`handoff`): MultiKueue runs it on a worker and owns its status.

Level-based like the rest: every pass reads the Workload as it is; nothing is remembered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from goodput_operator.api.base import MESSAGE_LENGTH
from goodput_operator.api.conditions import set_condition
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.decide.gang import JobDecision
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import ConditionUpdate, Quota
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import is_active

Obj = dict[str, Any]


def quota_for(snapshot: Snapshot, obj: Obj, make: Callable[[], Obj],
              counts: Mapping[str, int], busy: bool, at: str) -> Quota:
    """OBJ (a job or an endpoint under Kueue) as its Workload stands in SNAPSHOT (with the
    ResourceFlavors' node labels, and whether the cluster serves Kueue's Workload API at
    all). MAKE: builds the Workload; COUNTS: the pods of each of its pod sets; BUSY: its
    pods still hold nodes (an eviction gives the quota back only once they are gone); AT:
    the pass's time, stamped. A Workload that is not OBJ's own, or counts other pods than
    OBJ runs, admits nothing (TENANCY.md rule 3)."""
    meta = obj["metadata"]
    name = kueue.workload_name(obj)
    wl = snapshot.workloads.get((meta["namespace"], name))

    def held(reason: str, message: str, **more: Any) -> Quota:
        return Quota(name, True, ConditionUpdate("Admitted", False, reason, message), **more)

    if wl is not None and (foreign := kueue.not_owned(obj, wl)) is not None:
        return held("WorkloadNotOwned", f"{foreign}: it admits nothing here, and the "
                    "operator neither runs under it nor finishes it"[:MESSAGE_LENGTH], foreign=True)
    if wl is not None and kueue.pod_counts(wl) != dict(counts) and not busy:
        said = ", ".join(f"{k}: {v}" for k, v in sorted(kueue.pod_counts(wl).items()))
        return held("WorkloadOutdated", f"Workload {name} counts other pods ({said}) than "
                    f"it runs: deleted, to be made again", remove=wl)
    if wl is None:
        if not snapshot.kueue:
            return held("KueueUnavailable", "it names a Kueue queue but this cluster serves "
                        "no Kueue Workloads (kueue.x-k8s.io/v1beta2): it waits")
        if not kueue.queue_of(obj):
            return held("WorkloadMissing", f"waiting for Workload {name}, which MultiKueue "
                        "creates with it")
        return creating(snapshot, obj, name, make, f"waiting for Kueue: Workload {name} "
                        f"created in LocalQueue {kueue.queue_of(obj)}")
    admission = (wl.get("status") or {}).get("admission") or {}
    queue = admission.get("clusterQueue") or ""
    finished = kueue.condition(wl, "Finished")
    if finished is not None:
        return held("Finished", f"Workload {name} is finished: {finished.get('message', '')}")
    evicted = kueue.condition(wl, "Evicted")
    if evicted is not None and kueue.condition(wl, "QuotaReserved") is not None:
        why = (f"evicted from ClusterQueue {queue}: {evicted.get('reason')}: "
               f"{evicted.get('message', '')}")[:MESSAGE_LENGTH]
        if busy:
            return Quota(name, False, ConditionUpdate("Admitted", False, "Evicted", why),
                         evicted=why)
        return held("Evicted", f"{why}; quota given back, queued again", target=wl,
                    patch=kueue.released(wl, evicted, at))
    if kueue.condition(wl, "Admitted") is None:
        return held("Queued",
                    f"waiting for Kueue to admit Workload {name}{_why(wl)}"[:MESSAGE_LENGTH])
    labels, missing = _node_labels(admission, snapshot.flavors)
    if missing:
        return held("Admitted", f"admitted by ClusterQueue {queue}; waiting to read "
                    f"ResourceFlavor(s) {', '.join(missing)}")
    said = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return Quota(name, False, ConditionUpdate(
        "Admitted", True, "Admitted",
        f"admitted by ClusterQueue {queue}" + (f" on nodes {said}" if said else "")),
        node_labels=labels)


def queue_required(snapshot: Snapshot, obj: Obj) -> Quota | None:
    """OBJ names no queue where the admin requires one (--require-queue): it is held, as
    Kueue's manageJobsWithoutQueueName holds a Job, so that no namespace runs outside the
    quota its ClusterQueue grants. None: not required, or it is under Kueue."""
    namespace = obj["metadata"]["namespace"]
    if kueue.under_kueue(obj) or not snapshot.require_queue & {namespace, "*"}:
        return None
    return Quota("", True, ConditionUpdate(
        "Admitted", False, "QueueRequired", f"namespace {namespace} runs only what a Kueue "
        f"queue admits: add the {kueue.QUEUE_LABEL} label naming a LocalQueue"))


def creating(snapshot: Snapshot, obj: Obj, name: str, make: Callable[[], Obj],
             message: str) -> Quota:
    """OBJ's Workload NAME is to be created (MAKE builds it): queued, saying MESSAGE; or,
    when the API server refused it for good (a webhook's or the schema's no), held with
    its words, and tried again only once the backoff has run out."""
    owner = kueue.owner_key(obj)
    workload, refusal = snapshot.workload_refusals.get(owner, ("", None))
    if refusal is None or workload != name:
        return Quota(name, True, ConditionUpdate("Admitted", False, "Queued", message),
                     create=make(), owner=owner)
    retry = snapshot.clock >= refusal.retry_at()
    return Quota(name, True, ConditionUpdate(
        "Admitted", False, "WorkloadRefused",
        f"the API server refused its Workload {name}: {refusal.message}"[:MESSAGE_LENGTH]),
        create=make() if retry else None, wake_at=None if retry else refusal.retry_at(),
        owner=owner)


def _node_labels(admission: Obj, flavors: Mapping[str, Mapping[str, str]]
                 ) -> tuple[dict[str, str], list[str]]:
    """The node labels of the flavors assigned to the workers' (or replicas') pod set
    (and, if unknown yet, which flavors)."""
    labels: dict[str, str] = {}
    missing: list[str] = []
    for assigned in admission.get("podSetAssignments") or []:
        if assigned.get("name") not in (kueue.WORKERS, kueue.REPLICA):
            continue
        for flavor in sorted(set((assigned.get("flavors") or {}).values())):
            if flavor in flavors:
                labels.update(flavors[flavor])
            else:
                missing.append(flavor)
    return labels, missing


def finish(quota: Quota, workloads: Mapping[tuple[str, str], Obj], namespace: str,
           phase: str, message: str, at: str) -> Quota:
    """The job ended (PHASE): QUOTA finishing its Workload, once (never one that is not
    its own)."""
    wl = workloads.get((namespace, quota.workload))
    if wl is not None and not quota.foreign and kueue.condition(wl, "Finished") is None:
        return replace(quota, target=wl,
                       patch=kueue.finished(wl, phase == "Succeeded", message, at))
    return quota


def handoff(snapshot: Snapshot, obj: Obj, make: Callable[[Fabric], Obj | None]
            ) -> tuple[ConditionUpdate | None, Quota | None]:
    """An object MultiKueue runs on a worker cluster (spec.managedBy, on the manager): its
    Workload is made here (MAKE builds it, counting the accelerators of its group; None:
    the spec is invalid) and nothing else; its status is MultiKueue's, copied from the
    worker. Until a worker has it, and when nothing would ever run it (no queue label),
    what to say on its Admitted condition."""
    meta, status = obj["metadata"], obj.get("status") or {}
    if not kueue.queue_of(obj):
        return ConditionUpdate("Admitted", False, "NoQueue", f"spec.managedBy is "
                               f"{kueue.MULTIKUEUE} but there is no {kueue.QUEUE_LABEL} "
                               "label: MultiKueue sends it nowhere"), None
    if not snapshot.kueue:
        return ConditionUpdate("Admitted", False, "KueueUnavailable", "spec.managedBy is "
                               f"{kueue.MULTIKUEUE} but this cluster serves no Kueue "
                               "Workloads (kueue.x-k8s.io/v1beta2)"), None
    name = kueue.workload_name(obj)
    wl = snapshot.workloads.get((meta["namespace"], name))
    if status.get("cluster"):
        return None, None  # a worker runs it: the status is the worker's
    if wl is not None:
        if (wl.get("status") or {}).get("clusterName"):
            return None, None
        return ConditionUpdate("Admitted", False, "Queued",
                               f"waiting for MultiKueue: {_dispatch(wl)}"), None
    group = str((obj.get("spec") or {}).get("ultraServerGroup") or "")
    if group not in snapshot.groups:
        return ConditionUpdate("Admitted", False, "UltraServerGroupNotFound", f"the Workload "
                               f"counts the accelerators of UltraServerGroup {group!r}: "
                               "create it here too (its spec; no nodes need match)"), None
    body = make(Fabric.of(snapshot.groups[group]))
    if body is None:  # an invalid spec: admission refuses these; nothing to count quota by
        return None, None
    quota = creating(snapshot, obj, name, lambda: body, "")
    return (quota.condition if quota.condition.reason == "WorkloadRefused" else None), quota


def decide_delegated(snapshot: Snapshot, job: Obj, at: str) -> JobDecision:
    """A TrainingJob MultiKueue runs elsewhere (handoff), as the job controller applies it."""
    status = job.get("status") or {}
    priority = snapshot.priority(job)
    spec = snapshot.job(job).spec
    said, quota = handoff(snapshot, job, lambda fabric: None if spec is None else kueue.workload(
        job, spec, fabric, priority.value, priority.workload_ref()))
    wake_at = quota.wake_at if quota is not None else None
    if said is None:
        return JobDecision(job, status, {}, quota=quota, wake_at=wake_at)
    return JobDecision(job, status, {
        "phase": "Pending", "message": said.message,
        "conditions": set_condition(list(status.get("conditions") or []), said.type, False,
                                    said.reason, said.message,
                                    job["metadata"].get("generation"), at)}, quota=quota,
                       wake_at=wake_at)


def _why(wl: Obj) -> str:
    """What Kueue says on WL's QuotaReserved condition (": ..."), if anything."""
    pending = next((c for c in (wl.get("status") or {}).get("conditions") or []
                    if c.get("type") == "QuotaReserved"), None)
    return f": {pending['message']}" if pending and pending.get("message") else ""


def _dispatch(wl: Obj) -> str:
    """Where a manager's Workload stands before a worker cluster runs it."""
    status = wl.get("status") or {}
    name = wl["metadata"]["name"]
    if kueue.condition(wl, "QuotaReserved") is None:
        return f"Workload {name} has no quota in this cluster yet{_why(wl)}"[:MESSAGE_LENGTH]
    checks = "; ".join(f"{c.get('name')}: {c.get('state')}"
                       + (f" ({c['message']})" if c.get("message") else "")
                       for c in status.get("admissionChecks") or [])
    sent = ", ".join(status.get("nominatedClusterNames") or [])
    return (f"Workload {name} reserved quota here"
            + (f", offered to {sent}" if sent else "")
            + (f"; {checks}" if checks else "")
            + "; no worker cluster admitted it yet")[:MESSAGE_LENGTH]


def endpoint_quota(snapshot: Snapshot, ie: Obj, spec: InferenceEndpointSpec,
                   pods: Sequence[Obj], at: str) -> Quota | None:
    """An endpoint under Kueue (a queue label, or a replica MultiKueue sent here): its
    Workload's verdict; None for one that is not. It holds no replica until admitted,
    and gives them all up when evicted."""
    if not kueue.under_kueue(ie):
        return queue_required(snapshot, ie)
    fabric = Fabric.of(snapshot.groups[spec.ultra_server_group])
    return quota_for(snapshot, ie, lambda: kueue.endpoint_workload(ie, spec, fabric),
                     kueue.endpoint_pod_counts(spec), any(map(is_active, pods)), at)
