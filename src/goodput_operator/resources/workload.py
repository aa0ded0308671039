"""The Kueue Workload of a TrainingJob, and the status changes the operator makes to it.

Kueue builds the Workloads of the jobs it integrates itself; a TrainingJob is an *external
framework* to Kueue, so its Workload is ours to make (one pod set for the workers, one per
companion pod set, each with the pod its quota is counted from), ours to release after an
eviction once the workers are gone, and ours to finish when the job ends: what Kueue's job
reconciler does for a batch Job.
"""

from __future__ import annotations

import hashlib
from typing import Any

from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric

Obj = dict[str, Any]
API_VERSION = "kueue.x-k8s.io/v1beta2"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
RESOURCE_FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"  # set by MultiKueue on a worker
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # spec.managedBy: the job runs on a worker
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # how Kueue's messages name the job
WORKERS = "workers"  # the workers' pod set


def workload_name(job: Obj) -> str:
    """The job's Workload: the one MultiKueue made for it (on a worker cluster), else a
    name of our own that a job recreated under the same name never shares."""
    meta = job["metadata"]
    prebuilt = (meta.get("labels") or {}).get(PREBUILT_LABEL)
    if prebuilt:
        return str(prebuilt)
    digest = hashlib.sha256(str(meta.get("uid", "")).encode()).hexdigest()[:5]
    return f"trainingjob-{meta['name'][:200]}-{digest}"


def queue_of(job: Obj) -> str | None:
    return (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)


def under_kueue(job: Obj) -> bool:
    """Kueue holds this job's quota: it names a queue, or MultiKueue sent it here."""
    labels = job["metadata"].get("labels") or {}
    return bool(labels.get(QUEUE_LABEL) or labels.get(PREBUILT_LABEL))


def _counted(pod: Obj) -> Obj:
    """What Kueue counts of a pod: its containers' requests and where it may run."""
    spec = pod["spec"]
    keep = ("nodeSelector", "tolerations", "affinity", "priorityClassName")
    counted: Obj = {k: spec[k] for k in keep if spec.get(k)}
    for kind in ("initContainers", "containers"):
        if spec.get(kind):
            counted[kind] = [{"name": c["name"], "image": c.get("image") or "none",
                              "resources": {k: v for k, v in (c.get("resources") or {}).items()
                                            if k in ("requests", "limits")}}
                             for c in spec[kind]]
    return {"spec": counted}


def workload(job: Obj, spec: TrainingJobSpec, fabric: Fabric) -> Obj:
    """The Workload Kueue admits JOB by: owned by the job (deleted with it), in the queue
    its label names, at the job's priority."""
    meta = job["metadata"]
    worker = build.worker_pod(job, 0, 0, fabric, spec=spec)
    pod_sets = [{"name": WORKERS, "count": spec.workers, "template": _counted(worker)}]
    pod_sets += [{"name": s.name, "count": s.replicas,
                  "template": _counted(build.companion_pod(job, s, 0, 0, fabric, spec=spec))}
                 for s in spec.pod_sets]
    body: Obj = {
        "apiVersion": API_VERSION, "kind": "Workload",
        "metadata": {"name": workload_name(job), "namespace": meta["namespace"],
                     "labels": {JOB_UID_LABEL: meta["uid"]},
                     "ownerReferences": [build.owner_reference(job)]},
        "spec": {"podSets": pod_sets, "priority": spec.priority},
    }
    queue = queue_of(job)
    if queue:
        body["spec"]["queueName"] = queue
    return body


def condition(wl: Obj | None, kind: str) -> Obj | None:
    """WL's condition KIND when it is True."""
    for found in ((wl or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == kind and found.get("status") == "True":
            return dict(found)
    return None


def _set(conditions: list[Obj], kind: str, status: bool, reason: str, message: str,
         at: str, generation: int | None) -> list[Obj]:
    kept = [c for c in conditions if c.get("type") != kind]
    previous = next((c for c in conditions if c.get("type") == kind), None)
    value = "True" if status else "False"
    since = previous["lastTransitionTime"] if previous is not None and \
        previous.get("status") == value else at
    new: Obj = {"type": kind, "status": value, "reason": reason, "message": message[:32768],
                "lastTransitionTime": since}
    if generation is not None:
        new["observedGeneration"] = generation
    return [*kept, new]


def finished(wl: Obj, succeeded: bool, message: str, at: str) -> Obj:
    """The status patch that finishes WL (Kueue then frees its quota; under MultiKueue,
    the manager copies the job's status and finishes its own Workload)."""
    status = wl.get("status") or {}
    reason = "Succeeded" if succeeded else "Failed"
    return {"conditions": _set(list(status.get("conditions") or []), "Finished", True,
                               reason, message or reason, at,
                               wl["metadata"].get("generation"))}


def released(wl: Obj, evicted: Obj, at: str) -> Obj:
    """The status patch that gives back WL's quota after an eviction, once the workers are
    gone (as Kueue's job reconciler does): Kueue then queues it again."""
    status = wl.get("status") or {}
    generation = wl["metadata"].get("generation")
    message = str(evicted.get("message") or "evicted")
    conditions = list(status.get("conditions") or [])
    conditions = _set(conditions, "Requeued", evicted.get("reason") in (
        "Preempted", "NodeFailures"), str(evicted.get("reason") or "Evicted"), message, at,
        generation)
    conditions = _set(conditions, "QuotaReserved", False, "Pending", message, at, generation)
    if any(c.get("type") == "Admitted" for c in conditions):
        conditions = _set(conditions, "Admitted", False, "NoReservation",
                          "The workload has no reservation", at, generation)
    return {"conditions": conditions, "admission": None}
