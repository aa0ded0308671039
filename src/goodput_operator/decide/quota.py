"""A TrainingJob under Kueue's quota: what its Workload says this pass.

A job with a `kueue.x-k8s.io/queue-name` label (or one MultiKueue sent to this cluster,
with its prebuilt-workload label) gets no pod and no placement until Kueue admits its
Workload; then it is placed by our engine on the nodes of the flavors Kueue assigned
(their node labels join the job's node selector). An eviction (Kueue's preemption, a
deactivation) is a preemption to the job: its workers are asked for a checkpoint, stopped
within preemptionGraceSeconds, and once they are gone the quota is given back, so Kueue
queues the Workload again. When the job ends its Workload is finished. A job without the
label is untouched.

Level-based like the rest: every pass reads the Workload as it is; nothing is remembered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from goodput_operator.api.conditions import set_condition
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.decide.gang import JobDecision, fabric_of
from goodput_operator.decide.snapshot import Snapshot
from goodput_operator.decide.types import ConditionUpdate, Quota
from goodput_operator.resources import workload as kueue
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import is_active

Obj = dict[str, Any]


def quota_for(job: Obj, spec: TrainingJobSpec, fabric: Fabric, pods: Sequence[Obj],
              workloads: Mapping[tuple[str, str], Obj],
              flavors: Mapping[str, Mapping[str, str]], served: bool, at: str) -> Quota:
    """JOB (under Kueue) as its Workload stands. PODS: the job's pods; WORKLOADS and
    FLAVORS: what the cluster holds (flavor -> its node labels); SERVED: whether the
    cluster serves Kueue's Workload API at all; AT: the pass's time, stamped."""
    meta = job["metadata"]
    name = kueue.workload_name(job)
    wl = workloads.get((meta["namespace"], name))

    def held(reason: str, message: str, **more: Any) -> Quota:
        return Quota(name, True, ConditionUpdate("Admitted", False, reason, message), **more)

    if wl is None:
        if not served:
            return held("KueueUnavailable", "the job names a Kueue queue but this cluster "
                        "serves no Kueue Workloads (kueue.x-k8s.io/v1beta2): it waits")
        if not kueue.queue_of(job):
            return held("WorkloadMissing", f"waiting for Workload {name}, which MultiKueue "
                        "creates with the job")
        return held("Queued", f"waiting for Kueue: Workload {name} created in LocalQueue "
                    f"{kueue.queue_of(job)}", create=kueue.workload(job, spec, fabric))
    admission = (wl.get("status") or {}).get("admission") or {}
    queue = admission.get("clusterQueue") or ""
    finished = kueue.condition(wl, "Finished")
    if finished is not None:
        return held("Finished", f"Workload {name} is finished: {finished.get('message', '')}")
    evicted = kueue.condition(wl, "Evicted")
    if evicted is not None and kueue.condition(wl, "QuotaReserved") is not None:
        why = (f"evicted from ClusterQueue {queue}: {evicted.get('reason')}: "
               f"{evicted.get('message', '')}")[:1024]
        if any(is_active(p) for p in pods) or (job.get("status") or {}).get("placement"):
            return Quota(name, False, ConditionUpdate("Admitted", False, "Evicted", why),
                         evicted=why)
        return held("Evicted", f"{why}; quota given back, queued again", target=wl,
                    patch=kueue.released(wl, evicted, at))
    if kueue.condition(wl, "Admitted") is None:
        pending = next((c for c in (wl.get("status") or {}).get("conditions") or []
                        if c.get("type") == "QuotaReserved"), None)
        detail = f": {pending['message']}" if pending and pending.get("message") else ""
        return held("Queued", f"waiting for Kueue to admit Workload {name}{detail}"[:1024])
    labels, missing = _node_labels(admission, flavors)
    if missing:
        return held("Admitted", f"admitted by ClusterQueue {queue}; waiting to read "
                    f"ResourceFlavor(s) {', '.join(missing)}")
    said = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return Quota(name, False, ConditionUpdate(
        "Admitted", True, "Admitted",
        f"admitted by ClusterQueue {queue}" + (f" on nodes {said}" if said else "")),
        node_labels=labels)


def _node_labels(admission: Obj, flavors: Mapping[str, Mapping[str, str]]
                 ) -> tuple[dict[str, str], list[str]]:
    """The node labels of the flavors assigned to the workers' pod set (and, if unknown
    yet, which flavors)."""
    labels: dict[str, str] = {}
    missing: list[str] = []
    for assigned in admission.get("podSetAssignments") or []:
        if assigned.get("name") != kueue.WORKERS:
            continue
        for flavor in sorted(set((assigned.get("flavors") or {}).values())):
            if flavor in flavors:
                labels.update(flavors[flavor])
            else:
                missing.append(flavor)
    return labels, missing


def finish(quota: Quota, workloads: Mapping[tuple[str, str], Obj], namespace: str,
           phase: str, message: str, at: str) -> None:
    """The job ended (PHASE): finish its Workload, once."""
    wl = workloads.get((namespace, quota.workload))
    if wl is not None and kueue.condition(wl, "Finished") is None:
        quota.target = wl
        quota.patch = kueue.finished(wl, phase == "Succeeded", message, at)


def decide_delegated(snapshot: Snapshot, job: Obj, at: str) -> JobDecision:
    """A job MultiKueue runs on a worker cluster (spec.managedBy on the manager): its
    Workload is made here and nothing else; its status is MultiKueue's, copied from the
    worker. Without a queue label nothing would ever run it: that is said instead."""
    meta, status = job["metadata"], job.get("status") or {}
    conditions = list(status.get("conditions") or [])

    def said(reason: str, message: str) -> JobDecision:
        return JobDecision(job, status, {
            "phase": "Pending", "message": message,
            "conditions": set_condition(conditions, "Admitted", False, reason, message,
                                        meta.get("generation"), at)})

    if not kueue.queue_of(job):
        return said("NoQueue", f"spec.managedBy is {kueue.MULTIKUEUE} but the job has no "
                    f"{kueue.QUEUE_LABEL} label: MultiKueue sends it nowhere")
    if not snapshot.kueue:
        return said("KueueUnavailable", "spec.managedBy is kueue.x-k8s.io/multikueue but "
                    "this cluster serves no Kueue Workloads (kueue.x-k8s.io/v1beta2)")
    name = kueue.workload_name(job)
    wl = snapshot.workloads.get((meta["namespace"], name))
    if wl is not None:
        if status.get("cluster") or ((wl.get("status") or {}).get("clusterName")):
            return JobDecision(job, status, {})  # a worker runs it: the status is its
        return said("Queued", f"waiting for MultiKueue: {_dispatch(wl)}")
    try:
        spec = TrainingJobSpec.model_validate(job["spec"])
    except ValidationError:  # admission refuses these; nothing to count quota by
        return JobDecision(job, status, {})
    if spec.ultra_server_group not in snapshot.groups:
        return said("UltraServerGroupNotFound", f"the Workload counts the accelerators of "
                    f"UltraServerGroup {spec.ultra_server_group!r}: create it here too (its "
                    "spec; no nodes need match)")
    return JobDecision(job, status, {}, quota=Quota(
        name, True, ConditionUpdate("Admitted", False, "Queued", ""),
        create=kueue.workload(job, spec, fabric_of(snapshot, spec))))


def _dispatch(wl: Obj) -> str:
    """Where a manager's Workload stands before a worker cluster runs it."""
    status = wl.get("status") or {}
    name = wl["metadata"]["name"]
    if kueue.condition(wl, "QuotaReserved") is None:
        pending = next((c for c in status.get("conditions") or []
                        if c.get("type") == "QuotaReserved"), None)
        detail = f": {pending['message']}" if pending and pending.get("message") else ""
        return f"Workload {name} has no quota in this cluster yet{detail}"[:1024]
    checks = "; ".join(f"{c.get('name')}: {c.get('state')}"
                       + (f" ({c['message']})" if c.get("message") else "")
                       for c in status.get("admissionChecks") or [])
    sent = ", ".join(status.get("nominatedClusterNames") or [])
    return (f"Workload {name} reserved quota here"
            + (f", offered to {sent}" if sent else "")
            + (f"; {checks}" if checks else "") + "; no worker cluster admitted it yet")[:1024]
