"""Pure builders for a TrainingJob's children: headless Service, disruption budget,
hostfile ConfigMap, pods.

Pods of a job without a placement are born gated (`schedulingGates`) so that no worker
starts before the whole gang is placed; pinning adds a required node affinity on the
placed host (the scheduler still checks resources) and removes the gate. Pods created
after the placement is recorded are created pinned (`pinned`): one write instead of two.
Ranks equal pod indexes: pod w{i} is rank i and is pinned to the i-th host of the
placement, which is in fabric order.
"""

from __future__ import annotations

import copy
from typing import Any

from goodput_operator import names
from goodput_operator.api.base import API_VERSION
from goodput_operator.api.statuses import CheckpointRefDict
from goodput_operator.api.trainingjob import PodSet, TrainingJobSpec
from goodput_operator.resources import claims
from goodput_operator.resources.claims import claim_accelerators
from goodput_operator.resources.computedomain import claim_channel, domain_name
from goodput_operator.resources.fabric import Fabric
from goodput_operator.resources.pods import child_name, template_metadata

MANAGED_BY = {"app.kubernetes.io/managed-by": "goodput-operator"}
HOSTFILE_DIR = "/etc/goodput"
REPORT_CA_FILE = "report-ca.crt"  # beside the hostfile: the report channel's CA bundle
REPORT_CA_PATH = f"{HOSTFILE_DIR}/{REPORT_CA_FILE}"  # where workers and probes find it

Obj = dict[str, Any]


def owner_reference(job: Obj) -> Obj:
    meta = job["metadata"]
    return {"apiVersion": API_VERSION, "kind": "TrainingJob", "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def service_name(job_name: str) -> str:
    return child_name(job_name, dns_label=True)


def hostfile_name(job_name: str) -> str:
    return child_name(job_name, "-hostfile")


def pod_name(job_name: str, restart: int, index: int) -> str:
    return child_name(job_name, f"-r{restart}-w{index}")


def hostname(index: int) -> str:
    return f"w{index}"


def worker_dns(job: Obj, index: int) -> str:
    meta = job["metadata"]
    return f"{hostname(index)}.{service_name(meta['name'])}.{meta['namespace']}.svc"


def selector(job_name: str) -> dict[str, str]:
    return {names.JOB_LABEL: job_name}


def service(job: Obj, spec: TrainingJobSpec | None = None) -> Obj:
    """Headless Service giving each worker a stable DNS name (w{i}.<job>.<ns>.svc). SPEC:
    the job's parsed spec (its view's), when the caller has it."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service_name(name), "namespace": job["metadata"]["namespace"],
                     "labels": {**selector(name), **MANAGED_BY},
                     "ownerReferences": [owner_reference(job)]},
        "spec": {"clusterIP": "None", "selector": selector(name),
                 "publishNotReadyAddresses": True,
                 "ports": [{"name": "rendezvous", "port": (spec or _spec(job)).launcher.port}]},
    }


def disruption_budget(job: Obj, spec: TrainingJobSpec | None = None) -> Obj:
    """A PodDisruptionBudget that lets no eviction take a running worker: a drain
    (`kubectl drain`, Karpenter, the cluster autoscaler) cordons the node first, which the
    operator reads as a notice (decide.noticing): the gang saves, the operator moves the
    node's ranks off it by deleting their pods (a delete, which no budget holds back) and
    the drain's retried evictions then find nothing left. So a drain waits for the save,
    for the notice's deadline at most, instead of restarting the gang as a lost node would.

    `minAvailable` is every pod the gang can have (workers, the most elastic allows, and
    its pod sets), a number: `maxUnavailable` or a percentage would make the disruption
    controller look for a scale subresource on the TrainingJob, which it has none of. Pods
    not Ready may always be evicted: a gang that is not running has nothing to save."""
    name = job["metadata"]["name"]
    spec = spec or _spec(job)
    pods = spec.workers + sum(pod_set.replicas for pod_set in spec.pod_sets)
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": job["metadata"]["namespace"],
                     "labels": {**selector(name), **MANAGED_BY},
                     "ownerReferences": [owner_reference(job)]},
        "spec": {"minAvailable": pods, "selector": {"matchLabels": selector(name)},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }


def claim_sources(job: Obj, pods: list[Obj], device_class: str | None) -> list[Obj]:
    """What PODS' claims are made from, created before them (resources.claims)."""
    return claims.claim_sources(job, pods, device_class,
                                {**selector(job["metadata"]["name"]), **MANAGED_BY},
                                owner_reference(job), job["metadata"]["name"])


def hostfile(job: Obj, workers: int, report_ca: str = "",
             spec: TrainingJobSpec | None = None) -> Obj:
    """The hostfile of WORKERS ranks in rank order, MPI style: `w<rank>.<service>
    slots=<procs>` per line. The names are relative to the job's namespace (every pod
    resolves them through its namespace's search domain), so that an 8192-worker gang's
    hostfile stays well inside a ConfigMap's 1 MiB whatever its name and namespace; the
    placed nodes are in status.placement. REPORT_CA, the CA bundle the workers check the
    report channel's TLS against (REPORT_CA_FILE), when served over https. SPEC: as
    `service`."""
    spec = spec or _spec(job)
    slots = spec.launcher.procs_per_worker or spec.accelerators_per_worker
    service = service_name(job["metadata"]["name"])
    lines = [f"{hostname(i)}.{service} slots={slots}" for i in range(workers)]
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": hostfile_name(job["metadata"]["name"]),
                     "namespace": job["metadata"]["namespace"],
                     "labels": {**selector(job["metadata"]["name"]), **MANAGED_BY},
                     "ownerReferences": [owner_reference(job)]},
        "data": {"hostfile": "\n".join(lines) + "\n",
                 **({REPORT_CA_FILE: report_ca} if report_ca else {})},
    }


def launcher_env(job: Obj, spec: TrainingJobSpec, index: int, restart: int,
                 resume: CheckpointRefDict | None, report_url: str = "", workers: int | None = None
                 ) -> list[Obj]:
    """The worker's environment. WORKERS is the gang's size in this attempt (an elastic job
    may run with fewer than spec.workers after a shrink); RESUME the checkpoint it resumes
    from (step, path, digest: the SDK verifies what it loads against the digest)."""
    meta = job["metadata"]
    procs = spec.launcher.procs_per_worker or spec.accelerators_per_worker
    master = worker_dns(job, 0)
    workers = workers or spec.workers
    resume = resume or {}
    env: dict[str, str] = {
        names.ENV_JOB: f"{meta['namespace']}/{meta['name']}",
        names.ENV_RESTART: str(restart),
        names.ENV_RANK: str(index),
        names.ENV_WORKERS: str(workers),
        names.ENV_CHECKPOINT_DIR: spec.checkpoint.dir or "",
        **({names.ENV_CHECKPOINT_SHARED: spec.checkpoint.shared_dir}
           if spec.checkpoint.shared_dir else {}),
        names.ENV_RESUME_FROM: resume.get("path") or "",
        names.ENV_RESUME_STEP: str(resume["step"]) if "step" in resume else "",
        names.ENV_RESUME_DIGEST: resume.get("digest") or "",
        names.ENV_HOSTFILE: f"{HOSTFILE_DIR}/hostfile",
        names.ENV_REPORT_URL: report_url,
        names.ENV_REPORT_TOKEN: names.REPORT_TOKEN_PATH,
    }
    if report_url.startswith("https://"):  # the operator puts its CA beside the hostfile
        env[names.ENV_REPORT_CA] = REPORT_CA_PATH
    if spec.launcher.type in ("torchrun", "neuron"):
        env |= {
            "MASTER_ADDR": master, "MASTER_PORT": str(spec.launcher.port),
            "NNODES": str(workers), "NODE_RANK": str(index),
            "NPROC_PER_NODE": str(procs), "WORLD_SIZE": str(workers * procs),
            # global rank of this worker's first process; torchrun sets it per process
            "RANK": str(index * procs),
        }
    if spec.launcher.type == "mpi":  # Open MPI's mpirun (4: ORTE, 5: PRRTE) finds the gang
        hostfile = f"{HOSTFILE_DIR}/hostfile"
        env |= {"OMPI_MCA_orte_default_hostfile": hostfile,
                "PRTE_MCA_prte_default_hostfile": hostfile,
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true"}
    if spec.launcher.type == "neuron":
        env["NEURON_RT_ROOT_COMM_ID"] = f"{master}:{spec.launcher.port + 1}"
    if spec.launcher.type == "jax":
        env |= tpu_env(job, spec, index, workers)
    return [{"name": key, "value": value} for key, value in env.items()] + \
        credentials_env(spec.checkpoint.credentials_secret)


def tpu_env(job: Obj, spec: TrainingJobSpec, index: int, workers: int) -> dict[str, str]:
    """What JAX reads on a TPU slice (GKE's TPU webhook sets the same for indexed Jobs, not
    for these pods): the worker's id in its slice and the slice's hosts in rank order; over
    several slices (topology.slice) the Megascale variables that join them, slice 0's first
    host coordinating. Ranks run slice by slice, as JAX numbers its processes."""
    size = spec.topology.slice.size if spec.topology.slice else workers
    slice_id, worker = divmod(index, size)
    env = {"TPU_WORKER_ID": str(worker),
           "TPU_WORKER_HOSTNAMES": ",".join(worker_dns(job, slice_id * size + i)
                                            for i in range(size))}
    if workers > size:
        env |= {"MEGASCALE_COORDINATOR_ADDRESS": worker_dns(job, 0),
                "MEGASCALE_PORT": str(spec.launcher.port),
                "MEGASCALE_NUM_SLICES": str(workers // size),
                "MEGASCALE_SLICE_ID": str(slice_id)}
    return env


STORE_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
              ("AWS_SESSION_TOKEN", True), ("AWS_REGION", True), ("AWS_ENDPOINT_URL", True))


def credentials_env(secret: str | None) -> list[Obj]:
    """The object store's credentials from SECRET (checkpoint.credentialsSecret), as the
    AWS SDKs and goodput_operator.sdk read them: the keys required, the rest optional."""
    if not secret:
        return []
    return [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key,
                                                         "optional": optional}}}
            for key, optional in STORE_KEYS]


def worker_pod(job: Obj, index: int, restart: int, fabric: Fabric,
               resume: CheckpointRefDict | None = None, spec: TrainingJobSpec | None = None,
               report_url: str = "", workers: int | None = None) -> Obj:
    """Worker `index` of attempt `restart` of a gang of WORKERS (default spec.workers):
    gated, with rank environment, the hostfile and a projected token for the report channel
    (goodput_operator.sdk reads both), its accelerators and share of EFA (FABRIC). RESUME:
    the checkpoint record to resume from. SPEC is the already parsed job spec, when the
    caller has it (one parse per pass, not one per pod)."""
    spec = spec or _spec(job)
    env = launcher_env(job, spec, index, restart, resume, report_url, workers)
    return _gang_pod(job, copy.deepcopy(job["spec"]["template"]),
                     pod_name(job["metadata"]["name"], restart, index), hostname(index),
                     {names.RANK_LABEL: str(index), names.RESTART_LABEL: str(restart)},
                     env, fabric, spec.accelerators_per_worker, spec.node_selector,
                     spec.launcher.type, multi_node=spec.workers > 1)


def companion_pod(job: Obj, pod_set: PodSet, index: int, restart: int, fabric: Fabric,
                  resume: CheckpointRefDict | None = None, spec: TrainingJobSpec | None = None,
                  report_url: str = "", workers: int | None = None) -> Obj:
    """Pod INDEX of the companion POD_SET (spec.podSets) in attempt RESTART: the gang's
    environment without a rank (GOODPUT_POD_SET and GOODPUT_POD_INDEX instead), its own
    template, accelerators and node selector; gated like the workers."""
    spec = spec or _spec(job)
    env = [e for e in launcher_env(job, spec, 0, restart, resume, report_url, workers)
           if e["name"] not in _RANKED]
    env += [{"name": names.ENV_POD_SET, "value": pod_set.name},
            {"name": names.ENV_POD_INDEX, "value": str(index)}]
    raw: Obj = next((s for s in job["spec"].get("podSets") or []
                     if s.get("name") == pod_set.name), {})  # the template as written
    template = copy.deepcopy(raw.get("template") or job["spec"]["template"])
    selector_ = {**(spec.node_selector or {}), **(pod_set.node_selector or {})}
    return _gang_pod(job, template,
                     companion_name(job["metadata"]["name"], restart, pod_set.name, index),
                     companion_host(pod_set.name, index),
                     {names.POD_SET_LABEL: pod_set.name, names.POD_INDEX_LABEL: str(index),
                      names.RESTART_LABEL: str(restart)},
                     env, fabric, pod_set.accelerators_per_pod, selector_ or None,
                     spec.launcher.type, multi_node=True)


_RANKED = {names.ENV_RANK, "NODE_RANK", "RANK"}  # a companion has no rank in the gang


def companion_name(job_name: str, restart: int, pod_set: str, index: int) -> str:
    return child_name(job_name, f"-r{restart}-{pod_set}-{index}")


def companion_host(pod_set: str, index: int) -> str:
    return f"{pod_set}-{index}"


def _gang_pod(job: Obj, template: Obj, name: str, host: str,
              identity: dict[str, str], env: list[Obj], fabric: Fabric, accelerators: int,
              node_selector: dict[str, str] | None, launcher: str,
              multi_node: bool = False) -> Obj:
    """A pod of the gang (a worker or a companion): TEMPLATE with the job's labels and
    IDENTITY, ENV in every container (and the fabric's settings where the template does
    not set them), the hostfile and report token mounted, ACCELERATORS and their share of
    EFA on the first container (and, MULTI_NODE on NVLink, the job's IMEX channel), a host
    name in the job's service, gated until placed; a failed container's last log lines kept
    as its termination message where the template chose no policy."""
    meta = job["metadata"]
    pod_spec: Obj = template.setdefault("spec", {})
    labels = {**template_metadata(template, "labels"), **selector(meta["name"]), **identity,
              **MANAGED_BY}
    annotations = template_metadata(template, "annotations")
    fabric.fit_out(pod_spec["containers"], env, launcher, accelerators)
    for container in pod_spec["containers"]:
        # a failed worker's last log lines become its termination message, which the
        # incident quotes (health.failures); a template's own policy is kept
        container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
        mounts = container.setdefault("volumeMounts", [])
        mounts.append({"name": "goodput-hostfile", "mountPath": HOSTFILE_DIR, "readOnly": True})
        mounts.append({"name": "goodput-report-token", "readOnly": True,
                       "mountPath": names.REPORT_TOKEN_PATH.rsplit("/", 1)[0]})
    pod_spec.setdefault("volumes", []).extend([
        {"name": "goodput-hostfile", "configMap": {"name": hostfile_name(meta["name"])}},
        {"name": "goodput-report-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": names.REPORT_AUDIENCE, "expirationSeconds": 3600,
            "path": names.REPORT_TOKEN_PATH.rsplit("/", 1)[1]}}]}}])
    if fabric.imex and multi_node and accelerators:
        claim_channel(pod_spec, domain_name(meta["name"]))
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(job)]},
        "spec": pod_spec,
    }
    if fabric.device_class and accelerators:
        claim_accelerators(pod, meta["name"], accelerators)
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = host
    pod_spec["subdomain"] = service_name(meta["name"])
    pod_spec["schedulingGates"] = [{"name": names.PLACEMENT_GATE}]
    if node_selector:
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
    return pod


def _spec(job: Obj) -> TrainingJobSpec:
    """For callers without a view (tests, tools): the operator passes its views' spec."""
    return TrainingJobSpec.model_validate(job["spec"])
