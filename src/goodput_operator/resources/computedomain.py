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


def domain_name(base: str) -> str:
    """The ComputeDomain of a job (BASE: its name) or of an endpoint's replica."""
    return child_name(base, "-imex")


def channel_template(domain: str) -> str:
    """The ResourceClaimTemplate the driver creates for DOMAIN (its name plus `-channel`:
    a pod's claim names the domain it joins)."""
    return f"{domain}-channel"


def compute_domain(namespace: str, domain: str, labels: dict[str, str], owner_ref: Obj) -> Obj:
    """The ComputeDomain DOMAIN. numNodes 0: as the driver recommends (its IMEX daemons
    start without waiting for peers, and the spec is immutable: a count would be wrong
    after a replacement or an elastic resize)."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": domain, "namespace": namespace, "labels": labels,
                         "ownerReferences": [owner_ref]},
            "spec": {"numNodes": 0, "channel": {
                "resourceClaimTemplate": {"name": channel_template(domain)},
                "allocationMode": "Single"}}}


def claim_channel(pod_spec: Obj, domain: str) -> None:
    """Give POD_SPEC (its first container: the one holding the GPUs) a claim on DOMAIN's
    IMEX channel."""
    claims = [c for c in pod_spec.get("resourceClaims") or [] if c.get("name") != CLAIM]
    pod_spec["resourceClaims"] = [*claims, {"name": CLAIM, "resourceClaimTemplateName":
                                            channel_template(domain)}]
    resources = pod_spec["containers"][0].setdefault("resources", {})
    held = [c for c in resources.get("claims") or [] if c.get("name") != CLAIM]
    resources["claims"] = [*held, {"name": CLAIM}]


def domains_claimed(pods: list[Obj]) -> list[str]:
    """The ComputeDomains PODS join (each once, in order)."""
    found: dict[str, None] = {}
    for pod in pods:
        for claim in pod["spec"].get("resourceClaims") or []:
            if claim.get("name") == CLAIM:
                found[str(claim["resourceClaimTemplateName"]).removesuffix("-channel")] = None
    return list(found)
