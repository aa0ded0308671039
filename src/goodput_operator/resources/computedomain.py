"""IMEX compute domains for multi-node NVLink (GB200/GB300 NVL72): pure builders.

A gang spanning several nodes of one NVLink domain can share GPU memory across them only
through IMEX, which NVIDIA's DRA driver sets up per `ComputeDomain`
(resource.nvidia.com/v1beta1). The operator creates one per TrainingJob, owned by the job
(deleted with it); the driver answers with a ResourceClaimTemplate of the name the domain
gives, and each pod holding GPUs claims its IMEX channel through it. A replacement pod
names the same template, so it joins the same domain wherever it lands.
"""

from __future__ import annotations

from typing import Any

from goodput_operator.resources.pods import child_name

Obj = dict[str, Any]
GROUP, VERSION, PLURAL, KIND = "resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain"
CLAIM = "imex-channel"  # the pod's name for its claim on the domain's channel


def domain_name(job_name: str) -> str:
    return child_name(job_name, "-imex")


def channel_template(job_name: str) -> str:
    """The ResourceClaimTemplate the driver creates for the job's domain."""
    return child_name(job_name, "-imex-channel")


def compute_domain(owner: Obj, labels: dict[str, str], owner_ref: Obj) -> Obj:
    """OWNER's ComputeDomain. numNodes 0: as the driver recommends (its IMEX daemons start
    without waiting for peers, and the spec is immutable: a count would be wrong after a
    replacement or an elastic resize)."""
    meta = owner["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": domain_name(meta["name"]), "namespace": meta["namespace"],
                         "labels": labels, "ownerReferences": [owner_ref]},
            "spec": {"numNodes": 0, "channel": {
                "resourceClaimTemplate": {"name": channel_template(meta["name"])},
                "allocationMode": "Single"}}}


def claim_channel(pod_spec: Obj, job_name: str) -> None:
    """Give POD_SPEC (its first container: the one holding the GPUs) a claim on the job's
    IMEX channel."""
    claims = [c for c in pod_spec.get("resourceClaims") or [] if c.get("name") != CLAIM]
    pod_spec["resourceClaims"] = [*claims, {"name": CLAIM, "resourceClaimTemplateName":
                                            channel_template(job_name)}]
    resources = pod_spec["containers"][0].setdefault("resources", {})
    held = [c for c in resources.get("claims") or [] if c.get("name") != CLAIM]
    resources["claims"] = [*held, {"name": CLAIM}]


def claims_channel(pod: Obj) -> bool:
    return any(c.get("name") == CLAIM for c in pod["spec"].get("resourceClaims") or [])
