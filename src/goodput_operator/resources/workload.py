"""The Kueue Workload of a TrainingJob or an InferenceEndpoint, and the status changes the
operator makes to it.

Kueue builds the Workloads of the jobs it integrates itself; our kinds are *external
frameworks* to Kueue, so their Workloads are ours to make (one pod set for the workers, one per
companion pod set, each with the pod its quota is counted from), ours to release after an
eviction once the workers are gone, and ours to finish when the job ends: what Kueue's job
reconciler does for a batch Job.
"""

from __future__ import annotations

import hashlib
from typing import Any

from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.resources import inference
from goodput_operator.resources import trainingjob as build
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import controller_of

Obj = dict[str, Any]
API_VERSION = "kueue.x-k8s.io/v1beta2"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
RESOURCE_FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
WORKLOAD_PRIORITY_CLASSES = "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"  # set by MultiKueue on a worker
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # spec.managedBy: the job runs on a worker
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # how Kueue's messages name the job
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"  # MultiKueue's mark on what it creates
WORKERS = "workers"  # the workers' pod set
REPLICA = "replica"  # an endpoint's pod set: its replica groups' pods


def workload_name(obj: Obj) -> str:
    """OBJ's Workload: the one MultiKueue made for it (on a worker cluster), else a name of
    our own that an object recreated under the same name never shares."""
    meta = obj["metadata"]
    prebuilt = (meta.get("labels") or {}).get(PREBUILT_LABEL)
    if prebuilt:
        return str(prebuilt)
    digest = hashlib.sha256(str(meta.get("uid", "")).encode()).hexdigest()[:5]
    return f"{str(obj.get('kind') or 'TrainingJob').lower()}-{meta['name'][:200]}-{digest}"


def owner_key(obj: Obj) -> tuple[str, str, str]:
    """OBJ by kind (as workload_name reads it), namespace and name."""
    meta = obj["metadata"]
    return str(obj.get("kind") or "TrainingJob"), meta["namespace"], meta["name"]


def queue_of(obj: Obj) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL)


def under_kueue(obj: Obj) -> bool:
    """Kueue holds OBJ's quota: it names a queue, or MultiKueue sent it here."""
    labels = obj["metadata"].get("labels") or {}
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


def workload(job: Obj, spec: TrainingJobSpec, fabric: Fabric, priority: int = 0,
             class_ref: Obj | None = None) -> Obj:
    """The Workload Kueue admits JOB by, at PRIORITY: its class's value, the class named
    by CLASS_REF (decide.priority; spec.priority orders only the namespace's own jobs, so
    Kueue never sees it)."""
    worker = build.worker_pod(job, 0, 0, fabric, spec=spec)
    counts = job_pod_counts(spec)
    pod_sets = [{"name": WORKERS, "count": counts[WORKERS], "template": _counted(worker)}]
    pod_sets += [{"name": s.name, "count": counts[s.name],
                  "template": _counted(build.companion_pod(job, s, 0, 0, fabric, spec=spec))}
                 for s in spec.pod_sets]
    body = _workload(job, build.owner_reference(job), pod_sets, priority)
    if class_ref is not None:
        body["spec"]["priorityClassRef"] = class_ref
    return body


def endpoint_workload(ie: Obj, spec: InferenceEndpointSpec, fabric: Fabric) -> Obj:
    """The Workload of IE: a pod set per role ("replica" for one role) counting every
    replica it may run (scaling.maxReplicas when it scales: the quota must hold what the
    autoscaler may ask for). A replica of a multi-region endpoint is an endpoint of one
    replica: Kueue admits those one by one, as it does LeaderWorkerSet groups."""
    counts = endpoint_pod_counts(spec)
    pod_sets = [{"name": role.name or REPLICA, "count": counts[role.name or REPLICA],
                 "template": _counted(inference.group_pods(ie, spec, 0, "0", fabric, role)[0])}
                for role in spec.serving_roles()]
    return _workload(ie, inference.owner_reference(ie), pod_sets, 0)


def job_pod_counts(spec: TrainingJobSpec) -> dict[str, int]:
    """The pods of each pod set of a job's Workload: the workers, then each companion set."""
    return {WORKERS: spec.workers, **{s.name: s.replicas for s in spec.pod_sets}}


def endpoint_pod_counts(spec: InferenceEndpointSpec) -> dict[str, int]:
    """Each role's pods at the most replicas it may run (what the quota must hold)."""
    return {role.name or REPLICA: role.shape.workers * max(1, role.scaling.max_replicas
                                                           if role.scaling else
                                                           role.desired_default())
            for role in spec.serving_roles()}


def pod_counts(wl: Obj) -> dict[str, Any]:
    """What WL's pod sets count, by name (as the watch keeps them: workloads' slim)."""
    return {str(s.get("name")): s.get("count") for s in (wl.get("spec") or {}).get("podSets")
            or [] if isinstance(s, dict)}


def not_owned(obj: Obj, wl: Obj) -> str | None:
    """Why WL is not OBJ's to run under and to finish (TENANCY.md rule 3), or None: its
    controller must be OBJ by UID, as the operator made it. Without a controller, it must
    be MultiKueue's copy for OBJ on a worker cluster: OBJ names it by the prebuilt label
    and both carry MultiKueue's origin mark. A label never makes another's Workload ours."""
    meta, wl_meta = obj["metadata"], wl.get("metadata") or {}
    controller = controller_of(wl)
    if controller is not None:
        if controller.get("uid") == meta.get("uid"):
            return None
        return (f"Workload {wl_meta.get('name')} belongs to {controller.get('kind')} "
                f"{controller.get('name')} (uid {controller.get('uid')}), not to this one")
    labels, wl_labels = meta.get("labels") or {}, wl_meta.get("labels") or {}
    origin = wl_labels.get(ORIGIN_LABEL)
    if labels.get(PREBUILT_LABEL) == wl_meta.get("name") and origin and \
            labels.get(ORIGIN_LABEL) == origin:
        return None
    return (f"Workload {wl_meta.get('name')} has no owner and is not MultiKueue's copy for "
            "this object")


def _workload(owner: Obj, reference: Obj, pod_sets: list[Obj], priority: int) -> Obj:
    """Owned by OWNER (deleted with it), in the queue its label names."""
    meta = owner["metadata"]
    body: Obj = {
        "apiVersion": API_VERSION, "kind": "Workload",
        "metadata": {"name": workload_name(owner), "namespace": meta["namespace"],
                     "labels": {JOB_UID_LABEL: meta["uid"]},
                     "ownerReferences": [reference]},
        "spec": {"podSets": pod_sets, "priority": priority},
    }
    queue = queue_of(owner)
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
