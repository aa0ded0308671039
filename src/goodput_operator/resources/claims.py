"""Accelerators by Dynamic Resource Allocation (resource.k8s.io/v1): pure builders.

With `accelerator.requestStyle: ResourceClaim` a gang pod asks for its devices through a
ResourceClaimTemplate the operator creates for the job, one per device count (the workers'
and each pod set's), owned by the job; kube-controller-manager makes each pod its own claim
from it and kube-scheduler allocates the devices on the node the pod is pinned to.
"""

from __future__ import annotations

from typing import Any

from goodput_operator import names
from goodput_operator.resources.computedomain import compute_domain, domains_claimed
from goodput_operator.resources.pods import child_name

Obj = dict[str, Any]
CLAIM = "accelerators"  # the pod's name for its claim on its devices
KIND = "ResourceClaimTemplate"


def template_name(base: str, count: int) -> str:
    """BASE: the owner's name for a TrainingJob, `<name>-serving` for an InferenceEndpoint
    (resources.inference.claim_base): a job and an endpoint of one name never want the
    same template."""
    return child_name(base, f"-accelerators-{count}")


def accelerator_template(owner: Obj, count: int, device_class: str, labels: dict[str, str],
                         owner_ref: Obj, base: str) -> Obj:
    meta = owner["metadata"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": KIND,
            "metadata": {"name": template_name(base, count),
                         "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": [owner_ref]},
            "spec": {"spec": {"devices": {"requests": [{"name": "devices", "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount",
                "count": count}}]}}}}


def claim_accelerators(pod: Obj, base: str, count: int) -> None:
    """Give POD (its first container) a claim on COUNT devices through the job's template,
    and say how many on the pod, for placement's books."""
    spec = pod["spec"]
    claims = [c for c in spec.get("resourceClaims") or [] if c.get("name") != CLAIM]
    spec["resourceClaims"] = [*claims, {"name": CLAIM, "resourceClaimTemplateName":
                                        template_name(base, count)}]
    resources = spec["containers"][0].setdefault("resources", {})
    held = [c for c in resources.get("claims") or [] if c.get("name") != CLAIM]
    resources["claims"] = [*held, {"name": CLAIM}]
    pod["metadata"].setdefault("annotations", {})[names.ACCELERATORS_ANNOTATION] = str(count)


def claimed_counts(pods: list[Obj]) -> list[int]:
    """The device counts PODS claim through templates (each once, in order)."""
    counts: dict[int, None] = {}
    for pod in pods:
        if any(c.get("name") == CLAIM for c in pod["spec"].get("resourceClaims") or []):
            counts[int(pod["metadata"]["annotations"][names.ACCELERATORS_ANNOTATION])] = None
    return list(counts)


def claim_sources(owner: Obj, pods: list[Obj], device_class: str | None,
                  labels: dict[str, str], owner_ref: Obj, base: str) -> list[Obj]:
    """What PODS' claims are made from, to create before them: OWNER's accelerator claim
    templates (one per device count, with DEVICE_CLASS, named from BASE as the pods'
    claims were: claim_accelerators) and the ComputeDomains they join (the driver then
    makes each one's channel template)."""
    namespace = owner["metadata"]["namespace"]
    sources = [accelerator_template(owner, count, device_class, labels, owner_ref, base)
               for count in claimed_counts(pods)] if device_class else []
    return sources + [compute_domain(namespace, domain, labels, owner_ref)
                      for domain in domains_claimed(pods)]
